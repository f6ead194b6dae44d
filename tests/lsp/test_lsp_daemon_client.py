"""lsp/daemon_client.py and lsp/daemon_link.py against the fake daemon (in-process)."""

from __future__ import annotations

import asyncio
import re

import pytest
import pytest_asyncio

from ngramd.daemon.protocol import rpc
from ngramd.lsp.daemon_client import DaemonError, DaemonUnavailable, RpcConnection
from ngramd.lsp.daemon_link import DaemonLink


async def test_request_and_error(fake, sock):
    conn = await RpcConnection.open(sock)
    info = await conn.request("initialize", {"client": "t"}, timeout=5)
    assert info["server"] == "fake"
    await conn.request("open", {"uri": "file:///a", "text": "abc", "version": 1}, timeout=5)
    result = await conn.request("complete", {"uri": "file:///a", "offset": 3}, timeout=5)
    assert result["text"] == fake.proposal
    with pytest.raises(DaemonError) as err:
        await conn.request("nope", {}, timeout=5)
    assert err.value.code == rpc.METHOD_NOT_FOUND and "nope" in err.value.message
    conn.close()


async def test_pipelined_sends_keep_order(fake, sock):
    conn = await RpcConnection.open(sock)
    conn.send("open", {"uri": "u", "text": "ab", "version": 1})
    conn.send("change", {"uri": "u", "version": 2, "changes": [{"start": 1, "end": 1, "text": "X"}]})
    last = conn.send("change", {"uri": "u", "version": 3, "changes": [{"start": 0, "end": 1, "text": ""}]})
    await asyncio.wait_for(last, 5)
    assert fake.docs["u"] == {"text": "Xb", "version": 3}
    conn.close()


async def test_timeout_is_unavailable_and_late_answer_dropped(fake, sock):
    fake.delay = 0.5
    conn = await RpcConnection.open(sock)
    await conn.request("open", {"uri": "u", "text": "", "version": 1}, timeout=5)
    with pytest.raises(DaemonUnavailable, match="within"):
        await conn.request("complete", {"uri": "u", "offset": 0}, timeout=0.05)
    await asyncio.sleep(0.6)  # the late answer arrives and is ignored
    assert not conn.closed
    fake.delay = 0
    assert (await conn.request("status", None, timeout=5))["daemon"]["server"] == "fake"
    conn.close()


async def test_connection_lost_fails_pending(fake, sock):
    fake.delay = 5
    lost = []
    conn = await RpcConnection.open(sock, on_close=lost.append)
    await conn.request("open", {"uri": "u", "text": "", "version": 1}, timeout=5)
    pending = asyncio.ensure_future(conn.request("complete", {"uri": "u", "offset": 0}, timeout=10))
    await asyncio.sleep(0.05)
    await fake.stop()
    with pytest.raises(DaemonUnavailable, match="lost"):
        await pending
    assert lost == [conn] and conn.closed


async def test_connect_refused(sock):
    with pytest.raises(DaemonUnavailable, match="cannot connect"):
        await RpcConnection.open(sock)


async def test_link_reconnects_and_resends_state(sock):
    """The daemon dies and comes back: on_connect runs again and the next call works."""
    hellos = []

    async def on_connect(conn):
        hellos.append(await conn.request("initialize", {}, timeout=5))
        conn.send("open", {"uri": "u", "text": "state", "version": 7})

    from lsp_fake_daemon import FakeDaemon

    first = await FakeDaemon(sock).start()
    link = DaemonLink(sock, on_connect=on_connect, spawn=False)
    assert (await link.call("complete", {"uri": "u", "offset": 0}, 5))["text"] == first.proposal
    assert link.ready and len(hellos) == 1
    await first.stop()
    await asyncio.sleep(0.05)
    assert not link.ready
    with pytest.raises(DaemonUnavailable):  # nobody there: no spawn allowed
        await link.call("status", None, 0.5)
    second = await FakeDaemon(sock, proposal="again").start()
    result = await link.call("complete", {"uri": "u", "offset": 0}, 5)
    assert result["text"] == "again" and len(hellos) == 2
    assert second.docs["u"] == {"text": "state", "version": 7}  # re-sent by on_connect
    assert link.send("close", {"uri": "u"}) is not None
    await link.close()
    await second.stop()


