"""Finding and starting the daemon: its socket path and a detached ``ngramd serve``.

The daemon is one per user and outlives the editor that started it, so it runs in
its own session (no signal from the editor's terminal reaches it) with its output
in ``<socket>.log``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile


def default_socket_path() -> str:
    """The same default as ``ngramd serve``: daemon/paths.py when it is there.

    Fallback: ``$XDG_RUNTIME_DIR/ngramd/ngramd.sock``, else a per-user directory
    under the temp dir.
    """
    try:
        from daemon import paths  # torch-free by contract
    except ImportError:
        paths = None
    for name in ("default_socket_path", "socket_path"):
        fn = getattr(paths, name, None)
        if callable(fn):
            try:
                return str(fn())
            except TypeError:
                continue
    runtime = os.environ.get("XDG_RUNTIME_DIR") or os.path.join(
        tempfile.gettempdir(), f"ngramd-{os.getuid()}")
    return os.path.join(runtime, "ngramd", "ngramd.sock")


def serve_command(socket_path: str, model: str | None, device: str = "auto") -> list[str]:
    """``ngramd serve`` through this interpreter, so that no PATH lookup is needed."""
    cmd = [sys.executable, "-m", "daemon.cli", "serve", "--socket", socket_path, "--device", device]
    if model:
        cmd += ["--model", model]
    return cmd


def spawn_daemon(socket_path: str, model: str | None, device: str = "auto") -> subprocess.Popen:
    """Start a detached daemon; returns at once (the caller waits for the socket).

    The socket's directory is created 0700 here too, so that the log file beside the
    socket is private even before the daemon starts.
    """
    directory = os.path.dirname(os.path.abspath(socket_path))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    cmd = serve_command(socket_path, model, device)
    log_path = socket_path + ".log"
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True,
            cwd=directory, close_fds=True,
        )
    finally:
        os.close(fd)
