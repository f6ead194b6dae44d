"""Paths that resolve nowhere (a symlink loop: Path.resolve() raises RuntimeError on Python
3.10-3.12, OSError later) are ordinary bad input: documents still open and close whole,
a workspace folder is refused with INVALID_PARAMS, ``serve --workspace`` exits 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ngramd.daemon.protocol.rpc import INVALID_PARAMS, RpcError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def loop(tmp_path: Path) -> Path:
    (tmp_path / "loop1.py").symlink_to("loop2.py")
    (tmp_path / "loop2.py").symlink_to("loop1.py")
    return tmp_path / "loop1.py"


def test_a_document_whose_path_loops_opens_and_closes_whole(inproc, loop):
    uri = loop.as_uri()
    with inproc.client() as c:
        c.call("open", {"uri": uri, "text": "z = 2\n", "version": 1})
        assert inproc.index.buffers.get(uri) == "z = 2\n"  # the index has it, as for any document
        assert c.call("status")["documents"]["open"] == 1
        c.call("close", {"uri": uri})
        assert c.call("status")["documents"]["open"] == 0
        assert uri not in inproc.index.buffers


@pytest.mark.parametrize("key", ["added", "removed"])
def test_a_workspace_folder_whose_path_loops_is_invalid_params(inproc, loop, key):
    with inproc.client() as c:
        for folder in (str(loop), str(loop / "sub")):
            with pytest.raises(RpcError) as err:
                c.call("workspaceFolders", {key: [folder]})
            assert err.value.code == INVALID_PARAMS and "loop1.py" in err.value.message
        assert c.call("status")["daemon"]["ready"]


def test_serve_refuses_a_workspace_whose_path_loops(loop, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ngramd.daemon.cli", "serve", "--model", "tiny",
                           "--socket", str(tmp_path / "s.sock"), "--workspace", str(loop)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "workspace" in proc.stderr and "loop1.py" in proc.stderr and "Traceback" not in proc.stderr
