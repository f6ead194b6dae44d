"""Socket path, directory permissions, the lock, stale socket cleanup."""

import json
import os
import socket
import stat

import pytest

from ngramd.daemon.protocol.paths import AlreadyRunning, claim_socket, default_socket_path, resolve_socket_path


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


def test_release_removes_the_lock_file(tmp_path):
    sock = tmp_path / "s.sock"
    lock = claim_socket(sock)
    assert lock.path.exists()
    lock.release()
    assert not lock.path.exists()
    claim_socket(sock).release()  # and a later daemon claims afresh


def test_a_lock_file_removed_while_locking_is_not_taken(tmp_path, monkeypatch):
    """The race the removal could open: B opens the lock file, A exits (removes it and
    unlocks), C claims a new file; B's flock on the removed file then succeeds, but B
    must see it no longer names the path and fail against C rather than run beside it."""
    import ngramd.daemon.protocol.paths as paths

    sock = tmp_path / "s.sock"
    first = claim_socket(sock)
    later: list = []
    real_open = os.open

    def open_then_race(path, flags, *mode):
        fd = real_open(path, flags, *mode)
        if not later:  # B's first open: A exits and C claims before B's flock
            later.append(None)
            first.release()
            later[0] = claim_socket(sock)
        return fd

    monkeypatch.setattr(paths.os, "open", open_then_race)
    with pytest.raises(AlreadyRunning):
        paths.SocketLock(sock).acquire()
    monkeypatch.undo()
    try:
        assert later[0].path.exists() and int(later[0].path.read_text()) == os.getpid()
        with pytest.raises(AlreadyRunning):  # C still holds the lock file at the path
            claim_socket(sock)
    finally:
        later[0].release()


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


@pytest.mark.parametrize("make", ["file", "dir", "link"])
def test_claim_never_removes_what_is_not_a_socket(tmp_path, make):
    """The daemon never writes to user files: a file at the socket's path is left alone."""
    from ngramd.daemon.protocol.paths import NotASocket

    sock = tmp_path / "precious.txt"
    target = tmp_path / "target.txt"
    target.write_text("precious data")
    if make == "file":
        sock.write_text("precious data")
    elif make == "dir":
        sock.mkdir()
    else:
        sock.symlink_to(target)
    with pytest.raises(NotASocket, match="is not a socket"):
        claim_socket(sock)
    assert (sock.read_text() == "precious data") if make != "dir" else sock.is_dir()
    assert target.read_text() == "precious data"


def test_claim_refuses_a_socket_path_too_long_for_unix_sockets(tmp_path):
    from ngramd.daemon.protocol.paths import NotASocket

    with pytest.raises(NotASocket, match="shorter --socket"):
        claim_socket(tmp_path / ("d" * 120) / "s.sock")


def test_status_without_a_daemon_says_so_in_one_line(tmp_path, capsys):
    from ngramd.daemon.cli.main import main

    sock = tmp_path / "s.sock"
    assert main(["status", "--socket", str(sock)]) == 1
    assert capsys.readouterr().err.strip() == f"ngramd: no daemon is running on {sock}"
    lock = claim_socket(sock)  # a daemon loading its model holds the lock; no socket yet
    try:
        assert main(["stop", "--socket", str(sock), "--json"]) == 1
        out = json.loads(capsys.readouterr().out)
        assert out["starting"] is True and f"(pid {os.getpid()})" in out["error"]
    finally:
        lock.release()


@pytest.mark.parametrize("reply", [b"\xc1\xc1\xc1", "error", {"x": 1}])
def test_status_and_stop_of_something_else_on_the_socket_say_so_in_one_line(tmp_path, capsys, reply):
    """Bytes that are not msgpack, an error, a reply of another shape: no traceback, JSON with --json."""
    import threading

    import msgpack

    from ngramd.daemon.cli.main import main

    sock = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock))
    server.listen(4)

    def answer() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                unpacker = msgpack.Unpacker(raw=False)
                unpacker.feed(conn.recv(65536))
                for _, msgid, _, _ in unpacker:
                    if isinstance(reply, bytes):
                        conn.sendall(reply)
                    elif reply == "error":
                        conn.sendall(msgpack.packb([1, msgid, {"code": -32601, "message": "nope"}, None]))
                    else:
                        conn.sendall(msgpack.packb([1, msgid, None, reply]))

    threading.Thread(target=answer, daemon=True).start()
    try:
        for argv in (["status"], ["status", "--json"], ["stop", "--json"]):
            assert main([*argv, "--socket", str(sock)]) == 1
            out, err = capsys.readouterr()
            said = json.loads(out)["error"] if "--json" in argv else err.strip()
            assert "is not an ngramd daemon" in said and "Traceback" not in out + err
    finally:
        server.close()


def test_status_on_a_path_no_daemon_can_serve_says_why(tmp_path, capsys):
    from ngramd.daemon.cli.main import main

    (tmp_path / "notes.txt").write_text("mine")
    assert main(["status", "--socket", str(tmp_path / "notes.txt")]) == 1
    assert "nor can one:" in (err := capsys.readouterr().err) and "exists and is not a socket" in err
    long_path = tmp_path / ("x" * 120 + ".sock")
    assert main(["stop", "--socket", str(long_path), "--json"]) == 1
    assert "unix sockets allow" in json.loads(capsys.readouterr().out)["error"]


