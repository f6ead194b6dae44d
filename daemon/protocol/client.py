"""A small synchronous client for the daemon's socket. Torch-free.

Used by ``ngramd status`` / ``ngramd stop``, the tests and the bench::

    with Client(socket_path) as c:          # None: the default socket path
        c.call("open", {"uri": u, "text": t, "version": 1})
        result = c.call("complete", {"uri": u, "offset": 10, "maxTokens": 16})
        msgid = c.send("complete", {...}); ...; c.wait(msgid)   # pipelined

Readiness: the daemon creates its socket only when the model is loaded and it
can serve, and prints ``ngramd: ready on <socket> (pid N)`` on stdout at that
moment. A client that did not start the daemon detects readiness by connecting
and calling ``status`` (``wait_ready`` does exactly that, with a deadline).
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from ngramd.daemon.protocol.connect import connect_unix
from ngramd.daemon.protocol.paths import resolve_socket_path
from ngramd.daemon.protocol.peer import ForeignPeer
from ngramd.daemon.protocol.rpc import (
    DaemonUnavailable, FrameReader, Notification, Response, RpcError, decode, pack_notification, pack_request,
)

READY_PREFIX = "ngramd: ready on "


class Client:
    """One connection. Not thread-safe: use one Client per thread."""

    def __init__(self, socket_path: str | os.PathLike[str] | None = None,
                 timeout: float | None = 60.0) -> None:
        self.socket_path = resolve_socket_path(socket_path)
        self.timeout = timeout
        try:  # retried while the daemon's listen queue is full; refused to a server of another uid
            self.sock = connect_unix(self.socket_path, timeout)
        except ForeignPeer:
            raise
        except OSError as exc:
            raise DaemonUnavailable(f"no ngramd daemon on {self.socket_path}: {exc}") from exc
        self._frames = FrameReader()
        self._ids = itertools.count(1)
        self._responses: dict[int, Response] = {}
        self.notifications: list[Notification] = []

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # -- sending ----------------------------------------------------------------------

    def send(self, method: str, params: Any = None) -> int:
        """Send a request without waiting; returns its msgid for ``wait``."""
        msgid = next(self._ids)
        self.send_raw(pack_request(msgid, method, {} if params is None else params))
        return msgid

    def notify(self, method: str, params: Any = None) -> None:
        self.send_raw(pack_notification(method, {} if params is None else params))

    def send_raw(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise DaemonUnavailable(f"the daemon closed the connection: {exc}") from exc

    def call(self, method: str, params: Any = None, timeout: float | None = None) -> Any:
        """Request and wait; raises RpcError for an error reply."""
        return self.wait(self.send(method, params), timeout)

    # -- receiving --------------------------------------------------------------------

    def wait(self, msgid: int, timeout: float | None = None) -> Any:
        resp = self.wait_response(msgid, timeout)
        if resp.error is not None:
            raise RpcError(resp.error["code"], resp.error["message"])
        return resp.result

    def wait_response(self, msgid: int, timeout: float | None = None) -> Response:
        """The raw response to ``msgid`` (buffering others and notifications)."""
        deadline = self._deadline(timeout)
        while msgid not in self._responses:
            self._read_some(deadline)
        return self._responses.pop(msgid)

    def wait_notification(self, method: str = "error", timeout: float | None = None) -> Notification:
        deadline = self._deadline(timeout, 60.0)
        while True:
            for i, n in enumerate(self.notifications):
                if n.method == method:
                    return self.notifications.pop(i)
            self._read_some(deadline)

    def read_until_closed(self, timeout: float | None = None) -> None:
        """Buffer replies and notifications until the daemon closes the connection."""
        deadline = self._deadline(timeout, 60.0)
        try:
            while True:
                self._read_some(deadline)
        except DaemonUnavailable:
            return

    def _deadline(self, timeout: float | None, fallback: float | None = None) -> float | None:
        """``timeout``, else the client's, else ``fallback`` seconds from now (None: no limit)."""
        for t in (timeout, self.timeout, fallback):
            if t is not None:
                return time.monotonic() + t
        return None

    def _read_some(self, deadline: float | None) -> None:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply from the daemon in time")
            self.sock.settimeout(left)
        try:
            data = self.sock.recv(65536)
        except socket.timeout as exc:
            raise TimeoutError("no reply from the daemon in time") from exc
        except ConnectionResetError as exc:
            raise DaemonUnavailable(f"the daemon closed the connection: {exc}") from exc
        if not data:
            raise DaemonUnavailable("the daemon closed the connection")
        for obj in self._frames.feed(data):
            msg = decode(obj)
            if isinstance(msg, Response):
                self._responses[msg.msgid] = msg
            elif isinstance(msg, Notification):
                self.notifications.append(msg)


def wait_ready(socket_path: str | os.PathLike[str] | None = None, timeout: float = 120.0,
               proc: subprocess.Popen | None = None) -> dict[str, Any]:
    """Poll connect + ``status`` until the daemon answers; returns its status.

    Raises DaemonUnavailable if ``proc`` exits first, TimeoutError after ``timeout``.
    """
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise DaemonUnavailable(f"the daemon exited with code {proc.returncode}")
        try:
            with Client(socket_path, timeout=10.0) as c:
                return c.call("status")
        except (OSError, RpcError, TimeoutError) as exc:
            last = exc
            time.sleep(0.1)
    raise TimeoutError(f"no daemon ready on {resolve_socket_path(socket_path)}: {last}")


def serve_command(socket_path: str | os.PathLike[str] | None = None, *, model: str | None = None,
                  device: str = "auto", workspaces: Sequence[str | os.PathLike[str]] = (),
                  extra_args: Sequence[str] = (), python: str = sys.executable) -> list[str]:
    """``ngramd serve`` through ``python`` (this interpreter: no PATH lookup needed)."""
    cmd = [python, "-m", "ngramd.daemon.cli", "serve", "--device", device]
    if socket_path is not None:
        cmd += ["--socket", str(socket_path)]
    if model:
        cmd += ["--model", model]
    for ws in workspaces:
        cmd += ["--workspace", str(ws)]
    return cmd + list(extra_args)


def spawn_daemon(socket_path: str | os.PathLike[str] | None = None, *, model: str | None = None,
                 device: str = "auto", workspaces: Sequence[str | os.PathLike[str]] = (),
                 extra_args: Sequence[str] = (), env: dict[str, str] | None = None,
                 python: str = sys.executable, stdout: Any = subprocess.PIPE,
                 stderr: Any = None) -> subprocess.Popen:
    """Start ``ngramd serve`` in the background, attached to this process (does not wait).

    Pair with ``wait_ready(socket_path, proc=proc)``; stop with ``Client(...).call("shutdown")``
    and ``proc.wait()``. (The LSP starts a detached one: lsp/spawn.py.)
    """
    cmd = serve_command(socket_path, model=model, device=device, workspaces=workspaces,
                        extra_args=extra_args, python=python)
    return subprocess.Popen(cmd, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL, text=True,
                            env=env, cwd=str(Path(__file__).resolve().parent.parent))
