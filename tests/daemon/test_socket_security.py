"""The daemon's socket against another local user and against bursts of connects
(daemon/protocol/peer.py, daemon/protocol/connect.py, daemon/service/server.py):

- a socket folder that another user owns or may write to is refused; in a sticky shared
  folder (``/tmp``) the socket goes in its own 0700 subfolder;
- the daemon closes a connection from another uid unanswered, and the CLI's client
  refuses a server of another uid before it sends a byte;
- the listen queue takes a burst of connects while the daemon's loop is busy, and the
  client tries a full queue again instead of failing at once.

Another uid: as root, the other side runs in a subprocess that calls ``os.setuid``;
otherwise (and in addition) the peer-credential reader is monkeypatched.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from ngramd.daemon.protocol import connect, peer
from ngramd.daemon.protocol.client import Client
from ngramd.daemon.protocol.paths import UnsafeSocketFolder, claim_socket, resolve_socket_path
from ngramd.daemon.protocol.peer import ForeignPeer
from ngramd.daemon.protocol.rpc import DaemonUnavailable, pack_request

pytestmark = pytest.mark.process

OTHER_UID = 65534  # nobody
as_root = pytest.mark.skipif(os.getuid() != 0, reason="another uid needs root (os.setuid)")
WAIT_S = 30  # a guard against a hang, not a measured time


@pytest.fixture
def folder():
    with tempfile.TemporaryDirectory(prefix="ngs-", dir="/tmp") as d:
        yield Path(d)


# -- the socket's folder --------------------------------------------------------------------

def test_a_folder_others_can_write_to_is_refused(folder):
    shared = folder / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # not sticky: anyone may move the socket away
    with pytest.raises(UnsafeSocketFolder, match="can be written by other users"):
        claim_socket(shared / "s.sock")
    os.chmod(shared, 0o770)
    with pytest.raises(UnsafeSocketFolder):
        claim_socket(shared / "s.sock")


def test_serve_refuses_a_world_writable_folder_before_loading_anything(folder):
    os.chmod(folder, 0o777)
    done = subprocess.run([sys.executable, "-m", "ngramd.daemon.cli", "serve", "--socket", str(folder / "s.sock"),
                           "--model", "/nonexistent"], capture_output=True, text=True, timeout=120,
                          cwd=str(Path(__file__).resolve().parents[2]))
    assert done.returncode == 1
    assert "can be written by other users" in done.stderr
    assert not (folder / "s.sock").exists()


@as_root
def test_a_folder_of_another_user_is_refused(folder):
    theirs = folder / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    with pytest.raises(UnsafeSocketFolder, match="belongs to uid"):
        claim_socket(theirs / "s.sock")


def test_in_a_sticky_shared_folder_the_socket_gets_its_own_0700_subfolder(folder):
    os.chmod(folder, 0o1777)  # as /tmp
    sock = resolve_socket_path(str(folder / "s.sock"))
    assert sock == folder / f"ngramd-{os.getuid()}" / "s.sock"
    lock = claim_socket(sock)
    try:
        st = os.stat(sock.parent)
        assert st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700
    finally:
        lock.release()


@as_root
def test_a_subfolder_another_user_made_first_is_refused(folder):
    os.chmod(folder, 0o1777)
    planted = folder / f"ngramd-{os.getuid()}"
    planted.mkdir(mode=0o700)
    os.chown(planted, OTHER_UID, OTHER_UID)
    with pytest.raises(UnsafeSocketFolder, match="belongs to uid"):
        claim_socket(resolve_socket_path(str(folder / "s.sock")))


# -- the daemon refuses a client of another uid ------------------------------------------------

CLIENT_AS_OTHER = r"""
import os, socket, sys
os.setgid(65534); os.setuid(65534)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(20)
s.connect(sys.argv[1])
try:
    s.sendall(bytes.fromhex(sys.argv[2]))
except BrokenPipeError:  # closed before the request was read
    pass
got = b""
while True:
    try:
        data = s.recv(65536)
    except ConnectionResetError:  # closed with our request unread: a reset, still nothing answered
        break
    if not data:
        break
    got += data
