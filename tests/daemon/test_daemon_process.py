"""The real daemon process: ``python -m ngramd.daemon.cli.main serve --model tiny`` on a temp socket.

Started once for the module (loading even the tiny model's tokenizer costs seconds).
The tests run in file order; the last one stops the daemon with ``ngramd stop``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import msgpack
import pytest
from daemon_helpers import REPO, RealDaemon, wait_until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ngramd.daemon.protocol.client import Client, DaemonUnavailable
from ngramd.daemon.protocol.rpc import (
    CONTENT_MODIFIED, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND,
    PARSE_ERROR, REQUEST_CANCELLED, RpcError, pack_request,
)

pytestmark = pytest.mark.process

pytest.importorskip("ngramd.index.store", reason="the n-gram index (index/store.py) is not there yet")
pytest.importorskip("ngramd.daemon.engine.completer")

SOURCE = '''def fibonacci(n):
    """Return the n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a
'''
LONG = {"maxTokens": 3000, "multiline": True}  # long enough to be cancelled while running


@pytest.fixture(scope="module")
def daemon():
    root = Path(tempfile.mkdtemp(prefix="ngd-"))
    workspace = root / "ws"
    workspace.mkdir()
    (workspace / "fib.py").write_text(SOURCE)
    (workspace / ".gitignore").write_text("skipped/\n")
    d = RealDaemon(root, workspace)
    yield d
    d.close()
    shutil.rmtree(root, ignore_errors=True)


def test_ready_line_and_socket_permissions(daemon):
    assert daemon.ready_line.startswith("ngramd: ready on " + str(daemon.sock))
    assert stat.S_IMODE(daemon.sock.parent.stat().st_mode) == 0o700
    assert stat.S_ISSOCK(daemon.sock.stat().st_mode)
    assert stat.S_IMODE(daemon.sock.stat().st_mode) == 0o600


def _inet_socket_inodes() -> set[int]:
    inodes = set()
    for name in ("tcp", "tcp6", "udp", "udp6", "raw", "raw6"):
        try:
            lines = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            inodes.add(int(line.split()[9]))
    return inodes


def test_no_network_socket_at_all(daemon):
    pid = daemon.proc.pid
    fds = os.listdir(f"/proc/{pid}/fd")
    sockets = set()
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            sockets.add(int(target[8:-1]))
    assert sockets, "the daemon holds its unix socket"
    assert not sockets & _inet_socket_inodes(), "the daemon holds an inet socket"
    psutil = pytest.importorskip("psutil")
    proc = psutil.Process(pid)
    conns = proc.net_connections(kind="inet") if hasattr(proc, "net_connections") else proc.connections("inet")
    assert conns == []
    assert any(c.laddr == str(daemon.sock) for c in proc.net_connections(kind="unix")
               if hasattr(proc, "net_connections"))


def test_second_serve_on_a_live_socket_refuses(daemon):
    r = daemon.cli("serve", "--model", "tiny", "--device", "cpu", timeout=120)
    assert r.returncode == 3
    assert "already" in r.stderr or "running" in r.stderr
    with daemon.client() as c:
        assert c.call("status")["daemon"]["pid"] == daemon.proc.pid  # the first one still serves


def test_initialize_open_change_complete(daemon):
    with daemon.client() as c:
        info = c.call("initialize", {"client": "pytest", "workspaceFolders": [str(daemon.workspace)]})
        assert info["server"] == "ngramd" and info["model"] == "tiny" and info["pid"] == daemon.proc.pid
        uri = "file:///tmp/ngd-doc.py"
        c.call("open", {"uri": uri, "text": SOURCE, "version": 1, "languageId": "python"})
        offset = SOURCE.index("a, b = b")
        first = c.call("complete", {"uri": uri, "offset": offset, "maxTokens": 8})
        assert 1 <= len(first["token_ids"]) <= 8 and isinstance(first["text"], str)
        assert _is_prompt_for(first["prompt"], SOURCE, offset)
        again = c.call("complete", {"uri": uri, "offset": offset, "maxTokens": 8, "version": 1})
        assert again["token_ids"] == first["token_ids"]  # greedy is deterministic
        c.call("change", {"uri": uri, "version": 2, "changes": [{"start": 4, "end": 13, "text": "fib"}]})
        with pytest.raises(RpcError) as err:
            c.call("complete", {"uri": uri, "offset": 0, "version": 1})
        assert err.value.code == CONTENT_MODIFIED
        with pytest.raises(RpcError) as err:
            c.call("change", {"uri": uri, "version": 2, "changes": [{"text": "x"}]})
        assert err.value.code == CONTENT_MODIFIED
        with pytest.raises(RpcError) as err:
            c.call("complete", {"uri": uri, "offset": len(SOURCE)})  # now past the end
        assert err.value.code == INVALID_PARAMS
        moved = c.call("complete", {"uri": uri, "offset": offset - 6, "maxTokens": 8})
        assert _is_prompt_for(moved["prompt"], SOURCE.replace("fibonacci", "fib"), offset - 6)
        status = c.call("status")
        assert status["documents"]["open"] == 1
        assert status["requests"]["by_method"]["complete"] >= 3
        assert status["generation"]["generated"] >= len(first["token_ids"])
        assert status["model"]["name"] == "tiny" and status["memory"]["rss_bytes"] > 0
        # the tiny model runs fp32 on the CPU: its multi-token passes use packed weight copies
        assert status["model"]["packed_weights_bytes"] > 0
        c.call("close", {"uri": uri})
        assert c.call("status")["documents"]["open"] == 0


def _is_prompt_for(prompt: str, text: str, offset: int) -> bool:
    """The prompt is the text before the cursor, backed off to a token boundary (prompt.py)."""
    return text[:offset].startswith(prompt) and offset - 16 <= len(prompt) <= offset


def _answer(c: Client, uri: str, text: str, offset: int, n: int = 6) -> list[int]:
    return c.call("complete", {"uri": uri, "text": text, "offset": offset, "maxTokens": n})["token_ids"]


def test_concurrent_clients_get_the_answers_they_get_alone(daemon):
    texts = [SOURCE, SOURCE.replace("a + b", "a * b"), "x = [1, 2, 3]\nfor v in x:\n    print(v"]
    with daemon.client() as c:
        alone = [_answer(c, f"mem://alone{i}", t, len(t) - 3) for i, t in enumerate(texts)]
    results: dict[int, list] = {}
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            with daemon.client() as c:
                c.call("open", {"uri": f"mem://c{i}", "text": texts[i], "version": 1})
                results[i] = [c.call("complete", {"uri": f"mem://c{i}", "offset": len(texts[i]) - 3,
                                                  "maxTokens": 6})["token_ids"] for _ in range(2)]
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    for i in range(len(texts)):
        assert results[i] == [alone[i], alone[i]]


def _wait_running(c: Client, request_id: str) -> None:
    wait_until(lambda: (c.call("status")["requests"]["running"] or {}).get("requestId") == request_id,
               timeout=60)


def test_cancel_stops_a_running_request(daemon):
    with daemon.client() as c, daemon.client() as watcher:
        msgid = c.send("complete", {"uri": "mem://long", "text": "x", "offset": 1,
                                    "requestId": "long-1", **LONG})
        _wait_running(watcher, "long-1")
        assert watcher.call("cancel", {"requestId": "long-1"}) == {"cancelled": 0}  # not its request
        assert c.call("cancel", {"requestId": "long-1"}) == {"cancelled": 1}
        resp = c.wait_response(msgid)
        assert resp.error["code"] == REQUEST_CANCELLED
        assert watcher.call("status")["requests"]["running"] is None


def test_newer_request_supersedes_the_older(daemon):
    with daemon.client() as c, daemon.client() as watcher:
        old = c.send("complete", {"uri": "mem://s", "text": "y", "offset": 1, "requestId": "old", **LONG})
        _wait_running(watcher, "old")
        new = c.send("complete", {"uri": "mem://s", "text": "y = 1", "offset": 5, "maxTokens": 4})
        resp = c.wait_response(old)
        assert resp.error["code"] == REQUEST_CANCELLED and "superseded" in resp.error["message"]
        assert 1 <= len(c.wait(new)["token_ids"]) <= 4


@pytest.mark.parametrize("typed", [False, True])
def test_a_prepared_edit_prefills_only_what_was_not_prepared_and_answers_as_unprepared(daemon, typed):
    """prepareEdit (sent when the editor asks for the instruction, and again with the instruction
    typed so far when the typing pauses) fills the edit's KV cache up to the instruction, or
    through it; the edit then reuses it, prefills nothing more in the second case, and its
    answer is the same token for token."""
    with daemon.client() as c:
        uri = f"file:///tmp/ngd-prepare-{'typed' if typed else 'opened'}.py"
        c.call("open", {"uri": uri, "text": SOURCE, "version": 1})
        edit = {"uri": uri, "start": 0, "end": len(SOURCE), "instruction": "rename n to count",
                "maxTokens": 12}
        cold = c.call("edit", edit)
        c.call("close", {"uri": uri})  # drops the document's KV caches
        c.call("open", {"uri": uri, "text": SOURCE, "version": 1})
        prepared = c.call("prepareEdit", {"uri": uri, "start": edit["start"], "end": edit["end"], "version": 1,
                                          **({"instruction": edit["instruction"]} if typed else {})})
        assert prepared["prefilled"] == prepared["tokens"] - 1 > 40 and prepared["reused"] == 0
        warm = c.call("edit", edit)
        assert warm["token_ids"] == cold["token_ids"] and warm["text"] == cold["text"]
        assert warm["stats"]["reused_tokens"] == prepared["prefilled"]
        assert warm["stats"]["prefill_tokens"] == cold["stats"]["prefill_tokens"] - prepared["prefilled"]
        assert (warm["stats"]["prefill_tokens"] == 0) == typed
        c.call("close", {"uri": uri})


def test_a_completion_where_the_cursor_rested_answers_as_unprepared_and_prepares_are_counted(daemon):
    """prepareComplete (sent when the editor's cursor rests) fills the document's KV cache with
    the completion prompt there; the user types, the completion reuses it, same answer."""
    with daemon.client() as c:
        uri = "file:///tmp/ngd-prepare-complete.py"
        typed = SOURCE + "    re"
        c.call("open", {"uri": uri, "text": typed, "version": 1})
        ask = {"uri": uri, "offset": len(typed), "maxTokens": 12}
        cold = c.call("complete", ask)
        c.call("close", {"uri": uri})  # drops the document's KV caches
        c.call("open", {"uri": uri, "text": SOURCE, "version": 1})
        before = c.call("status")["engine"]["prepared"]
        prepared = c.call("prepareComplete", {"uri": uri, "offset": len(SOURCE), "version": 1})
        assert prepared["prefilled"] == prepared["tokens"] - 1 > 20 and prepared["reused"] == 0
        assert c.call("status")["engine"]["prepared"] == {
            "prepares": before["prepares"] + 1, "prefill_tokens": before["prefill_tokens"] + prepared["prefilled"]}
        c.call("change", {"uri": uri, "version": 2, "changes": [{"start": len(SOURCE), "end": len(SOURCE),
                                                                 "text": "    re"}]})
        warm = c.call("complete", ask)
        assert warm["token_ids"] == cold["token_ids"] and warm["text"] == cold["text"]
        assert prepared["prefilled"] - 8 <= warm["stats"]["reused_tokens"] <= prepared["prefilled"]
        assert warm["stats"]["prefill_tokens"] == cold["stats"]["prefill_tokens"] - warm["stats"]["reused_tokens"]
        c.call("close", {"uri": uri})


def test_file_events_update_the_index(daemon):
    with daemon.client() as c:
        wait_until(lambda: all(f["state"] == "ready" for f in c.call("status")["workspace"]["folders"]))
        before = c.call("status")
        (daemon.workspace / "newmod.py").write_text("def brand_new_function(alpha, beta):\n"
                                                   "    return alpha * beta + 42\n" * 20)
        (daemon.workspace / "skipped").mkdir()
        (daemon.workspace / "skipped" / "ignored.py").write_text("print('ignored')\n")
        wait_until(lambda: c.call("status")["workspace"]["events"]["reindexed"]
                   > before["workspace"]["events"]["reindexed"])
        after = c.call("status")
        assert after["index"] != before["index"]  # the index's own figures moved
        assert after["workspace"]["events"]["ignored"] > before["workspace"]["events"]["ignored"]
        (daemon.workspace / "newmod.py").unlink()
        wait_until(lambda: c.call("status")["workspace"]["events"]["removed"]
                   > before["workspace"]["events"]["removed"])


def test_killed_client_mid_request_leaves_the_daemon_serving(daemon):
    with daemon.client() as c:
        expected = _answer(c, "mem://k2", SOURCE, 40)
        script = (
            "import sys, time\n"
            "from ngramd.daemon.protocol.client import Client\n"
            f"c = Client({str(daemon.sock)!r})\n"
            "c.send('complete', {'uri': 'mem://killed', 'text': 'z', 'offset': 1, "
            "'requestId': 'victim', 'maxTokens': 3000})\n"
            "time.sleep(600)\n"
        )
        victim = subprocess.Popen([sys.executable, "-c", script], cwd=REPO,
                                  env={**os.environ, "PYTHONPATH": str(REPO)})
        try:
            _wait_running(c, "victim")
        finally:
            victim.send_signal(signal.SIGKILL)
            victim.wait()
        wait_until(lambda: c.call("status")["requests"].get("client disconnected", 0) >= 1)
        assert _answer(c, "mem://k2", SOURCE, 40) == expected


# -- fuzzing ----------------------------------------------------------------------------

_scalars = (st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats()
            | st.text(max_size=12) | st.binary(max_size=12))
_values = st.recursive(_scalars, lambda ch: st.lists(ch, max_size=4)
                       | st.dictionaries(st.text(max_size=6), ch, max_size=4), max_leaves=8)
_keys = st.sampled_from(["uri", "text", "version", "offset", "changes", "start", "end", "maxTokens",
                         "temperature", "topP", "seed", "requestId", "instruction", "multiline",
                         "stop", "speculate", "languageId"])
_methods = st.sampled_from(["open", "change", "close", "complete", "edit", "cancel", "status",
                            "nope", "", "Complete"]) | st.text(max_size=8)
# a request that happens to be valid must stay cheap: model calls get at most 4 tokens
_params = st.one_of(
    _values,
    st.dictionaries(_keys, _values, max_size=6),
    st.fixed_dictionaries({"uri": st.sampled_from(["mem://f", "file:///nope.py"]) | st.text(max_size=4),
                           "text": st.text(max_size=30) | _values,
                           "offset": st.integers(-3, 40) | _values,
                           "maxTokens": st.integers(-2, 4) | st.text(max_size=2),
                           "version": st.integers(-2, 5) | _values},
                          optional={"changes": _values | st.lists(
                              st.fixed_dictionaries({"text": st.text(max_size=5),
                                                     "start": st.integers(-2, 40),
                                                     "end": st.integers(-2, 40)}), max_size=3)}),
)
_message = st.one_of(
    st.tuples(_methods, _params).map(lambda mp: ("req", mp)),
    st.tuples(_methods, _params).map(lambda mp: ("note", mp)),
    _values.map(lambda v: ("raw", v)),  # any msgpack value; not a message
    st.tuples(st.sampled_from([0, 1, 2, 3, -1]), _values, _values, _values).map(lambda t: ("raw", list(t))),
)
KNOWN_CODES = {PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR,
               REQUEST_CANCELLED, CONTENT_MODIFIED}
FUZZ_SETTINGS = dict(deadline=None, database=None, derandomize=True,
                     suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def baseline(daemon):
    with daemon.client() as c:
        return _answer(c, "mem://baseline", SOURCE, 60, n=8)


def test_fuzz_messages_each_answered_daemon_keeps_serving(daemon, baseline):
    conn: dict[str, Client] = {}

    @settings(max_examples=300, **FUZZ_SETTINGS)
    @given(st.lists(_message, min_size=1, max_size=10))
    def run(messages):
        c = conn.get("c")
        if c is None:
            c = conn["c"] = daemon.client(timeout=60)
        pending = []
        for kind, payload in messages:
            if kind == "req":
                pending.append(c.send(*payload))
            elif kind == "note":
                c.notify(*payload)
            else:
                c.send_raw(msgpack.packb(payload, use_bin_type=True))
        for msgid in pending:  # every request gets exactly one reply, result or known error
            resp = c.wait_response(msgid)
            assert resp.error is None or resp.error["code"] in KNOWN_CODES, resp.error
        assert c.call("status")["daemon"]["ready"]
        c.notifications.clear()

    try:
        run()
    finally:
        if "c" in conn:
            conn["c"].close()
    with daemon.client() as c:
        assert _answer(c, "mem://baseline", SOURCE, 60, n=8) == baseline


def test_fuzz_garbage_bytes_and_oversized_messages(daemon, baseline):
    @settings(max_examples=150, **FUZZ_SETTINGS)
    @given(st.binary(min_size=1, max_size=200))
    def run(data):
        with daemon.client(timeout=30) as c:
            try:
                c.send_raw(data + pack_request(1, "status", {}))
                c.sock.shutdown(socket.SHUT_WR)  # end of input: the daemon must answer or hang up
            except DaemonUnavailable:
                pass  # it already hung up on the garbage
            c.read_until_closed()  # a TimeoutError here: the daemon neither answered nor hung up
            for note in c.notifications:
                assert note.method == "error" and note.params["code"] in KNOWN_CODES

    run()
    limit = 1 << 20  # the fixture's --max-message-bytes
    with daemon.client() as c:
        try:
            c.send_raw(pack_request(9, "open", {"uri": "big", "text": "x" * (limit + 50_000), "version": 1}))
        except DaemonUnavailable:
            pass  # it hung up while we were still sending: also a refusal
        else:
            note = c.wait_notification("error")
            assert "larger than" in note.params["message"]
    with daemon.client() as c:
        assert _answer(c, "mem://baseline", SOURCE, 60, n=8) == baseline
        assert c.call("status")["requests"]["errors"]


def test_a_wiped_socket_folder_is_made_again_and_the_same_daemon_answers(daemon):
    """A runtime dir wiped (socket and lock file gone): the daemon binds its socket again (in
    the 2 s of its check) and takes the lock anew, instead of running on unreachable."""
    from ngramd.daemon.protocol.paths import lock_holder, socket_is_live

    shutil.rmtree(daemon.sock.parent)
    wait_until(lambda: socket_is_live(daemon.sock, timeout=5), timeout=60)
    assert stat.S_IMODE(daemon.sock.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(daemon.sock.lstat().st_mode) == 0o600
    assert lock_holder(daemon.sock) == daemon.proc.pid
    r = daemon.cli("status")
    assert r.returncode == 0 and f"pid {daemon.proc.pid}" in r.stdout, r.stderr


# -- status and stop (last: it ends the module's daemon) ------------------------------------

def test_status_and_stop_cli(daemon):
    r = daemon.cli("status")
    assert r.returncode == 0, r.stderr
    assert "model   tiny" in r.stdout and "rss" in r.stdout and "acceptance" in r.stdout
    r = daemon.cli("status", "--json")
    assert r.returncode == 0 and '"daemon"' in r.stdout
    r = daemon.cli("stop")
    assert r.returncode == 0, r.stderr
    assert daemon.proc.wait(30) == 0
    assert not daemon.sock.exists()
    assert not daemon.sock.with_name(daemon.sock.name + ".lock").exists()  # removed at a clean exit
    r = daemon.cli("status")
    assert r.returncode == 1 and "no daemon" in r.stderr
