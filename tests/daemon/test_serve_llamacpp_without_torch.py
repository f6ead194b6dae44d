"""The daemon an editor starts (the embedded GGUF on llama.cpp) never loads torch: importing it
is a second of every start, and of every recovery after a crash (docs/rpc.md). It holds the model
in 2 MB pages where the machine gives them on request (daemon/runtime/huge_pages.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ngramd.daemon.protocol.client import Client, spawn_daemon, wait_ready

pytestmark = [pytest.mark.process, pytest.mark.real_model]

TEXT = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return"


def _mapped_libraries(pid: int) -> set[str]:
    return {Path(line.split()[-1]).name for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
            if len(line.split()) >= 6}


def _huge_pages_on_request() -> bool:
    from ngramd.daemon.runtime.huge_pages import _glibc_version, should_reexec, thp_mode

    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    return should_reexec(env, thp_mode(), _glibc_version())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/maps")
def test_serving_completions_and_edits_on_llamacpp_loads_no_torch(tmp_path):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed: the daemon serves on torch")
    sock = tmp_path / "d" / "s.sock"
    sock.parent.mkdir(mode=0o700)
    log = (tmp_path / "daemon.log").open("w")
    proc = spawn_daemon(sock, stderr=log)  # the embedded model, device auto: as an editor starts it
    try:
        status = wait_ready(sock, timeout=300, proc=proc)
        assert (status.get("engine") or {}).get("runtime") == "llamacpp", status.get("engine")
        with Client(sock, timeout=120) as c:
            c.call("open", {"uri": "file:///m.py", "text": TEXT, "version": 1, "languageId": "python"})
            answer = c.call("complete", {"uri": "file:///m.py", "version": 1, "offset": len(TEXT), "maxTokens": 8})
            assert answer["text"]
            start = TEXT.index("def sub")
            edit = c.call("edit", {"uri": "file:///m.py", "start": start, "end": start + len("def sub(a, b):"),
                                   "instruction": "rename sub to subtract", "maxTokens": 16})
            assert isinstance(edit["text"], str)
            memory = c.call("status")["memory"]
        if _huge_pages_on_request():
            # the model's weights (about 100 MB read into llama.cpp's buffers), not a stray page
            assert (memory.get("huge_page_bytes") or 0) >= 64 << 20, memory
        libraries = _mapped_libraries(proc.pid)
        assert any(name.startswith("libllama") for name in libraries), sorted(libraries)  # the check sees libraries
        assert not [name for name in libraries if "torch" in name], sorted(libraries)
    finally:
        proc.kill()
        proc.wait(30)
        log.close()