print(len(got))
"""


@as_root
def test_the_daemon_closes_a_connection_from_another_uid_unanswered(inproc):
    # the socket leaked (a folder and socket others may reach): the peer's uid still stops them
    os.chmod(inproc.sock.parent, 0o755)
    os.chmod(inproc.sock, 0o666)
    status = pack_request(1, "status", {}).hex()
    done = subprocess.run([sys.executable, "-c", CLIENT_AS_OTHER, str(inproc.sock), status],
                          capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"  # closed, not a byte answered
    with inproc.client() as c:  # its own user is served as before
        assert c.call("status")["daemon"]


def test_the_daemon_closes_a_connection_whose_peer_reads_as_another_uid(inproc, monkeypatch):
    """The same without root: the peer-credential reader says another uid."""
    monkeypatch.setattr(peer, "peer_uid", lambda sock: os.getuid() + 1)
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.settimeout(WAIT_S)
    raw.connect(str(inproc.sock))
    try:
        raw.sendall(pack_request(1, "status", {}))
    except BrokenPipeError:  # closed before the request was read
        pass
    try:
        assert raw.recv(65536) == b""
    except ConnectionResetError:
        pass
    raw.close()
    monkeypatch.undo()
    with inproc.client() as c:
        assert c.call("status")["daemon"]


# -- the client refuses a server of another uid -------------------------------------------------

IMPOSTOR = r"""
import os, socket, sys
os.setgid(65534); os.setuid(65534)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o666); s.listen(8)
print("listening", flush=True)
total = 0
for _ in range(int(sys.argv[2])):
    c, _ = s.accept()
    c.settimeout(20)
    while True:
        data = c.recv(65536)
        if not data:
            break
        total += len(data)
    c.close()
print(total, flush=True)
"""


def start_impostor(folder: Path, connections: int) -> tuple[subprocess.Popen, str]:
    os.chmod(folder, 0o755)
    theirs = folder / "theirs"
    theirs.mkdir()
    os.chown(theirs, OTHER_UID, OTHER_UID)
    path = str(theirs / "s.sock")
    proc = subprocess.Popen([sys.executable, "-c", IMPOSTOR, path, str(connections)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "listening"
    return proc, path


@as_root
def test_the_client_sends_nothing_to_a_server_of_another_uid(folder):
    proc, path = start_impostor(folder, 1)
    try:
        with pytest.raises(ForeignPeer, match=f"uid {OTHER_UID}"):
            Client(path, timeout=5).call("status")
        assert proc.stdout.readline().strip() == "0"  # not a byte reached it
    finally:
        proc.kill()
        proc.wait()


def test_the_client_refuses_a_server_whose_peer_reads_as_another_uid(inproc, monkeypatch):
    monkeypatch.setattr(peer, "peer_uid", lambda sock: os.getuid() + 1)
    with pytest.raises(ForeignPeer):
        Client(inproc.sock, timeout=5)


# -- bursts ----------------------------------------------------------------------------------

def test_a_burst_of_connects_queues_while_the_daemon_is_busy(inproc):
    """500 connects while the daemon's loop is blocked: all queued (asyncio's default backlog,
    100, refused the rest with EAGAIN), and each is served once the loop runs again."""
    loop = inproc.server._server.get_loop()
    entered, gate = threading.Event(), threading.Event()

    def block() -> None:
        entered.set()
        gate.wait(WAIT_S)

    loop.call_soon_threadsafe(block)
    assert entered.wait(WAIT_S)
    held, refused = [], 0
    try:
        for _ in range(500):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(str(inproc.sock))
                held.append(s)
            except BlockingIOError:
                refused += 1
                s.close()
    finally:
        gate.set()
    for s in held:
        s.close()
    assert refused == 0
    with inproc.client() as c:
        assert c.call("status")["daemon"]


def full_listener(folder: Path) -> tuple[socket.socket, str, list[socket.socket]]:
    """A listening socket (never accepting by itself) whose queue is full."""
    path = str(folder / "q.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(0)
    held = []
    for _ in range(8):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(path)
        except BlockingIOError:
            s.close()
            return listener, path, held
        held.append(s)
    raise AssertionError("the listen queue did not fill")


def test_the_client_tries_a_full_listen_queue_again(folder, monkeypatch):
    listener, path, held = full_listener(folder)
    pauses = []

    def drain(seconds: float) -> None:  # the daemon's loop accepts meanwhile
        pauses.append(seconds)
        listener.accept()[0].close()

    monkeypatch.setattr(connect, "_sleep", drain)
    client = Client(path, timeout=5)
    assert len(pauses) == 1
    client.close()
    for s in held:
        s.close()
    listener.close()


def test_a_queue_that_stays_full_fails_in_bounded_tries(folder, monkeypatch):
    listener, path, held = full_listener(folder)
    pauses = []
    monkeypatch.setattr(connect, "_sleep", pauses.append)  # no wait, nothing accepted
    monkeypatch.setattr(connect.time, "monotonic", lambda: len(pauses) * 0.1)  # each pause: 0.1 s
    with pytest.raises(DaemonUnavailable, match="listen queue stayed full"):
        Client(path, timeout=2)
    assert 5 <= len(pauses) <= 40  # bounded by the timeout, growing pauses
    assert max(pauses) <= connect.CONNECT_BACKOFF_MAX_S
    for s in held:
        s.close()
    listener.close()


def test_a_refused_connect_is_not_retried(folder, monkeypatch):
    monkeypatch.setattr(connect, "_sleep", lambda s: pytest.fail("a missing daemon was waited for"))
    with pytest.raises(DaemonUnavailable, match="no ngramd daemon"):
        Client(str(folder / "none.sock"), timeout=5)
