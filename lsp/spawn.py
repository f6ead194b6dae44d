"""Starting a detached ``ngramd serve`` for the LSP.

The daemon is one per user and outlives the editor that started it, so it runs in
its own session (no signal from the editor's terminal reaches it) with its output
in ``<socket>.log``. Its socket path and command line are the daemon's own
(daemon/paths.py, daemon/client.py; both torch-free).
"""

from __future__ import annotations

import os
import subprocess

from daemon.client import serve_command


def spawn_daemon(socket_path: str, model: str | None, device: str = "auto") -> subprocess.Popen:
    """Start a detached daemon; returns at once (the caller waits for the socket).

    The socket's directory is created 0700 here too, so that the log file beside the
    socket is private even before the daemon starts.
    """
    directory = os.path.dirname(os.path.abspath(socket_path))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    cmd = serve_command(socket_path, model=model, device=device)
    log_path = socket_path + ".log"
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True,
            cwd=directory, close_fds=True,
        )
    finally:
        os.close(fd)
