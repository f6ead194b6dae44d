"""The LSP's side of the daemon's socket: it refuses a server of another uid before sending
a byte (and starts no daemon over it), tries a full listen queue again, and never writes the
log of the daemon it starts through a symbolic link planted at ``<socket>.log``.

Another uid: as root, an impostor server runs in a subprocess after ``os.setuid``; the
same is checked without root by monkeypatching the peer-credential reader."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import ngramd.lsp.daemon_link as dl
from ngramd.daemon.protocol import connect, peer
from ngramd.daemon.protocol.peer import ForeignPeer
from ngramd.lsp import spawn
from ngramd.lsp.daemon_client import DaemonUnavailable, RpcConnection
from ngramd.lsp.daemon_link import DaemonLink

OTHER_UID = 65534
IMPOSTOR = r"""
import os, socket, sys
os.setgid(65534); os.setuid(65534)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o666); s.listen(8)
print("listening", flush=True)
c, _ = s.accept()
c.settimeout(20)
total = 0
while True:
    data = c.recv(65536)
    if not data:
        break
    total += len(data)
print(total, flush=True)
"""


def no_spawn(monkeypatch) -> list:
    """The daemons the link tries to start (none is started)."""
    started: list = []

    def refuse(*args, **kwargs):
        started.append(args)
        raise OSError("no daemon is started in this test")

    monkeypatch.setattr(dl, "spawn_daemon", refuse)
    return started


@pytest.mark.skipif(os.getuid() != 0, reason="another uid needs root (os.setuid)")
async def test_the_lsp_sends_nothing_to_a_server_of_another_uid(sock, monkeypatch):
    folder = Path(sock).parent
    os.chmod(folder, 0o755)
    theirs = folder / "theirs"
    theirs.mkdir()
    os.chown(theirs, OTHER_UID, OTHER_UID)
    path = str(theirs / "s.sock")
    proc = subprocess.Popen([sys.executable, "-c", IMPOSTOR, path], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "listening"
        started = no_spawn(monkeypatch)
        link = DaemonLink(path, spawn=True, start_timeout=10)
        with pytest.raises(DaemonUnavailable, match=f"served by uid {OTHER_UID}"):
            await link.call("initialize", {"workspaceFolders": ["/secret"]}, 10)
        assert proc.stdout.readline().strip() == "0"  # not a byte reached it
        assert started == []
    finally:
        proc.kill()
        proc.wait()


async def test_the_lsp_refuses_a_server_whose_peer_reads_as_another_uid(fake, sock, monkeypatch):
    monkeypatch.setattr(peer, "peer_uid", lambda s: os.getuid() + 1)
    with pytest.raises(ForeignPeer):
        await RpcConnection.open(sock)
    started = no_spawn(monkeypatch)
    link = DaemonLink(sock, spawn=True, start_timeout=10)
    with pytest.raises(DaemonUnavailable, match="not by this user"):
        await link.call("status", None, 10)
    assert fake.methods("initialize") == [] and started == []


async def test_the_lsp_tries_a_full_listen_queue_again(sock, monkeypatch):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock)
    listener.listen(0)
    held = []
    while True:  # fill the queue
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(sock)
        except BlockingIOError:
            s.close()
            break
        held.append(s)
        assert len(held) < 8, "the listen queue did not fill"
    pauses = []

    async def drain(seconds: float) -> None:  # the daemon's loop accepts meanwhile
        pauses.append(seconds)
        listener.accept()[0].close()

    monkeypatch.setattr(connect, "_sleep_async", drain)
    conn = await RpcConnection.open(sock)  # asyncio's own connect took EAGAIN for success
    assert len(pauses) == 1 and not conn.closed
    conn.close()
    for s in held:
        s.close()
    listener.close()


def test_the_daemons_log_is_never_written_through_a_planted_link(sock, monkeypatch, tmp_path):
    target = tmp_path / "victim"
    target.write_text("")
    os.symlink(target, spawn.log_path(sock))
    monkeypatch.setattr(spawn, "serve_command", lambda *a, **k: [
        sys.executable, "-c", "print('what the daemon says')"])
    with pytest.raises(OSError, match="symbolic link"):
        spawn.spawn_daemon(sock, None).wait()
    assert target.read_text() == ""
    assert spawn.log_tail(sock, 0) == "" and spawn.log_size(sock) < 200  # nor read through it
