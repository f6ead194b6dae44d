"""Helpers for the daemon service tests: fakes with the engine's and index's API,
an in-process daemon, a real daemon process, and a polling ``wait_until``."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ngramd.daemon.protocol.client import Client, spawn_daemon, wait_ready
from ngramd.daemon.protocol.requests import CompletionResult, GenerationStats, Prepared

REPO = Path(__file__).resolve().parents[2]


class FakeCompleter:
    """``complete`` returns the 8 characters after the cursor, reversed.

    Text containing ``BLOCK`` blocks until cancelled (or 30 s), so that tests can
    observe queueing, supersede and cancel deterministically.
    """

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.typed: list[str | None] = []  # each prepareEdit's instruction (None: not given)
        self.edits: list[Any] = []  # each edit's EditRequest
        self.started = threading.Event()

    def edit_length_bound(self) -> Any:
        """As the real EditingCompleter's: the bound of ``runtime``, once a test sets one."""
        from ngramd.daemon.edit.session import EditingCompleter

        return EditingCompleter.edit_length_bound(self) if getattr(self, "runtime", None) is not None else None

    def complete(self, req: Any, cancel: threading.Event | None = None) -> CompletionResult:
        self.calls.append(req.uri)
        if "BLOCK" in req.text:
            self.started.set()
            assert cancel is not None
            cancel.wait(30)
            return CompletionResult("", [], req.text[:req.offset], GenerationStats(),
                                    cancelled=True, stop_reason="cancelled")
        text = req.text[req.offset:req.offset + 8][::-1]
        stats = GenerationStats(forward_passes=1, drafted=4, accepted=3, generated=len(text))
        return CompletionResult(text, [ord(c) for c in text], req.text[:req.offset], stats,
                                stop_reason="max_tokens")

    def edit(self, req: Any, cancel: threading.Event | None = None) -> CompletionResult:
        """The selection upper-cased (blocks like ``complete`` on ``BLOCK``); the request is kept
        in ``edits``."""
        self.calls.append(req.uri)
        self.edits.append(req)
        if "BLOCK" in req.text:
            self.started.set()
            assert cancel is not None
            cancel.wait(30)
            return CompletionResult("", [], "", GenerationStats(), cancelled=True, stop_reason="cancelled")
        text = req.text[req.start:req.end].upper()
        return CompletionResult(text, [ord(c) for c in text], "", GenerationStats(generated=len(text)),
                                stop_reason="eos")

    def drop_cache(self, uri: str) -> None:
        self.calls.append(f"drop {uri}")

    def prepare_edit(self, uri: str, text: str, start: int, end: int, cancel: Any = None,
                     instruction: str | None = None) -> Prepared:
        """What the real one reports, by characters (blocks like ``complete`` on ``BLOCK``); the
        instruction typed so far (None: none) is noted in ``typed``."""
        self.typed.append(instruction)
        return self._prepare(uri, text, end, cancel)

    def prepare_complete(self, uri: str, text: str, offset: int, cancel: Any = None) -> Prepared:
        """As ``prepare_edit``, the prompt's end at ``offset``."""
        return self._prepare(uri, text, offset, cancel)

    def _prepare(self, uri: str, text: str, end: int, cancel: Any) -> Prepared:
        self.calls.append(uri)
        if "BLOCK" in text:
            self.started.set()
            cancel.wait(30)
            return Prepared(0, 0, 0, cancelled=True)
        return Prepared(end + 1, end, 0)


def real_index():
    """The real NgramIndex over one token per character (texts read back with ``chr``)."""
    from ngramd.index import IndexConfig, NgramIndex

    return NgramIndex(lambda texts: [[ord(c) for c in t] for t in texts], IndexConfig(min_n=2, max_match=8))