def test_status_text_shows_the_packed_weight_copies_and_the_prepares():
    from ngramd.daemon.cli.serve_cmd import format_status

    gen = {"forward_passes": 1, "generated": 1, "drafted": 0, "accepted": 0, "acceptance": 0, "tokens_per_pass": 1}
    status = {"daemon": {"version": "0", "pid": 1, "uptime_s": 1, "socket": "/s", "clients": []},
              "model": {"name": "m", "device": "cpu", "dtype": "float32", "packed_weights_bytes": 513 << 20},
              "memory": {"rss_bytes": 1 << 30}, "index": {}, "workspace": None, "generation": gen,
              "requests": {"by_method": {}, "errors": {}, "index_errors": 0, "queued": [], "running": None},
              "engine": None, "documents": {"open": 0, "list": []}}
    assert "rss 1024.0 MiB  (packed weight copies 513.0 MiB)" in format_status(status)
    status["model"]["packed_weights_bytes"] = 0  # none (a GPU, or a model too big to pack)
    assert "packed" not in format_status(status)
    assert "prepared" not in format_status(status)  # no engine figures: no line
    status["engine"] = {"prepared": {"prepares": 3, "prefill_tokens": 1200}}
    assert "prepared  3 prompts, 1200 tokens prefilled ahead" in format_status(status)


def test_a_status_probe_never_makes_a_starting_daemon_fail(tmp_path, monkeypatch):
    """`ngramd status`/`stop` and the LSP (lock_holder) take a shared lock on the lock file for
    an instant to see who holds it. A daemon claiming the socket in that instant waits for the
    probe to let go instead of reporting "already running" with no daemon there. Here the
    probe is held at that instant: it lets go only once the claim has met its lock."""
    import fcntl
    import threading

    import ngramd.daemon.protocol.paths as paths

    sock = tmp_path / "s.sock"
    sock.with_name(sock.name + ".lock").touch()  # left by an earlier daemon: the probe opens it
    monkeypatch.setattr(paths, "PROBE_WAIT_S", 600.0, raising=False)  # no deadline in play
    real_flock = fcntl.flock
    claim_met_the_probe = threading.Event()
    outcome: list = []

    def claim() -> None:
        try:
            outcome.append(claim_socket(sock))
        except BaseException as exc:
            outcome.append(exc)

    starter = threading.Thread(target=claim)

    def flock(fd, operation):
        if operation == fcntl.LOCK_UN and threading.current_thread() is threading.main_thread():
            starter.start()  # the probe holds its shared lock: a daemon starts now
            assert claim_met_the_probe.wait(60)
        try:
            return real_flock(fd, operation)
        except OSError:
            if threading.current_thread() is starter and operation & fcntl.LOCK_EX:
                claim_met_the_probe.set()
            raise

    monkeypatch.setattr(paths.fcntl, "flock", flock)
    assert paths.lock_holder(sock) is None  # the probe: nobody holds the lock
    starter.join(60)
    monkeypatch.undo()
    assert len(outcome) == 1 and isinstance(outcome[0], paths.SocketLock), outcome
    try:
        assert paths.lock_holder(sock) == os.getpid()  # the daemon holds it
        with pytest.raises(AlreadyRunning):  # and a second daemon is still refused
            claim_socket(sock)
    finally:
        outcome[0].release()


def test_a_stale_socket_removed_while_it_is_checked_is_not_called_a_non_socket(tmp_path, monkeypatch):
    """Two daemons started at once after a crash: the one holding the lock removes the stale
    socket while the other looks at the path. The path seen to exist and then gone (the
    socket removed between the two looks) must read as absent, not as "not a socket": the
    other daemon then waits on the lock and exits as "another is starting" (code 3)."""
    from pathlib import Path

    sock = tmp_path / "s.sock"
    real_exists = Path.exists
    monkeypatch.setattr(Path, "exists", lambda self, *a, **k: True if self == sock else real_exists(self, *a, **k))
    claim_socket(sock).release()


def test_a_lock_path_holding_the_users_file_or_a_link_is_never_written(tmp_path):
    """`--socket ./Cargo` would make `./Cargo.lock` the lock: a file ngramd did not write is
    refused, not truncated (and then removed at exit); a symbolic link is not followed."""
    from ngramd.daemon.protocol.paths import NotASocket

    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\nline 2\n")
    (tmp_path / "a.sock.lock").symlink_to(notes)
    with pytest.raises(NotASocket, match="symbolic link"):
        claim_socket(tmp_path / "a.sock")
    cargo = tmp_path / "Cargo.lock"
    cargo.write_text("[[package]]\nname = \"x\"\n")
    with pytest.raises(NotASocket, match="not an ngramd lock file"):
        claim_socket(tmp_path / "Cargo")
    (tmp_path / "d.sock.lock").mkdir()
    with pytest.raises(NotASocket, match="not an ngramd lock file"):
        claim_socket(tmp_path / "d.sock")
    assert notes.read_text() == "my notes\nline 2\n" and cargo.read_text() == "[[package]]\nname = \"x\"\n"
    # what ngramd leaves (a pid, or nothing) is its own: claimed again
    (tmp_path / "e.sock.lock").write_text("12345")
    (tmp_path / "f.sock.lock").write_text("")
    claim_socket(tmp_path / "e.sock").release()
    claim_socket(tmp_path / "f.sock").release()


def test_status_probe_of_a_socket_under_a_file_finds_no_daemon(tmp_path):
    from ngramd.daemon.protocol.paths import lock_holder

    (tmp_path / "afile").write_text("hi")
    assert lock_holder(tmp_path / "afile" / "x.sock") is None


def test_status_probe_of_a_lock_that_is_a_link_loop_finds_no_daemon(tmp_path):
    from ngramd.daemon.protocol.paths import lock_holder

    (tmp_path / "l.sock.lock").symlink_to(tmp_path / "l.sock.lock")
    assert lock_holder(tmp_path / "l.sock") is None