async def test_a_link_whose_reading_is_cancelled_here_does_not_reconnect(fake, sock, caplog):
    """The editor closes the language server's stdin without shutdown: the event loop ends and
    cancels every task, the daemon connection's reading among them. No daemon was lost: no
    warning, no reconnect."""
    link = DaemonLink(sock, spawn=False)
    await link.call("status", None, 5)
    conn = link._conn
    conn._task.cancel()
    await asyncio.sleep(0.05)
    assert conn.closed and conn.cancelled and not link.ready
    assert "connection to the daemon lost" not in caplog.text
    assert link._connecting is None or link._connecting.done()  # no connect started
    await link.close()


async def test_link_send_drops_when_not_ready(sock):
    link = DaemonLink(sock, spawn=False)
    assert link.send("open", {"uri": "u", "text": "", "version": 1}) is None


async def test_link_spawn_failure_is_reported(sock, monkeypatch):
    """A daemon that exits before answering: a clear error, then a back-off (no storm)."""
    import subprocess
    import sys

    import ngramd.lsp.daemon_link as dl

    spawned = []

    def fake_spawn(path, model, device, exact_kernels=False):
        spawned.append(path)
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])

    monkeypatch.setattr(dl, "spawn_daemon", fake_spawn)
    link = DaemonLink(sock, spawn=True, start_timeout=10)
    with pytest.raises(DaemonUnavailable, match="exited with code 3"):
        await link.call("status", None, 10)
    with pytest.raises(DaemonUnavailable, match="the last start failed: .*exited with code 3"):
        await link.call("status", None, 10)
    assert len(spawned) == 1


async def test_a_failed_start_is_told_once_with_the_daemons_last_words(sock, monkeypatch):
    """A daemon that exits before answering: ``on_start_failed`` gets its exit code and its last
    lines in the log (not those of daemons before it), once per failed start: not for the calls
    during the back-off, again for the next start after it."""
    import subprocess
    import sys

    import ngramd.lsp.daemon_link as dl

    def fake_spawn(path, model, device, exact_kernels=False):
        with open(path + ".log", "a") as log:
            return subprocess.Popen([sys.executable, "-c", (
                "import sys; print('loading'); print(); "
                "print('ngramd: cannot load the model: no such file', file=sys.stderr); raise SystemExit(1)")],
                stdout=log, stderr=log)

    with open(sock + ".log", "w") as log:
        log.write("an earlier daemon's last words\n")
    monkeypatch.setattr(dl, "spawn_daemon", fake_spawn)
    told: list[str] = []
    link = DaemonLink(sock, spawn=True, start_timeout=10, on_start_failed=told.append)
    want = "exited with code 1 before answering (loading | ngramd: cannot load the model: no such file)"
    for _ in range(2):
        with pytest.raises(DaemonUnavailable, match=re.escape(want)):
            await link.call("status", None, 10)
    assert len(told) == 1 and want in told[0] and sock + ".log" in told[0]
    monkeypatch.setattr(dl, "SPAWN_BACKOFF_S", 0.0)
    link._no_spawn_until = 0.0  # the back-off is over
    with pytest.raises(DaemonUnavailable, match=re.escape(want)):
        await link.call("status", None, 10)
    assert len(told) == 2 and "earlier" not in told[1]