class FakeIndex:
    """Records the calls the service makes; ``index_workspace`` lists files."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.buffers: dict[str, str] = {}
        self.files: dict[str, str] = {}
        self.log: list[tuple] = []

    def open_buffer(self, uri: str, text: str) -> None:
        with self.lock:
            self.buffers[uri] = text
            self.log.append(("open", uri))

    def edit_buffer(self, uri: str, start: int, end: int, new_text: str, result: str | None = None) -> None:
        with self.lock:
            old = self.buffers[uri]
            self.buffers[uri] = old[:start] + new_text + old[end:]
            assert result is None or result == self.buffers[uri], "the daemon passed a wrong result text"
            self.log.append(("edit", uri, start, end))

    def close_buffer(self, uri: str) -> None:
        with self.lock:
            self.buffers.pop(uri, None)
            self.log.append(("close", uri))

    def index_file(self, path: Path) -> bool:
        with self.lock:
            self.files[str(path)] = Path(path).read_text()
            self.log.append(("index", str(path)))
        return True

    def links_to(self, path: Path, below: bool = False) -> list[str]:
        return []

    def has_file(self, path: Path) -> bool:
        with self.lock:
            return str(path) in self.files

    def remove_file(self, path: Path) -> None:
        with self.lock:
            self.files.pop(str(path), None)
            self.log.append(("remove", str(path)))

    def remove_tree(self, path: Path) -> int:
        key, prefix = str(path), str(path) + "/"
        with self.lock:
            gone = [k for k in self.files if k == key or k.startswith(prefix)]
            for k in gone:
                del self.files[k]
                self.log.append(("remove", k))
        return len(gone)

    def forget_root(self, root: Path, keep: Any = None) -> int:
        prefix = str(Path(root)) + "/"
        with self.lock:
            gone = [k for k in self.files if k.startswith(prefix) and not (keep and keep(k))]
            for k in gone:
                del self.files[k]
            self.log.append(("forget", str(root)))
        return len(gone)

    def index_workspace(self, root: Path, progress: Any = None, stop_event: Any = None) -> dict:
        """Like NgramIndex's: the scan is the truth for ``root`` (files ignored since leave)."""
        from ngramd.daemon.workspace.ignorer import Ignorer

        ignorer = Ignorer(Path(root))
        found = [p for p in sorted(Path(root).rglob("*.py")) if not ignorer.ignored(p)]
        with self.lock:
            self.log.append(("scan", str(root)))
            prefix = str(Path(root)) + "/"
            for key in [k for k in self.files if k.startswith(prefix) and Path(k) not in found]:
                del self.files[key]
        for n, p in enumerate(found, 1):
            self.index_file(p)
            if progress:
                progress(n, n)
        return {"files": len(found)}

    def stats(self) -> dict:
        with self.lock:
            return {"buffers": len(self.buffers), "files": len(self.files)}


class InProcessDaemon:
    """The real Server and Service on a temp socket, in a thread, with fakes inside."""

    def __init__(self, sock: Path, max_message_bytes: int = 1 << 20) -> None:
        from ngramd.daemon.service.server import Server
        from ngramd.daemon.service.methods import Service

        self.sock = sock
        self.completer = FakeCompleter()
        self.index = FakeIndex()
        self.service = Service(self.completer, self.index, model_name="fake", device="cpu",
                               socket_path=str(sock), max_message_bytes=max_message_bytes)
        self.server = Server(self.service, sock, max_message_bytes=max_message_bytes)
        self._ready = threading.Event()
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self.server.run(self._ready.set)), daemon=True)
        self._thread.start()
        assert self._ready.wait(10), "in-process daemon did not start"

    def client(self, timeout: float = 20.0) -> Client:
        return Client(self.sock, timeout=timeout)

    def stop(self) -> None:
        if self._thread.is_alive():
            try:
                with self.client() as c:
                    c.call("shutdown")
            except OSError:
                pass
            self._thread.join(15)


class RealDaemon:
    """A ``serve --model tiny`` process; its socket uses the default-path logic
    (XDG_RUNTIME_DIR points into a temp dir), so the permission rules are tested."""

    def __init__(self, root: Path, workspace: Path) -> None:
        self.root = root
        self.workspace = workspace
        self.runtime_dir = root / "run"
        self.runtime_dir.mkdir(mode=0o700)
        self.env = {**os.environ, "XDG_RUNTIME_DIR": str(self.runtime_dir),
                    "PYTHONPATH": str(REPO)}
        self.sock = self.runtime_dir / "ngramd" / "ngramd.sock"
        self.log_path = root / "daemon.log"
        self._log = open(self.log_path, "w")
        self.proc = spawn_daemon(None, model="tiny", device="cpu", workspaces=[workspace],
                                 extra_args=["--max-message-bytes", str(1 << 20)],
                                 env=self.env, stderr=self._log)
        try:
            wait_ready(self.sock, timeout=240, proc=self.proc)
        except Exception:
            self.proc.kill()
            self._log.close()
            raise AssertionError("daemon did not start:\n" + self.log_path.read_text()[-4000:])
        # the readiness line comes before any request is served
        self.ready_line = self.proc.stdout.readline()

    def client(self, timeout: float = 120.0) -> Client:
        return Client(self.sock, timeout=timeout)

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ngramd.daemon.cli", *args], env=self.env,
                              cwd=REPO, capture_output=True, text=True, timeout=timeout)

    def log(self) -> str:
        return self.log_path.read_text()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def wait_until(pred: Any, timeout: float = 30.0, interval: float = 0.05) -> Any:
    """Poll ``pred`` until truthy (returned) or fail; never a timed assertion on speed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")
