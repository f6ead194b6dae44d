"""Socket path, directory permissions, the lock, stale socket cleanup."""

import os
import socket
import stat

import pytest

from daemon.paths import AlreadyRunning, claim_socket, default_socket_path, resolve_socket_path


def test_default_path_under_xdg_runtime_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert default_socket_path() == tmp_path / "ngramd" / "ngramd.sock"
    assert resolve_socket_path(None) == default_socket_path()


def test_fallback_without_xdg_runtime_dir(monkeypatch):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    path = default_socket_path()
    assert path.name == "ngramd.sock" and "ngramd" in str(path.parent)


def test_claim_makes_dir_0700_and_tightens_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    sock = default_socket_path()
    sock.parent.mkdir(mode=0o755)
    os.chmod(sock.parent, 0o755)
    lock = claim_socket(sock)
    try:
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
    finally:
        lock.release()


def test_second_claim_is_refused_while_the_first_holds_the_lock(tmp_path):
    sock = tmp_path / "d" / "s.sock"
    lock = claim_socket(sock)
    try:
        with pytest.raises(AlreadyRunning):
            claim_socket(sock)
    finally:
        lock.release()
    claim_socket(sock).release()  # free again once released


def test_stale_socket_file_is_removed(tmp_path):
    sock = tmp_path / "s.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock))
    s.close()  # a daemon that died: the file stays, nobody listens
    assert sock.exists()
    lock = claim_socket(sock)
    try:
        assert not sock.exists()
    finally:
        lock.release()


def test_live_socket_is_refused_even_without_lock(tmp_path):
    sock = tmp_path / "s.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock))
    s.listen(1)
    try:
        with pytest.raises(AlreadyRunning):
            claim_socket(sock)
        assert sock.exists()  # a live socket is never removed
    finally:
        s.close()
