"""Starting a detached ``ngramd serve`` for the LSP.

The daemon is one per user and outlives the editor that started it, so it runs in
its own session (no signal from the editor's terminal reaches it) with its output
in ``<socket>.log``, which every daemon started there appends to (opened ``O_NOFOLLOW``:
never through a symbolic link planted there). Its socket path and
command line are the daemon's own (daemon/protocol/paths.py, daemon/protocol/client.py; both torch-free).
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
from pathlib import Path

from ngramd.daemon.protocol.client import serve_command
from ngramd.daemon.protocol.paths import prepare_socket_dir

# The daemon's log lines start with logging's ``%(asctime)s`` (daemon/cli/serve_cmd.py): a
# reason that quoted it would differ each start, and the user be told the same one again.
_TIMESTAMP = re.compile(r"\A\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[,.]\d+ ")


def spawn_daemon(socket_path: str, model: str | None, device: str = "auto",
                 exact_kernels: bool = False) -> subprocess.Popen:
    """Start a detached daemon; returns at once (the caller waits for the socket).

    The socket's directory is created 0700 here too, so that the log file beside the
    socket is private even before the daemon starts.
    """
    sock = Path(socket_path).absolute()
    prepare_socket_dir(sock)  # the daemon's own rule (mkdir's mode is masked by the umask)
    directory = str(sock.parent)
    cmd = serve_command(socket_path, model=model_argument(model), device=device,
                        extra_args=["--exact-kernels"] if exact_kernels else ())
    fd = open_log(socket_path)
    try:
        return subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True,
            cwd=directory, close_fds=True,
        )
    finally:
        os.close(fd)


def open_log(socket_path: str) -> int:
    """The log opened for appending (created 0600), never through a symbolic link: one planted
    at ``<socket>.log`` would have the daemon append to the file it names."""
    path = log_path(socket_path)
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(exc.errno, f"{path} is a symbolic link; ngramd will not write its log "
                                     f"through it: remove it") from None
        raise


def log_path(socket_path: str) -> str:
    """Where the daemons started for ``socket_path`` write their output."""
    return socket_path + ".log"


def log_size(socket_path: str) -> int:
    """The log's length now, where the output of a daemon started next begins (0: no log yet)."""
    try:
        return os.lstat(log_path(socket_path)).st_size
    except OSError:
        return 0


def log_tail(socket_path: str, since: int, lines: int = 3, limit: int = 400) -> str:
    """The last ``lines`` non-blank lines written to the log from byte ``since`` on (a daemon's
    last words: why it exited), without their timestamps, joined into one line of at most
    ``limit`` characters (its end); "" when there are none or the log cannot be read."""
    try:
        with os.fdopen(os.open(log_path(socket_path), os.O_RDONLY | os.O_NOFOLLOW), "rb") as f:
            f.seek(max(since, f.seek(0, os.SEEK_END) - 4 * limit))  # only the end matters
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    said = " | ".join([_TIMESTAMP.sub("", line.strip()) for line in text.splitlines() if line.strip()][-lines:])
    return said if len(said) <= limit else "..." + said[-(limit - 3):]


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
