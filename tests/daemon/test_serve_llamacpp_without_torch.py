"""The daemon an editor starts (the embedded GGUF on llama.cpp) never loads torch: importing it
is a second of every start, and of every recovery after a crash (docs/rpc.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ngramd.daemon.protocol.client import Client, spawn_daemon, wait_ready

pytestmark = [pytest.mark.process, pytest.mark.real_model]

TEXT = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return"


def _mapped_libraries(pid: int) -> set[str]:
    return {Path(line.split()[-1]).name for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
            if len(line.split()) >= 6}


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
        libraries = _mapped_libraries(proc.pid)
        assert any(name.startswith("libllama") for name in libraries), sorted(libraries)  # the check sees libraries
        assert not [name for name in libraries if "torch" in name], sorted(libraries)
    finally:
        proc.kill()
        proc.wait(30)
        log.close()
