"""Who is at the other end of the daemon's socket, and whether its folder is safe. Torch-free.

The socket is 0600 in a folder of the user's, but a folder that others can write to lets
another local user move the socket away and listen at its path (the daemon then exits,
"something else is at its path", and the next client would talk to the impostor, sending
it the workspace's paths and the editor's buffers). So, as tmux, ssh-agent and gpg-agent:

- ``socket_folder_problem``: the socket's folder must be owned by the user and writable by
  nobody else. In a sticky folder that others can write to (``/tmp``), the socket goes in
  a subfolder of its own, ``<folder>/ngramd-<uid>/``, created 0700 (``private_socket_path``,
  applied by ``resolve_socket_path`` so that the daemon and every client agree); a sticky
  folder lets nobody but its owner rename or remove that subfolder.
- ``peer_uid``: the uid of the process at the other end of a connected unix socket
  (``SO_PEERCRED`` on Linux, ``LOCAL_PEERCRED`` on macOS and the BSDs). The daemon closes
  a connection from another uid unanswered; a client closes one to a server of another
  uid before it sends a byte (``ForeignPeer``).
"""

from __future__ import annotations

import os
import socket
import stat
import struct
import sys
from pathlib import Path

from ngramd.daemon.protocol.rpc import DaemonUnavailable


class ForeignPeer(DaemonUnavailable):
    """The socket's other end runs as another user: nothing is sent to it."""


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the peer of a connected unix socket; None where the system cannot say."""
    if hasattr(socket, "SO_PEERCRED"):  # Linux: struct ucred {pid_t pid; uid_t uid; gid_t gid}
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return struct.unpack("3i", creds)[1]
    if sys.platform == "darwin" or "bsd" in sys.platform:
        # struct xucred {u_int cr_version; uid_t cr_uid; short cr_ngroups; gid_t cr_groups[16]}
        local_peercred = getattr(socket, "LOCAL_PEERCRED", 0x001)
        creds = sock.getsockopt(0, local_peercred, 76)  # SOL_LOCAL is 0
        return struct.unpack_from("2I", creds)[1]
    return None


def foreign_peer(sock: socket.socket) -> int | None:
    """The peer's uid when it is not this process's user (None: the same user, or unknown)."""
    try:
        uid = peer_uid(sock)
    except OSError:
        return None
    return uid if uid is not None and uid != os.getuid() else None


def check_server(sock: socket.socket, path: object) -> None:
    """Raise ``ForeignPeer`` (the socket closed) when the server at ``path`` runs as another user."""
    uid = foreign_peer(sock)
    if uid is not None:
        sock.close()
        raise ForeignPeer(f"the socket {path} is served by uid {uid}, not by this user "
                          f"(uid {os.getuid()}): nothing was sent to it. Another user may have "
                          f"taken the socket's path; stop it, or choose another --socket")


def _shared_sticky(st: os.stat_result) -> bool:
    return bool(st.st_mode & stat.S_ISVTX) and bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def private_socket_path(sock: Path) -> Path:
    """``sock``, or, when its folder is a sticky folder others can write to (``/tmp``), the
    same name in that folder's ``ngramd-<uid>`` subfolder."""
    try:
        st = os.stat(sock.parent)
    except OSError:
        return sock
    if _shared_sticky(st):
        return sock.parent / f"ngramd-{os.getuid()}" / sock.name
    return sock


def socket_folder_problem(folder: Path) -> str | None:
    """Why ``folder`` may not hold the daemon's socket (another user owns it, or may write
    to it), or None. A folder that does not exist yet is created 0700: no problem."""
    try:
        st = os.stat(folder)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"its folder {folder} cannot be examined: {exc}"
    if st.st_uid != os.getuid():
        return (f"its folder {folder} belongs to uid {st.st_uid}, not to this user (uid {os.getuid()}): "
                f"its owner could replace the socket; use a folder of your own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (f"its folder {folder} (mode {stat.S_IMODE(st.st_mode):04o}) can be written by "
                f"other users, who could replace the socket; use a folder only you can write to")
    return None