async def test_failed_starts_whose_log_lines_carry_timestamps_are_shown_once(sock, monkeypatch):
    """The daemon logs with timestamps (daemon/cli/serve_cmd.py): each failed start's last words
    differ by them alone, which must not make the same reason news again (before, the user
    got the error once per back-off while typing); the reason keeps the words."""
    import subprocess
    import sys

    import ngramd.lsp.daemon_link as dl
    from ngramd.lsp.config import Settings
    from ngramd.lsp.server import NgramdServer

    starts = iter(range(10))

    def fake_spawn(path, model, device, exact_kernels=False):
        stamp = f"2026-12-05 12:51:{next(starts):02d},758"  # as logging's asctime, another each start
        with open(path + ".log", "a") as log:
            return subprocess.Popen([sys.executable, "-c", (
                f"import sys; print('{stamp} ngramd.model INFO loading m'); "
                f"print('{stamp} ngramd: cannot load the model: config.json is not valid JSON', file=sys.stderr); "
                "raise SystemExit(1)")], stdout=log, stderr=log)

    monkeypatch.setattr(dl, "spawn_daemon", fake_spawn)
    server = NgramdServer(Settings(), sock, spawn=True)
    shown: list[str] = []
    monkeypatch.setattr(server, "window_show_message", lambda params: shown.append(params.message))
    for _ in range(2):
        server.link._no_spawn_until = 0.0  # the back-off is over: the user typed on
        with pytest.raises(DaemonUnavailable, match="exited with code 1"):
            await server.link.call("status", None, 10)
    assert server.link.spawned == 2 and len(shown) == 1
    assert ("(ngramd.model INFO loading m | ngramd: cannot load the model: config.json is not valid JSON)"
            in shown[0])


async def test_a_failing_on_start_failed_still_fails_the_call_as_unavailable(sock, monkeypatch, caplog):
    """``on_start_failed`` raising (telling an editor whose transport closed, at exit): logged,
    and the call still fails with the start's reason, backing off as usual."""
    import subprocess
    import sys

    import ngramd.lsp.daemon_link as dl

    def fake_spawn(path, model, device, exact_kernels=False):
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])

    def closed_transport(reason):
        raise RuntimeError("transport closed")

    monkeypatch.setattr(dl, "spawn_daemon", fake_spawn)
    link = DaemonLink(sock, spawn=True, start_timeout=10, on_start_failed=closed_transport)
    with caplog.at_level("ERROR", logger="ngramd.lsp.daemon_link"):
        with pytest.raises(DaemonUnavailable, match="exited with code 3"):
            await link.call("status", None, 10)
    assert "transport closed" in caplog.text
    with pytest.raises(DaemonUnavailable, match="the last start failed: .*exited with code 3"):
        await link.call("status", None, 10)


async def test_link_spawn_oserror_is_unavailable_and_backs_off(tmp_path):
    """A socket whose folder cannot be created: DaemonUnavailable saying why (the LSP's
    requests answer empty and status reports it), then a back-off, not an OSError per call."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    link = DaemonLink(str(blocker / "sub" / "d.sock"), spawn=True, start_timeout=10)
    with pytest.raises(DaemonUnavailable, match="cannot start a daemon on .*sub"):
        await link.call("status", None, 10)
    with pytest.raises(DaemonUnavailable, match="the last start failed: cannot start a daemon"):
        await link.call("status", None, 10)
    assert link.spawned == 0 and "cannot start a daemon" in link.last_error


async def test_unencodable_request_fails_alone_and_the_connection_goes_on(fake, sock):
    """A request msgpack cannot encode (here an int past 64 bits) fails its own future
    with a clear DaemonError; before, the encoder's exception escaped ``send``."""
    conn = await RpcConnection.open(sock)
    with pytest.raises(DaemonError, match="cannot encode") as err:
        await conn.request("open", {"uri": "u", "text": "", "version": 1 << 70}, timeout=5)
    assert err.value.code == rpc.INVALID_PARAMS
    assert not conn.closed
    await conn.request("open", {"uri": "u", "text": "a\ud800b", "version": 1}, timeout=5)
    assert fake.docs["u"]["text"] == "a\ufffdb"
    conn.close()


