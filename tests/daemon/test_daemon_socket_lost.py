"""A daemon whose socket file is removed (a tmp cleaner, a wiped runtime dir) binds it again,
or exits when it cannot. The real Server and
Service with fakes inside and the lock `serve` takes; checks every 0.05 s, or only when a test
makes one (``check``) where the order of events matters."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import stat
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from daemon_helpers import FakeCompleter, FakeIndex, wait_until

from ngramd.daemon.protocol.client import Client
from ngramd.daemon.protocol.paths import AlreadyRunning, claim_socket, lock_holder, socket_is_live
from ngramd.daemon.protocol.rpc import EXITING

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="/proc, flock and pidfd semantics")


class LockedDaemon:
    """What ``ngramd serve`` runs, in a thread: claim the socket, serve, release the lock."""

    def __init__(self, sock: Path, check_s: float) -> None:
        from ngramd.daemon.service.server import Server
        from ngramd.daemon.service.methods import Service

        self.sock = sock
        self.lock = claim_socket(sock)
        service = Service(FakeCompleter(), FakeIndex(), model_name="fake", device="cpu",
                          socket_path=str(sock), max_message_bytes=1 << 20)
        self.server = Server(service, sock, max_message_bytes=1 << 20)
        self.server.lock = self.lock
        self.server.socket_check_s = check_s
        self.loop: asyncio.AbstractEventLoop | None = None
        ready = threading.Event()

        def on_ready() -> None:
            self.loop = asyncio.get_running_loop()
            ready.set()

        def serve() -> None:
            try:
                asyncio.run(self.server.run(on_ready))
            finally:
                self.lock.release()

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        assert ready.wait(10), "the daemon did not start"

    def check(self) -> bool:
        """One socket check now, as the server makes every ``socket_check_s``."""
        return asyncio.run_coroutine_threadsafe(self.server.check_socket(), self.loop).result(20)

    def client(self) -> Client:
        return Client(self.sock, timeout=20)

    def stop(self) -> None:
        if self.thread.is_alive():
            try:
                with self.client() as c:
                    c.call("shutdown")
            except OSError:
                pass
            self.thread.join(15)


@pytest.fixture
def sock():
    with tempfile.TemporaryDirectory(prefix="ngd-") as d:
        yield Path(d) / "run" / "s.sock"


@pytest.fixture
def daemon(sock):
    d = LockedDaemon(sock, check_s=0.05)
    yield d
    d.stop()


@pytest.fixture
def paused(sock):
    """A daemon that checks its socket only when the test calls ``check``."""
    d = LockedDaemon(sock, check_s=3600)
    yield d
    d.stop()


def _reachable(sock: Path) -> bool:
    return socket_is_live(sock, timeout=5)


def test_a_removed_socket_is_bound_again_and_the_daemon_keeps_its_documents(daemon, sock):
    with daemon.client() as editor:
        editor.call("open", {"uri": "file:///a.py", "text": "x = 1\n", "version": 1})
        sock.unlink()
        wait_until(lambda: _reachable(sock))
        assert stat.S_ISSOCK(sock.lstat().st_mode) and stat.S_IMODE(sock.lstat().st_mode) == 0o600
        with daemon.client() as other:
            assert other.call("status")["documents"]["open"] == 1  # the same daemon, its documents
        assert editor.call("status")["daemon"]["pid"] == os.getpid()  # a connection made before goes on
    with pytest.raises(AlreadyRunning):  # the lock is still held: no second daemon
        claim_socket(sock)


def test_a_wiped_socket_folder_is_made_again_with_its_lock(daemon, sock):
    shutil.rmtree(sock.parent)  # socket and lock file both gone
    wait_until(lambda: _reachable(sock))
    assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
    assert lock_holder(sock) == os.getpid()  # the lock file is back, locked, with our pid
    with pytest.raises(AlreadyRunning):
        claim_socket(sock)
    daemon.stop()
    assert not daemon.thread.is_alive()
    assert not sock.exists() and not daemon.lock.path.exists()  # a clean exit removes both


def test_a_file_put_in_the_sockets_place_is_left_alone_and_the_daemon_exits(daemon, sock):
    mine = sock.with_name("notes.txt")
    mine.write_text("the user's\n")
    with daemon.client() as editor:
        editor.call("status")
        os.rename(mine, sock)  # replaces the socket file at once: never absent in between
        editor.read_until_closed(timeout=20)
        assert [(n.method, n.params) for n in editor.notifications] == [(EXITING, {"reason": "socket lost"})]
    daemon.thread.join(20)
    assert not daemon.thread.is_alive()
    assert sock.read_text() == "the user's\n"
    assert lock_holder(sock) is None  # let go: nothing blocks the next daemon's lock


@pytest.mark.parametrize("newcomer_bound", [False, True], ids=["loading", "serving"])
def test_a_daemon_that_took_the_path_after_a_wipe_is_left_alone(paused, sock, newcomer_bound):
    """Socket and lock file wiped; another daemon then claims the path (and is still loading its
    model, or serves already): the first one neither binds over it nor takes its lock, it exits."""
    shutil.rmtree(sock.parent)
    newcomer = claim_socket(sock)
    listener = socket.socket(socket.AF_UNIX)
    try:
        if newcomer_bound:
            listener.bind(str(sock))
            listener.listen()
        assert paused.check() is False
        paused.thread.join(20)
        assert not paused.thread.is_alive()
        assert is_bound(sock) == newcomer_bound  # not bound over, nor removed
        assert newcomer.path.exists()
        with pytest.raises(AlreadyRunning):  # the newcomer still holds its lock
            claim_socket(sock)
    finally:
        listener.close()
        newcomer.release()


def is_bound(sock: Path) -> bool:
    return sock.exists() and _reachable(sock)


def test_no_check_binds_while_the_socket_is_there(paused, sock):
    inode = sock.lstat().st_ino
    assert paused.check() is True
    assert sock.lstat().st_ino == inode
