"""Starting a detached ``ngramd serve`` for the LSP.

The daemon is one per user and outlives the editor that started it, so it runs in
its own session (no signal from the editor's terminal reaches it) with its output
in ``<socket>.log``. Its socket path and command line are the daemon's own
(daemon/paths.py, daemon/client.py; both torch-free).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from daemon.client import serve_command
from daemon.paths import prepare_socket_dir


def spawn_daemon(socket_path: str, model: str | None, device: str = "auto") -> subprocess.Popen:
    """Start a detached daemon; returns at once (the caller waits for the socket).

    The socket's directory is created 0700 here too, so that the log file beside the
    socket is private even before the daemon starts.
    """
    sock = Path(socket_path).absolute()
    prepare_socket_dir(sock)  # the daemon's own rule (mkdir's mode is masked by the umask)
    directory = str(sock.parent)
    cmd = serve_command(socket_path, model=model_argument(model), device=device)
    log_path = socket_path + ".log"
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True,
            cwd=directory, close_fds=True,
        )
    finally:
        os.close(fd)


def model_argument(model: str | None) -> str | None:
    """``model`` as the daemon, started in the socket's folder, must be given it: a path (``~``
    expanded) that names a file or folder from the editor's working directory, absolute; a
    Hugging Face id, or a path that names nothing here (the daemon says so), as it is."""
    if not model:
        return model
    path = Path(model).expanduser()
    if not path.is_absolute() and path.exists():
        return str(path.absolute())
    return str(path) if model.startswith("~") else model