@pytest.fixture
def fake_daemons(monkeypatch):
    """``fake_daemons(*options)`` makes the link's ``spawn_daemon`` start the standalone fake
    daemon (with ``options``, see lsp_fake_daemon.py) and returns the list its processes are
    added to; every one is killed after the test (after the test's own clean-up)."""
    started: list = []

    def use(*options: str) -> list:
        procs = _spawn_fake_daemons(monkeypatch, *options)
        started.append(procs)
        return procs
    yield use
    for procs in started:
        for p in procs:
            p.kill()
            p.wait()


def _spawn_fake_daemons(monkeypatch, *options: str) -> list:
    """Make the link's ``spawn_daemon`` start the standalone fake daemon (with ``options``);
    the started processes are returned in the list."""
    import subprocess
    import sys
    from pathlib import Path

    import ngramd.lsp.daemon_link as dl

    procs: list = []
    script = str(Path(__file__).with_name("lsp_fake_daemon.py"))

    def fake_spawn(path, model, device, exact_kernels=False):
        procs.append(subprocess.Popen([sys.executable, script, path, *options]))
        return procs[-1]

    monkeypatch.setattr(dl, "spawn_daemon", fake_spawn)
    return procs


@pytest_asyncio.fixture
async def spawning_link(sock, fake_daemons):
    """(a DaemonLink that may start daemons, the fake daemons it started); all gone afterwards."""
    procs = fake_daemons()
    link = DaemonLink(sock, spawn=True, start_timeout=30)
    yield link, procs
    await link.close()


async def test_lost_daemon_is_reconnected_without_spawning_until_a_request(sock, spawning_link):
    """`ngramd stop` must stick: the loss only reconnects; the next request starts a daemon."""
    from lsp_fake_daemon import FakeDaemon
    from lsp_helpers import until

    link, procs = spawning_link
    first = await FakeDaemon(sock).start()
    assert (await link.call("status", None, 5))["daemon"]["server"] == "fake"
    await first.stop(announce=True)  # `ngramd stop`
    await until(lambda: not link.ready and link._connecting is not None and link._connecting.done(),
                what="the reconnect attempt to end")
    assert procs == [] and link.spawned == 0 and not link.ready
    assert "cannot connect" in link.last_error
    # the next request starts a daemon and is answered by it
    assert (await link.call("status", None, 30))["daemon"]["server"] == "fake"
    assert len(procs) == 1 and link.spawned == 1 and link.ready


async def test_a_daemon_that_died_is_started_again_without_waiting_for_a_request(sock, spawning_link):
    """No `exiting` notice: a crash, not a stop. The link starts a daemon at once (DESIGN:
    "If the daemon dies, `ngramd lsp` restarts it"), so it loads before the next request."""
    from lsp_fake_daemon import FakeDaemon
    from lsp_helpers import until

    link, procs = spawning_link
    first = await FakeDaemon(sock).start()
    assert (await link.call("status", None, 5))["daemon"]["server"] == "fake"
    await first.stop()  # died: no notice
    await until(lambda: link.ready and link.spawned == 1, timeout=30, what="a daemon started again")
    assert len(procs) == 1


async def test_a_started_daemon_that_dies_slowly_is_replaced_without_backing_off(spawning_link):
    """The process outlives its socket for a moment (as a killed one can): its exit is not a
    failed start (which would refuse to start daemons for SPAWN_BACKOFF_S), a new one starts."""
    import signal

    from lsp_helpers import until

    link, procs = spawning_link
    assert (await link.call("status", None, 30))["daemon"]["server"] == "fake"
    assert len(procs) == 1
    procs[0].send_signal(signal.SIGUSR1)  # closes its socket now, exits a second later
    await until(lambda: link.ready and link.spawned == 2, timeout=30, what="a second daemon")
    assert procs[0].poll() is not None and "the last start failed" not in (link.last_error or "")


