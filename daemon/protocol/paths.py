"""Where the daemon's unix socket lives, and how it is claimed safely. Torch-free.

Default: ``$XDG_RUNTIME_DIR/ngramd/ngramd.sock``; without XDG_RUNTIME_DIR, the
user cache dir (platformdirs) ``.../ngramd/ngramd.sock``. The ``ngramd``
directory is created 0700 (and tightened to 0700 if it exists); the socket is
made 0600. A ``--socket`` path elsewhere keeps its parent directory as it is
(created 0700 if missing); the socket itself is still 0600.

Claiming: ``<socket>.lock`` is held with ``flock`` for the daemon's life, so a
second ``serve`` is refused even while the first is still loading its model
(before the socket exists). A socket file with no lock holder and no listener
is stale and removed; anything else at the socket's path (a regular file, a
directory, a link) is never touched: the claim fails with ``NotASocket``.

The lock file is removed on a clean exit. Lock protocol (so that removing it
never lets two daemons hold two different lock files): the holder unlinks the
path *while still holding* the flock, then unlocks; an acquirer, once its flock
succeeds, checks that the path still names the inode it locked, and otherwise
(it locked a file just unlinked) closes it and tries again on the new path.

A socket file removed while the daemon runs (a tmp cleaner, a wiped runtime dir) would leave it
holding the lock, reachable by nobody: the server checks its socket every few seconds and,
when its path is empty, takes the lock again (``SocketLock.reacquire``: a lock file removed
too is locked anew; one that a starting daemon locked meanwhile makes it exit instead) and
binds the path again; anything else found there is never touched (it exits).

Probes: ``lock_holder`` (``ngramd status``/``stop``, the LSP waiting for a daemon) takes a
*shared* flock for an instant to learn whether a daemon holds the lock. An acquirer whose
exclusive flock fails therefore tries a shared one: if that succeeds no daemon holds the
lock, only probes (or another starter doing the same test), so it lets go and tries the
exclusive lock again (for at most ``PROBE_WAIT_S``) rather than report a daemon that is
not there. Only an exclusive holder makes it raise AlreadyRunning, so two daemons still
never hold the lock together.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
import time
from pathlib import Path

import platformdirs

from ngramd.daemon.protocol.peer import private_socket_path, socket_folder_problem

SOCKET_NAME = "ngramd.sock"
# sockaddr_un.sun_path holds 108 bytes on Linux (104 on macOS), the final NUL included
MAX_SOCKET_PATH_BYTES = 103
# tries to lock ``<socket>.lock`` when it keeps being removed under us (each retry means a
# daemon exited between our open and our flock; more than a few in a row is not a race)
LOCK_ATTEMPTS = 10
# how long an acquirer waits while the lock is held by probes only (each holds it for an
# instant: longer means something other than ngramd holds it), and the pause between tries
PROBE_WAIT_S = 5.0
PROBE_RETRY_S = 0.001
_BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)


class NotASocket(OSError):
    """Something other than a socket is at the socket's path (or the path is unusable)."""


class UnsafeSocketFolder(NotASocket):
    """The socket's folder belongs to another user, or others may write to it."""


# What Path.resolve() raises for a path that names no real place: OSError (a symlink loop on
# Python 3.13+), ValueError (a NUL byte), RuntimeError (a symlink loop on Python 3.10-3.12).
UNRESOLVABLE = (OSError, ValueError, RuntimeError)


def is_socket(path: Path) -> bool:
    """True when ``path`` itself (not a link's target) is a unix socket."""
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


def holds_non_socket(path: Path) -> bool:
    """True when something other than a unix socket is at ``path`` (a link counts as other).

    One ``lstat``: a stale socket that another daemon removes meanwhile reads as absent,
    never as "not a socket" (``exists()`` then ``is_socket()`` would see it vanish between them).
    """
    try:
        return not stat.S_ISSOCK(os.lstat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):  # nothing there (what ``exists()`` said too)
        return False


def default_socket_path() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "ngramd" / SOCKET_NAME
    return Path(platformdirs.user_cache_dir("ngramd")) / SOCKET_NAME


def resolve_socket_path(arg: str | os.PathLike[str] | None) -> Path:
    """The socket's path; one in a sticky folder that others can write to (``/tmp/x.sock``)
    is moved to that folder's own ``ngramd-<uid>`` subfolder (daemon/protocol/peer.py)."""
    return private_socket_path(Path(arg).expanduser().absolute()) if arg else default_socket_path()


def prepare_socket_dir(sock: Path) -> None:
    """Create the socket's directory 0700; tighten the default ``ngramd`` dir to 0700.
    ``UnsafeSocketFolder`` when the folder belongs to another user or others may write to it."""
    parent = sock.parent
    if not parent.exists():
        parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(parent, 0o700)  # mkdir's mode is masked by the umask
    elif sock == default_socket_path():
        os.chmod(parent, 0o700)
    problem = socket_folder_problem(parent)
    if problem:
        raise UnsafeSocketFolder(f"ngramd will not use the socket {sock}: {problem}")