async def test_a_started_daemon_that_dies_for_long_is_waited_for_not_taken_for_a_failed_start(
        sock, fake_daemons):
    """However long a daemon that served takes to exit (an indexing thread joined, a CUDA
    context torn down), its exit is no failed start: the next daemon starts once it is gone."""
    procs = fake_daemons("--linger", "2")
    link = DaemonLink(sock, spawn=True, start_timeout=30)
    try:
        assert (await link.call("status", None, 30))["daemon"]["server"] == "fake"
        await _first_dies_slowly_and_a_second_starts(link, procs)
    finally:
        await link.close()


async def _first_dies_slowly_and_a_second_starts(link: DaemonLink, procs) -> None:
    """Make the first fake daemon die slowly (its socket goes now, its process later) and check
    the link starts a second one once it is gone, with no back-off (no failed start)."""
    import signal

    from lsp_helpers import until

    procs[0].send_signal(signal.SIGUSR1)
    failed_start = ("the last start failed", "before answering")  # the link's words for a back-off
    await until(lambda: link.ready and link.spawned == 2 or any(w in link.last_error for w in failed_start),
                timeout=30, what="a second daemon, or a back-off")
    assert not any(w in link.last_error for w in failed_start), link.last_error
    assert procs[0].poll() is not None and link.ready and link.spawned == 2


async def test_editors_racing_to_restart_a_crashed_daemon_all_get_the_winner(sock, fake_daemons):
    """After a crash every editor's link starts a daemon at once; the losers' `ngramd serve`
    exits with code 3 (another is starting): they wait for the winner's socket, not back off."""
    from lsp_helpers import until

    procs = fake_daemons("--claim", "--load", "1")
    a = DaemonLink(sock, spawn=True, start_timeout=30)
    b = DaemonLink(sock, spawn=True, start_timeout=30)
    try:
        await a.call("status", None, 30)
        await b.call("status", None, 30)  # a's daemon
        assert len(procs) == 1
        procs[0].kill()  # a crash: no notice, both links start one at once
        await until(lambda: len(procs) == 3 and any(p.poll() == 3 for p in procs),
                    timeout=30, what="the losing daemon's exit")
        await until(lambda: (a.ready and b.ready) or "code 3" in a.last_error + b.last_error,
                    timeout=30, what="both links on the winner, or a back-off")
        assert a.ready and b.ready and "code 3" not in a.last_error + b.last_error
        assert (await b.call("status", None, 5))["daemon"]["server"] == "fake"
    finally:
        await a.close()
        await b.close()


async def test_a_connection_the_daemon_refuses_is_not_reconnected_in_a_loop(sock, monkeypatch):
    """The real server drops a connection that sends a frame over --max-message-bytes (an
    open document too big), with a fatal error notice: reconnecting at once would send the
    same document again, forever. The link backs off; a request after that reconnects once."""
    import collections
    from pathlib import Path

    from lsp_helpers import until

    from ngramd.daemon.service.server import Server

    class Service:  # the least ngramd.daemon.service.methods.Service the server needs
        errors: collections.Counter = collections.Counter()

        def client_connected(self, cid): pass
        def client_gone(self, cid): pass
        def cancel_all(self, why): pass
        def close(self): pass

        async def dispatch(self, cid, method, params):
            return {"server": "stub"} if method in ("initialize", "status") else None

    server = Server(Service(), Path(sock), max_message_bytes=4096)
    await server.start()

    async def on_connect(conn):
        await conn.request("initialize", {}, timeout=5)
        conn.send("open", {"uri": "file:///big.py", "text": "x" * 10_000, "version": 1})

    link = DaemonLink(sock, spawn=True, on_connect=on_connect)
    try:
        link.start()
        await until(lambda: "closed the connection" in link.last_error, what="the refusal")
        assert "refused what this editor sent" in link.last_error and "4096" in link.last_error
        assert not link.ready and not link.connecting and link.connects == 1
        with pytest.raises(DaemonUnavailable, match="closed the connection"):  # at once, no connect
            await link.call("status", None, 5)
        assert link.connects == 1 and link.spawned == 0
        monkeypatch.setattr(link, "_no_connect_until", 0.0)  # the back-off is over
        with pytest.raises(DaemonUnavailable):  # the same document is refused again
            await link.call("status", None, 5)
        await until(lambda: not link.ready, what="the second refusal")
        assert link.connects == 2 and not link.connecting and link.spawned == 0
    finally:
        await link.close()
        await server.close()


async def test_a_daemon_that_drops_every_new_connection_is_not_reconnected_in_a_loop(sock):
    """No fatal notice, but the connection goes soon after it was made ready, twice in a row:
    the second loss backs off instead of reconnecting at once."""
    from lsp_fake_daemon import FakeDaemon
    from lsp_helpers import until

    link = DaemonLink(sock, spawn=False)
    try:
        for _ in range(2):
            daemon = await FakeDaemon(sock).start()
            await link.call("status", None, 5)
            await daemon.stop()  # died: no notice
            await until(lambda: not link.ready and not link.connecting, what="the reconnect decision")
        assert "2 times in a row" in link.last_error and link.connects == 2
        daemon = await FakeDaemon(sock).start()
        with pytest.raises(DaemonUnavailable, match="closed the connection"):
            await link.call("status", None, 5)
        assert link.connects == 2
        await daemon.stop()
    finally:
        await link.close()


async def test_connections_the_daemon_never_served_are_no_early_drops(sock):
    """A reconnect can land in a killed daemon's listen backlog just before the socket goes:
    made ready, then lost at once, having served nothing. That is still the one crash, so
    the next reconnect is at once, not backed off."""
    from lsp_fake_daemon import FakeDaemon
    from lsp_helpers import until

    link = DaemonLink(sock, spawn=False)  # no on_connect: a connection serves nothing by itself
    try:
        for n in (1, 2, 3):
            daemon = await FakeDaemon(sock).start()
            link.start()
            await until(lambda: link.ready, what="the connection")
            await daemon.stop()
            await until(lambda: not link.ready and not link.connecting, what="the reconnect decision")
            assert "closed the connection" not in link.last_error and link.connects == n
    finally:
        await link.close()


async def test_request_during_a_connect_only_reconnect_starts_a_daemon(spawning_link):
    """A request that finds the loss's connect-only attempt in flight does not fail
    because that attempt found nobody: it follows with one that may start a daemon."""
    link, procs = spawning_link
    link._ensure_task(spawn=False)  # what a stopped daemon's loss starts
    assert link.connecting
    assert (await link.call("status", None, 30))["daemon"]["server"] == "fake"
    assert len(procs) == 1 and link.spawned == 1


async def test_server_status_observe_starts_nothing(sock, fake_daemons):
    """``ngramd.status({spawn: false})`` with no daemon: "stopped", also while the
    reconnect after a loss (which only connects) is in flight; never a daemon started."""
    from lsp_helpers import until

    from ngramd.lsp.config import Settings
    from ngramd.lsp.server import NgramdServer

    procs = fake_daemons()
    server = NgramdServer(Settings(), sock, spawn=True)
    try:
        status = await server.status(observe=True)
        assert status["connected"] is False and status["daemon"] == {"state": "stopped"}
        server.link._ensure_task(spawn=False)  # what a lost connection starts
        assert server.link.connecting and not server.link.starting
        assert (await server.status(observe=True))["daemon"] == {"state": "stopped"}
        await until(lambda: not server.link.connecting, what="the connect attempt to end")
        assert (await server.status(observe=True))["daemon"] == {"state": "stopped"}
        assert procs == [] and server.link.spawned == 0
    finally:
        await server.link.close()