def socket_is_live(sock: Path, timeout: float = 1.0) -> bool:
    """True when something accepts connections on ``sock``."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(sock))
        return True
    except OSError:
        return False
    finally:
        s.close()


# `ngramd serve`'s exit status when another daemon holds the socket's lock (running or still
# loading); the LSP's daemon link then waits for that daemon instead of backing off.
EXIT_ALREADY_RUNNING = 3


class AlreadyRunning(Exception):
    pass


class SocketLock:
    """The ``<socket>.lock`` flock; the file records the holder's pid."""

    def __init__(self, sock: Path) -> None:
        self.path = sock.with_name(sock.name + ".lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock; raises AlreadyRunning when a daemon holds it, NotASocket when the lock
        path holds a file that is not an ngramd lock (never written over: it may be the user's)."""
        for _ in range(LOCK_ATTEMPTS):
            fd = self._open()
            try:
                self._check_is_lock_file(fd)
                self._lock_exclusive(fd)
            except BaseException:
                os.close(fd)
                raise
            if _names_inode(self.path, fd):
                os.ftruncate(fd, 0)
                os.write(fd, str(os.getpid()).encode())
                self._fd = fd
                return
            os.close(fd)  # its holder removed it on exit after we opened it: take the new file
        raise OSError(f"could not lock {self.path}: it was removed {LOCK_ATTEMPTS} times while locking")

    def _open(self) -> int:
        """The lock file opened read-write (created if missing), never through a symbolic link."""
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise NotASocket(f"{self.path} is a symbolic link; ngramd will not write through it: "
                                 f"remove it or choose another --socket") from None
            if exc.errno == errno.EISDIR:
                raise NotASocket(f"{self.path} exists and is not an ngramd lock file (a directory): "
                                 f"choose another --socket") from None
            raise

    def _check_is_lock_file(self, fd: int) -> None:
        """NotASocket unless ``fd`` is a regular file holding nothing or a pid (what ngramd writes)."""
        st = os.fstat(fd)
        content = os.pread(fd, 64, 0) if stat.S_ISREG(st.st_mode) else b""
        holds_a_pid_or_nothing = st.st_size <= 20 and (not content.strip() or content.strip().isdigit())
        if not stat.S_ISREG(st.st_mode) or not holds_a_pid_or_nothing:
            raise NotASocket(f"{self.path} exists and is not an ngramd lock file; ngramd will not "
                             f"overwrite it: choose another --socket")

    def _lock_exclusive(self, fd: int) -> None:
        """flock ``fd`` exclusively; AlreadyRunning when a daemon (an exclusive holder) has it.
        Waits out probes (shared holders), see the module docstring."""
        deadline = time.monotonic() + PROBE_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError as exc:
                if exc.errno not in _BUSY:
                    raise
            try:  # a shared lock is granted only while nobody holds it exclusively
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in _BUSY:
                    raise
                holder = _read_pid(fd)
                who = f" (pid {holder})" if holder else ""
                raise AlreadyRunning(f"another ngramd daemon{who} is running or starting "
                                     f"on {self.path.with_suffix('')}") from exc
            fcntl.flock(fd, fcntl.LOCK_UN)
            if time.monotonic() > deadline:
                raise OSError(f"{self.path} has been locked shared (not by an ngramd daemon) "
                              f"for {PROBE_WAIT_S:.0f} s")
            time.sleep(PROBE_RETRY_S)

    def reacquire(self) -> None:
        """Hold the lock at its path again when our lock file was removed (a wiped runtime dir);
        AlreadyRunning when a daemon started since then holds the new one."""
        if self._fd is None or _names_inode(self.path, self._fd):
            return
        lost, self._fd = self._fd, None
        try:
            self.acquire()
        finally:
            os.close(lost)  # unlinked: no acquirer can take it for the path (they check the inode)

    def release(self) -> None:
        """Remove the lock file, then unlock (the order the protocol above needs)."""
        if self._fd is None:
            return
        if _names_inode(self.path, self._fd):  # never a file that replaced ours meanwhile
            try:
                self.path.unlink()
            except OSError:
                pass
        os.ftruncate(self._fd, 0)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None


def lock_holder(sock: Path) -> int | None:
    """The pid of the daemon holding ``sock``'s lock (running, or still loading its model), else None."""
    lock = SocketLock(sock)
    try:
        fd = os.open(lock.path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:  # none (no daemon, or its lock just removed at its exit), a link (never
        # ngramd's: serve refuses one), a path under a file, or not ours to read: no daemon of ours
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return _read_pid(fd) or 0
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def socket_path_problem(sock: Path) -> str | None:
    """Why no daemon can serve ``sock`` (too long for a unix socket, a file that is not one), or None."""
    size = len(os.fsencode(sock))
    if size > MAX_SOCKET_PATH_BYTES:
        return f"the path is {size} bytes long; unix sockets allow {MAX_SOCKET_PATH_BYTES}: choose a shorter --socket"
    if holds_non_socket(sock):
        return f"{sock} exists and is not a socket; ngramd will not remove it"
    return None


def claim_socket(sock: Path) -> SocketLock:
    """Take the lock and clear a stale socket file; raises AlreadyRunning if live,
    NotASocket if the path is too long or holds anything but a socket."""
    problem = socket_path_problem(sock)
    if problem:
        raise NotASocket(problem)
    prepare_socket_dir(sock)
    lock = SocketLock(sock)
    lock.acquire()
    try:
        if holds_non_socket(sock):  # appeared since the check above
            raise NotASocket(f"{sock} exists and is not a socket; ngramd will not remove it")
        if is_socket(sock):
            if socket_is_live(sock):
                raise AlreadyRunning(f"an ngramd daemon already serves {sock}")
            sock.unlink()  # stale: its daemon died without cleaning up
    except BaseException:
        lock.release()
        raise
    return lock


def _names_inode(path: Path, fd: int) -> bool:
    """True when ``path`` is the very file open as ``fd`` (not removed, not replaced)."""
    try:
        st, fst = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (fst.st_dev, fst.st_ino)


def _read_pid(fd: int) -> int | None:
    try:
        data = os.pread(fd, 32, 0).decode().strip()
        return int(data) if data else None
    except (OSError, ValueError):
        return None