async def test_server_status_observe_says_starting_only_while_a_daemon_may_be_started(sock, fake_daemons):
    """"starting" (the editor shows a spinner and keeps polling) only while the attempt
    in flight may start a daemon, as the editor's ``initialized`` does."""
    from lsp_helpers import until

    from ngramd.lsp.config import Settings
    from ngramd.lsp.server import NgramdServer

    procs = fake_daemons()
    server = NgramdServer(Settings(), sock, spawn=True)
    try:
        server.link.start()
        assert server.link.starting
        assert (await server.status(observe=True))["daemon"] == {"state": "starting"}
        await until(lambda: server.link.ready, timeout=30, what="the started daemon")
        status = await server.status(observe=True)
        assert status["daemon"]["daemon"]["server"] == "fake" and len(procs) == 1
    finally:
        await server.link.close()


async def test_server_status_observe_connects_to_a_daemon_started_elsewhere(sock, fake_daemons):
    """A poll finds a daemon another editor started (connect only, nothing started)."""
    from lsp_fake_daemon import FakeDaemon

    from ngramd.lsp.config import Settings
    from ngramd.lsp.server import NgramdServer

    procs = fake_daemons()
    server = NgramdServer(Settings(), sock, spawn=True)
    other = None
    try:
        assert (await server.status(observe=True))["daemon"] == {"state": "stopped"}
        other = await FakeDaemon(sock).start()  # another editor's daemon
        for _ in range(100):  # each poll waits up to PROBE_S for its connect attempt
            status = await server.status(observe=True)
            if status["connected"]:
                break
        assert status["connected"] is True and status["daemon"]["daemon"]["server"] == "fake"
        assert procs == [] and server.link.spawned == 0 and server.link.connects == 1
        assert len(other.methods("initialize")) == 1
    finally:
        await server.link.close()
        if other is not None:
            await other.stop()


async def test_a_session_lost_before_any_answer_is_tried_again_at_once(sock):
    """A connect can land in a killed daemon's backlog and be closed unanswered: the link
    connects again within the same request instead of failing it ("refused the session")."""
    from lsp_fake_daemon import FakeDaemon

    daemon = await FakeDaemon(sock).start()
    daemon.drop_connections = 2

    async def on_connect(conn):
        await conn.request("initialize", {}, timeout=5)

    link = DaemonLink(sock, spawn=False, on_connect=on_connect)
    try:
        assert (await link.call("status", None, 10)) is not None
        assert daemon.connections == 3 and link.connects == 1 and link.ready
    finally:
        await link.close()
        await daemon.stop()


async def test_after_the_socket_setting_changes_a_daemon_is_started_on_the_new_socket(sock, spawning_link):
    """The daemon this link started on the old socket still runs, and never answers on the
    new one: it is not the one to wait for there (it was, until start_timeout, every call)."""
    import os

    link, procs = spawning_link
    assert (await link.call("status", None, 30))["daemon"]["server"] == "fake"
    new_sock = os.path.join(os.path.dirname(sock), "other.sock")
    link.reconfigure(new_sock, None, "auto")
    assert (await link.call("status", None, 20))["daemon"]["server"] == "fake"
    assert link.spawned == 2 and [p.args[2] for p in procs] == [sock, new_sock]
    assert procs[0].poll() is None  # the old one is left running (other editors may use it)


async def test_a_failed_start_on_the_old_socket_does_not_hold_back_the_new_one(tmp_path, sock, fake_daemons):
    """A daemon that cannot start on its socket (here its folder cannot be created) backs
    spawning off; the user's fix (another socket) starts a daemon at once, not after
    SPAWN_BACKOFF_S."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    procs = fake_daemons()
    link = DaemonLink(str(blocker / "sub" / "d.sock"), spawn=True, start_timeout=30)
    try:
        with pytest.raises(DaemonUnavailable, match="before answering"):
            await link.call("status", None, 10)
        link.reconfigure(sock, None, "auto")
        assert (await link.call("status", None, 30))["daemon"]["server"] == "fake"
        assert link.spawned == 2 and len(procs) == 2
    finally:
        await link.close()


async def test_a_daemon_whose_start_outlived_start_timeout_then_served_is_no_failed_start(sock, fake_daemons):
    """The first call gives up on a slow start (start_timeout); the next one reaches that daemon
    by the plain connect. The pid in its initialize answer marks it served, so when it later
    dies slowly its exit is not taken for a failed start (a back-off): the next one starts."""
    import os

    from lsp_helpers import until

    from ngramd.lsp.config import Settings
    from ngramd.lsp.server import NgramdServer

    procs = fake_daemons("--claim", "--load", "1", "--linger", "1")
    server = NgramdServer(Settings(), sock, spawn=True)  # its on_connect: initialize gives the pid
    link = server.link
    link.start_timeout = 0.3  # shorter than the load
    try:
        with pytest.raises(DaemonUnavailable, match="did not answer within"):
            await link.call("status", None, 10)
        link.start_timeout = 30
        await until(lambda: os.path.exists(sock), what="the slow daemon's socket")
        assert (await link.call("status", None, 10))["daemon"]["server"] == "fake"
        assert link.spawned == 1
        await _first_dies_slowly_and_a_second_starts(link, procs)
    finally:
        await link.close()


async def test_a_session_whose_initialize_timed_out_is_not_tried_again(sock):
    """A daemon that accepts but never answers is no connection lost in a killed daemon's
    backlog: trying again would only wait the timeout again (SESSION_RETRIES times)."""
    connections = []

    async def never_answer(reader, writer):
        connections.append(writer)
        await reader.read()

    daemon = await asyncio.start_unix_server(never_answer, sock)

    async def on_connect(conn):
        await conn.request("initialize", {}, timeout=0.2)

    link = DaemonLink(sock, spawn=False, on_connect=on_connect)
    try:
        with pytest.raises(DaemonUnavailable, match="refused the session: .*did not answer initialize"):
            await link.call("status", None, 10)
        assert len(connections) == 1 and not link.ready
    finally:
        await link.close()
        daemon.close()
        for w in connections:
            w.close()


@pytest.mark.parametrize("abandon", ["reconfigure", "close"])
async def test_a_session_abandoned_while_it_is_set_up_closes_its_connection(fake, sock, abandon):
    """A settings change or shutdown cancels the connect attempt while on_connect awaits the
    daemon: that connection is closed, not left open (and the daemon's copy of it with it)."""
    import os

    from lsp_helpers import until

    sessions = []

    async def on_connect(conn):
        sessions.append(conn)
        await asyncio.Event().wait()  # the daemon's answer never comes

    link = DaemonLink(sock, spawn=False, on_connect=on_connect)
    link.start()
    await until(lambda: sessions, what="the session to start")
    if abandon == "reconfigure":
        link.reconfigure(os.path.join(os.path.dirname(sock), "other.sock"), None, "auto")
    else:
        await link.close()
    await until(lambda: sessions[0].closed, what="the abandoned connection to close")
    await until(lambda: not fake._writers, what="the daemon to see it closed")
    await link.close()


async def test_a_status_poll_keeps_the_reason_the_daemon_could_not_start(tmp_path):
    """An editor's status poll connects without starting a daemon; its "no daemon there" must
    not replace why the last start failed, which the status tooltip shows."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    link = DaemonLink(str(blocker / "sub" / "d.sock"), spawn=True, start_timeout=10)
    with pytest.raises(DaemonUnavailable, match="cannot start a daemon"):
        await link.call("status", None, 10)
    for _ in range(2):
        assert not await link.probe(1.0)
    assert "cannot start a daemon" in link.last_error
