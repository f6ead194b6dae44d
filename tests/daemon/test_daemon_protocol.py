"""The real Server + Service in-process with a fake engine: protocol, errors, queueing.

The fake completer blocks on text containing BLOCK until cancelled, so cancel and
supersede are observed deterministically (no sleeps, no timing).
"""

import logging
import socket

import msgpack
import pytest
from daemon_helpers import wait_until

from ngramd.daemon.protocol.client import Client, DaemonUnavailable
from ngramd.daemon.protocol.rpc import (
    CONTENT_MODIFIED, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR,
    REQUEST_CANCELLED, FrameReader, FrameTooLarge, RpcError, decode, msgid_of, pack_notification, pack_request,
)


def code_of(fn, *args, **kwargs) -> int:
    with pytest.raises(RpcError) as err:
        fn(*args, **kwargs)
    return err.value.code


def test_decode_normalises_response_errors():
    assert decode([1, 7, None, 3]).error is None
    assert decode([1, 7, {"code": -32800, "message": "x", "data": 1}, None]).error == \
        {"code": -32800, "message": "x", "data": 1}
    assert decode([1, 7, "boom", None]).error == {"code": INTERNAL_ERROR, "message": "boom"}
    err = decode([1, 7, {"code": "bad"}, None]).error
    assert err["code"] == INTERNAL_ERROR and isinstance(err["message"], str)


def test_decode_refuses_bools_for_the_kind_and_the_msgid():
    for obj in ([False, 99, "status", {}], [0, True, "status", {}], [True, 1, None, None], [1, False, None, None]):
        assert code_of(decode, obj) == INVALID_REQUEST
    assert decode([0, 99, "status", {}]).msgid == 99
    # where the server answers a malformed message: the same rule (an error with id 99 would
    # answer a message that is no request)
    assert [msgid_of(o) for o in ([False, 99, "x"], [0, True, "x"], [2, "m", {}], [0, 99, 5], "x")] == \
        [None, None, None, 99, None]


def test_open_change_complete_close(inproc):
    with inproc.client() as c:
        assert c.call("initialize", {"client": "t"})["server"] == "ngramd"
        c.call("open", {"uri": "file:///a.py", "text": "hello world", "version": 1})
        assert c.call("complete", {"uri": "file:///a.py", "offset": 6})["text"] == "dlrow"
        c.call("change", {"uri": "file:///a.py", "version": 2,
                          "changes": [{"start": 6, "end": 11, "text": "there"}]})
        assert c.call("complete", {"uri": "file:///a.py", "offset": 6})["text"] == "ereht"
        # the index mirrors every accepted edit
        assert inproc.index.buffers["file:///a.py"] == "hello there"
        c.call("change", {"uri": "file:///a.py", "version": 3, "changes": [{"text": "new"}]})
        assert inproc.index.buffers["file:///a.py"] == "new"
        status = c.call("status")
        assert status["documents"]["open"] == 1
        assert status["requests"]["by_method"]["complete"] == 2
        assert status["generation"]["accepted"] == 6 and status["generation"]["drafted"] == 8
        c.call("close", {"uri": "file:///a.py"})
        assert code_of(c.call, "complete", {"uri": "file:///a.py", "offset": 0}) == INVALID_PARAMS
        wait_until(lambda: "file:///a.py" not in inproc.index.buffers)


def test_stale_version_and_out_of_range(inproc):
    with inproc.client() as c:
        c.call("open", {"uri": "u", "text": "abc", "version": 3})
        assert code_of(c.call, "change", {"uri": "u", "version": 3, "changes": [{"text": "x"}]}) \
            == CONTENT_MODIFIED
        assert code_of(c.call, "complete", {"uri": "u", "offset": 0, "version": 2}) == CONTENT_MODIFIED
        assert code_of(c.call, "complete", {"uri": "u", "offset": 4}) == INVALID_PARAMS
        assert code_of(c.call, "complete", {"uri": "u", "offset": -1}) == INVALID_PARAMS
        assert code_of(c.call, "change", {"uri": "u", "version": 4,
                                          "changes": [{"text": "x", "start": 2, "end": 9}]}) == INVALID_PARAMS
        assert c.call("complete", {"uri": "u", "offset": 0, "version": 3})["text"] == "cba"


def test_stale_reopen_is_refused_and_keeps_the_newer_text(inproc):
    with inproc.client() as c, inproc.client() as other:
        c.call("open", {"uri": "u", "text": "old", "version": 1})
        c.call("change", {"uri": "u", "version": 2, "changes": [{"text": "new"}]})
        assert code_of(c.call, "open", {"uri": "u", "text": "old", "version": 1}) == CONTENT_MODIFIED
        assert c.call("complete", {"uri": "u", "offset": 0, "version": 2})["text"] == "wen"
        assert inproc.index.buffers["u"] == "new"
        # another editor numbers its versions itself: its open re-syncs the shared document
        other.call("open", {"uri": "u", "text": "theirs", "version": 1})
        assert c.call("complete", {"uri": "u", "offset": 0})["text"] == "srieht"


@pytest.mark.parametrize("method,params", [
    ("open", {"uri": 1, "text": "a", "version": 1}),
    ("open", {"uri": "u", "text": b"bytes", "version": 1}),
    ("open", {"uri": "u", "text": "a", "version": "1"}),
    ("open", {"uri": "u", "text": "a", "version": True}),
    ("open", {"uri": "", "text": "a", "version": 1}),
    ("complete", {"uri": "u", "offset": 1.5, "text": "abc"}),
    ("complete", {"uri": "u", "offset": 0, "text": "abc", "maxTokens": 0}),
    ("complete", {"uri": "u", "offset": 0, "text": "abc", "maxTokens": 10**9}),
    ("complete", {"uri": "u", "offset": 0, "text": "abc", "temperature": -1}),
    ("complete", {"uri": "u", "offset": 0, "text": "abc", "temperature": float("nan")}),
    ("complete", {"uri": "u", "offset": 0, "text": "abc", "temperature": float("inf")}),
    ("complete", {"uri": "u", "offset": 0, "text": "abc", "temperature": 1e-40}),  # overflows logits / T
    ("complete", {"uri": "u", "offset": 0, "text": "abc", "topP": float("nan")}),
    ("complete", {"uri": "u", "offset": 0, "text": "abc", "topP": 0}),
    ("complete", {"uri": "u", "offset": 0, "text": "abc", "multiline": "yes"}),
    ("complete", {"uri": "u", "offset": 0, "text": "abc", "stop": [1]}),
    ("complete", {"uri": "u", "offset": 0, "text": "abc", "requestId": [1]}),
    ("change", {"uri": "u", "version": 2, "changes": "all"}),
    ("cancel", {}),
    ("initialize", {"workspaceFolders": ["relative/dir"]}),
    ("initialize", {"workspaceFolders": ["/definitely/not/here"]}),
    ("initialize", {"workspaceFolders": "/tmp"}),
    ("status", [1, 2]),
    ("status", "x"),
])
def test_wrong_param_types_are_invalid_params(inproc, method, params):
    with inproc.client() as c:
        assert code_of(c.call, method, params) == INVALID_PARAMS
        assert c.call("status")["daemon"]["ready"]


def test_unknown_method_and_invalid_messages(inproc):
    with inproc.client() as c:
        assert code_of(c.call, "nope") == METHOD_NOT_FOUND
        # a request-shaped array with a bad method type: answered on its msgid
        c.send_raw(msgpack.packb([0, 77, 5, {}]))
        resp = c.wait_response(77)
        assert resp.error["code"] == INVALID_REQUEST
        # no msgid to answer: an "error" notification; the connection stays usable
        c.send_raw(msgpack.packb({"not": "a message"}))
        assert c.wait_notification("error").params["code"] == INVALID_REQUEST
        # a failing notification is reported by notification too
        c.notify("open", {"uri": 3})
        note = c.wait_notification("error")
        assert note.params["code"] == INVALID_PARAMS and note.params["method"] == "open"
        assert c.call("status")["requests"]["errors"]
        # unknown names are counted under one key, not kept one by one
        c.notify("x" * 1000, {})
        by_method = c.call("status")["requests"]["by_method"]
        assert by_method["<unknown>"] == 2 and "nope" not in by_method and "x" * 1000 not in by_method


def test_malformed_msgpack_closes_only_that_connection(inproc):
    with inproc.client() as bad, inproc.client() as good:
        bad.send_raw(b"\xc1\xc1\xc1")  # 0xc1 is never valid msgpack
        note = bad.wait_notification("error")
        assert note.params["code"] == PARSE_ERROR and note.params["fatal"]
        with pytest.raises(DaemonUnavailable):
            bad.call("status")
        assert good.call("status")["daemon"]["ready"]


def test_oversized_message_is_refused(inproc):
    limit = inproc.server.max_message_bytes
    with inproc.client() as c:
        with pytest.raises(OSError):  # the daemon hangs up while we are still sending
            c.send_raw(pack_request(1, "open", {"uri": "u", "text": "x" * (limit * 4), "version": 1}))
            c.wait_notification("error")
            c.call("status")
    with inproc.client() as c:
        c.sock.sendall(pack_request(1, "open", {"uri": "u", "text": "x" * (limit + 10_000), "version": 1})[:limit + 5_000])
        note = c.wait_notification("error")
        assert note.params["code"] == INVALID_REQUEST and "larger than" in note.params["message"]
    with inproc.client() as c:
        assert c.call("status")["daemon"]["ready"]


def test_frame_limit_holds_for_a_message_split_into_chunks():
    """The Unpacker drops parsed bytes, so only counting the message's own bytes bounds it."""
    limit = 1 << 16
    big = pack_request(1, "open", {"uri": "u", "text": "x", "version": 1, "junk": ["y" * 1000] * 200})
    small = pack_request(2, "status", {})
    frames = FrameReader(limit)
    assert frames.feed(small[:3]) == [] and len(frames.feed(small[3:])) == 1  # chunks under the limit: fine
    with pytest.raises(FrameTooLarge):
        for i in range(0, len(big), 4096):
            frames.feed(big[i:i + 4096])
    # a message just over the limit whose last chunk completes it is refused as well
    just_over = pack_request(3, "open", {"uri": "u", "text": "x", "version": 1, "junk": ["y" * 1024] * 64})
    assert limit < len(just_over) < limit + 1024
    frames = FrameReader(limit)
    with pytest.raises(FrameTooLarge):
        frames.feed(just_over[:limit - 10])
        frames.feed(just_over[limit - 10:])


def test_oversized_message_in_chunks_closes_the_connection(inproc):
    limit = inproc.server.max_message_bytes
    big = pack_request(1, "open", {"uri": "u", "text": "x", "version": 1,
                                   "junk": ["y" * 50_000] * (4 * limit // 50_000)})
    with inproc.client() as c:
        with pytest.raises(OSError):  # the daemon hangs up while we are still sending
            for i in range(0, len(big), 32 * 1024):
                c.sock.sendall(big[i:i + 32 * 1024])
        note = c.wait_notification("error")
        assert note.params["fatal"] and "larger than" in note.params["message"]
    with inproc.client() as c:
        assert c.call("status")["daemon"]["ready"]


def test_a_connection_has_at_most_max_in_flight_requests_pending(inproc):
    """Pipelined requests past the bound stay unread in the socket until earlier ones finish."""
    limit = inproc.server.max_in_flight
    most_pending = []
    dispatch = inproc.service.dispatch

    async def recording_dispatch(conn, method, params):
        most_pending.append(max(len(c.tasks) for c in inproc.server.connections.values()))
        return await dispatch(conn, method, params)

    inproc.service.dispatch = recording_dispatch
    with inproc.client() as c, inproc.client() as other:
        blocked = c.send("complete", {"uri": "b", "text": "BLOCK", "offset": 0})
        queued = [c.send("complete", {"uri": f"q{i}", "text": "abc", "offset": 0})
                  for i in range(limit + 10)]
        wait_until(lambda: len(other.call("status")["requests"]["queued"]) >= limit - 1)
        other.call("cancel", {"uri": "b"})
        assert c.wait_response(blocked).error["code"] == REQUEST_CANCELLED
        assert all(c.wait(msgid)["text"] == "cba" for msgid in queued)  # the rest were read later
    assert max(most_pending) <= limit


def test_a_client_that_leaves_with_its_share_of_requests_pending_has_them_cancelled(inproc):
    """Held off reading (back-pressure), the daemon must still notice the client's hang-up."""
    limit = inproc.server.max_in_flight
    c = inproc.client()
    for i in range(limit + 5):  # distinct uris: none supersedes another; the first blocks
        c.send("complete", {"uri": f"u{i}", "text": "BLOCK" if i == 0 else "abc", "offset": 0})
    with inproc.client() as other:
        wait_until(lambda: len(other.call("status")["requests"]["queued"]) >= limit - 1)
        c.close()
        wait_until(lambda: other.call("status")["requests"]["running"] is None, timeout=5)
        assert other.call("status")["requests"]["queued"] == []


def test_supersede_and_cancel(inproc):
    with inproc.client() as c, inproc.client() as other:
        c.call("open", {"uri": "b", "text": "BLOCK here", "version": 1})
        first = c.send("complete", {"uri": "b", "offset": 0, "requestId": "r1"})
        wait_until(lambda: inproc.completer.started.is_set())
        running = other.call("status")["requests"]["running"]
        assert running["requestId"] == "r1"
        # a newer request for the same uri supersedes the running one
        second = c.send("complete", {"uri": "b", "offset": 1, "requestId": "r2"})
        resp = c.wait_response(first)
        assert resp.error["code"] == REQUEST_CANCELLED and "superseded" in resp.error["message"]
        wait_until(lambda: (other.call("status")["requests"]["running"] or {}).get("requestId") == "r2")
        # a request for another uri queues behind it
        third = c.send("complete", {"uri": "other", "text": "abc", "offset": 0})
        wait_until(lambda: len(other.call("status")["requests"]["queued"]) == 1)
        # by requestId: the caller's own request (another connection's "r2" is not its own)
        assert other.call("cancel", {"requestId": "r2"}) == {"cancelled": 0}
        assert c.call("cancel", {"requestId": "r2"}) == {"cancelled": 1}
        assert c.wait_response(second).error["code"] == REQUEST_CANCELLED
        assert c.wait(third)["text"] == "cba"  # the queue moves on
        counts = other.call("status")["requests"]
        assert counts["superseded"] == 1 and counts["cancelled"] == 1 and counts["done"] >= 1


def test_cancel_by_uri_drops_queued_requests(inproc):
    with inproc.client() as c:
        c.call("open", {"uri": "b", "text": "BLOCK", "version": 1})
        blocked = c.send("complete", {"uri": "b", "offset": 0})
        wait_until(lambda: inproc.completer.started.is_set())
        queued = c.send("complete", {"uri": "q", "text": "xyz", "offset": 0})
        assert c.call("cancel", {"uri": "q"}) == {"cancelled": 1}
        assert c.wait_response(queued).error["code"] == REQUEST_CANCELLED
        assert c.call("cancel", {"uri": "b"}) == {"cancelled": 1}
        assert c.wait_response(blocked).error["code"] == REQUEST_CANCELLED
        assert "q" not in inproc.completer.calls  # dropped before it ran


def test_cancel_by_request_id_reaches_only_the_callers_requests(inproc):
    """Request ids are chosen per client: two editors both using id 1 must not cancel each other."""
    with inproc.client() as a, inproc.client() as b:
        a_blocked = a.send("complete", {"uri": "a", "text": "BLOCK", "offset": 0, "requestId": 1})
        wait_until(lambda: inproc.completer.started.is_set())
        b_queued = b.send("complete", {"uri": "b", "text": "xyz", "offset": 0, "requestId": 1})
        wait_until(lambda: len(b.call("status")["requests"]["queued"]) == 1)
        assert b.call("cancel", {"requestId": 1}) == {"cancelled": 1}  # its own, queued one
        assert b.wait_response(b_queued).error["code"] == REQUEST_CANCELLED
        assert b.call("cancel", {"uri": "a", "requestId": 1}) == {"cancelled": 0}  # a's, not b's
        assert b.call("status")["requests"]["running"]["requestId"] == 1  # a's still runs
        assert a.call("cancel", {"requestId": 1}) == {"cancelled": 1}
        assert a.wait_response(a_blocked).error["code"] == REQUEST_CANCELLED


def test_client_disconnect_mid_request_cancels_its_job(inproc):
    c = inproc.client()
    c.call("open", {"uri": "b", "text": "BLOCK", "version": 1})
    c.send("complete", {"uri": "b", "offset": 0})
    wait_until(lambda: inproc.completer.started.is_set())
    c.sock.shutdown(socket.SHUT_RDWR)
    c.close()
    with inproc.client() as other:
        wait_until(lambda: other.call("status")["requests"].get("client disconnected") == 1)
        assert other.call("status")["documents"]["open"] == 0  # its document was released
        assert other.call("complete", {"uri": "x", "text": "abcdef", "offset": 2})["text"] == "fedc"


def test_documents_are_shared_between_clients(inproc):
    with inproc.client() as a, inproc.client() as b:
        a.call("open", {"uri": "s", "text": "one two", "version": 1})
        b.call("open", {"uri": "s", "text": "one two", "version": 1})
        a.call("change", {"uri": "s", "version": 2, "changes": [{"start": 0, "end": 3, "text": "ONE"}]})
        assert b.call("complete", {"uri": "s", "offset": 0})["text"] == "ONE two"[::-1]
        a.call("close", {"uri": "s"})
        assert b.call("status")["documents"]["open"] == 1  # b still holds it
        b.call("close", {"uri": "s"})
        assert b.call("status")["documents"]["open"] == 0


def test_notifications_and_pipelining_keep_order(inproc):
    with inproc.client() as c:
        # all sent before any reply is read: open, change, complete must apply in order
        c.send_raw(pack_notification("open", {"uri": "p", "text": "abc", "version": 1})
                   + pack_notification("change", {"uri": "p", "version": 2,
                                                  "changes": [{"start": 3, "end": 3, "text": "def"}]}))
        msgid = c.send("complete", {"uri": "p", "offset": 0})
        assert c.wait(msgid) == c.call("complete", {"uri": "p", "offset": 0})
        assert c.call("complete", {"uri": "p", "offset": 0})["text"] == "fedcba"


def test_shutdown_stops_the_server(inproc):
    with inproc.client() as c:
        assert c.call("shutdown") is None
    wait_until(lambda: not inproc.sock.exists())
    with pytest.raises(DaemonUnavailable):
        Client(inproc.sock)


def test_open_buffer_shadows_its_file_until_closed(inproc, tmp_path):
    (tmp_path / "m.py").write_text("disk = 0\n")
    path = (tmp_path / "m.py").resolve()
    with inproc.client() as c:
        c.call("initialize", {"client": "t", "workspaceFolders": [tmp_path.as_uri()]})
        wait_until(lambda: c.call("status")["workspace"]["folders"][0]["state"] == "ready")
        assert inproc.index.files[str(path)] == "disk = 0\n"
        c.call("open", {"uri": path.as_uri(), "text": "buffer = 1\n", "version": 1})
        path.write_text("disk = 2\n")
        wait_until(lambda: c.call("status")["workspace"]["events"]["shadowed"] >= 1)
        assert inproc.index.files[str(path)] == "disk = 0\n"  # the open buffer wins
        c.call("close", {"uri": path.as_uri()})
        wait_until(lambda: inproc.index.files[str(path)] == "disk = 2\n")  # the disk counts again
        assert path.read_text() == "disk = 2\n"  # and the daemon never wrote it


def test_a_buffer_opened_through_a_symlink_removed_while_open_stops_shadowing_at_its_close(inproc, tmp_path):
    """The close must release the file the open counted, not whatever the uri resolves to now."""
    workspace = tmp_path / "ws"
    (workspace / "real").mkdir(parents=True)
    path = (workspace / "real" / "m.py").resolve()
    path.write_text("disk = 0\n")
    (tmp_path / "link").symlink_to(workspace / "real")
    uri = (tmp_path / "link" / "m.py").as_uri()
    with inproc.client() as c:
        c.call("initialize", {"client": "t", "workspaceFolders": [workspace.as_uri()]})
        wait_until(lambda: c.call("status")["workspace"]["folders"][0]["state"] == "ready")
        c.call("open", {"uri": uri, "text": "buffer = 1\n", "version": 1})
        (tmp_path / "link").unlink()
        c.call("close", {"uri": uri})
        path.write_text("disk = 2\n")
        wait_until(lambda: inproc.index.files[str(path)] == "disk = 2\n")  # not shadowed for good


def test_a_folder_stays_watched_while_another_editor_has_it(inproc, tmp_path):
    (tmp_path / "shared.py").write_text("shared = 1\n")
    path = str((tmp_path / "shared.py").resolve())
    folder = {"added": [tmp_path.as_uri()]}
    with inproc.client() as a, inproc.client() as b:
        a.call("initialize", {"client": "a", "workspaceFolders": [tmp_path.as_uri()]})
        b.call("initialize", {"client": "b"})
        b.call("workspaceFolders", folder)
        wait_until(lambda: a.call("status")["workspace"]["folders"][0]["state"] == "ready")
        a.call("workspaceFolders", {"removed": [tmp_path.as_uri()]})
        assert len(a.call("status")["workspace"]["folders"]) == 1  # b still has it
        assert path in inproc.index.files
        b.call("workspaceFolders", {"removed": [tmp_path.as_uri()]})
        assert a.call("status")["workspace"]["folders"] == []  # nobody has it: unwatched, forgotten
        wait_until(lambda: path not in inproc.index.files)


def test_folder_ownership_survives_disconnects_and_strangers(inproc, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    inproc.service.add_workspace(other.resolve())  # as `ngramd serve --workspace other` does
    with inproc.client() as a:
        a.call("initialize", {"client": "a", "workspaceFolders": [str(tmp_path)]})
    with inproc.client() as b:  # a is gone: its folder stays watched
        _until_the_daemon_saw_it_go(b, "a")
        assert len(b.call("status")["workspace"]["folders"]) == 2
        b.call("workspaceFolders", {"removed": [other.as_uri() + "/"]})  # the command line's: kept
        assert len(b.call("status")["workspace"]["folders"]) == 2
        b.call("workspaceFolders", {"removed": [tmp_path.as_uri() + "/"]})  # no owner left: dropped
        folders = b.call("status")["workspace"]["folders"]
        assert [f["path"] for f in folders] == [str(other.resolve())]


def _until_the_daemon_saw_it_go(client, name: str) -> None:
    """A closed connection is noticed by the daemon's loop when it gets to it (under load, after
    a later connection's requests): folder ownership changes only then."""
    wait_until(lambda: name not in [c["client"] for c in client.call("status")["daemon"]["clients"]])


def test_a_folder_no_editor_holds_goes_after_the_grace_period(inproc, tmp_path):
    with inproc.client() as a:
        a.call("initialize", {"client": "a", "workspaceFolders": [str(tmp_path)]})
    with inproc.client() as b:  # within the grace period: still watched
        _until_the_daemon_saw_it_go(b, "a")
        assert len(b.call("status")["workspace"]["folders"]) == 1
    inproc.service.orphan_grace_s = 0.0
    with inproc.client() as c:  # the next connection after it: dropped
        assert c.call("status")["workspace"]["folders"] == []



def test_a_failed_index_edit_resyncs_the_index_with_the_whole_text(inproc):
    """The index is an aid: when mirroring an edit fails, the daemon hands it the document again."""
    real_edit = inproc.index.edit_buffer
    failures = []

    def edit_once_broken(uri, start, end, new_text, result=None):
        if not failures:
            failures.append(uri)
            raise RuntimeError("simulated index failure")
        return real_edit(uri, start, end, new_text, result)

    inproc.index.edit_buffer = edit_once_broken
    with inproc.client() as c:
        c.call("open", {"uri": "file:///a.py", "text": "abc", "version": 1})
        c.call("change", {"uri": "file:///a.py", "version": 2,
                          "changes": [{"start": 0, "end": 1, "text": "X"}, {"start": 3, "end": 3, "text": "!"}]})
        assert failures == ["file:///a.py"]
        assert inproc.index.buffers["file:///a.py"] == "Xbc!"  # re-opened with the document's text
        assert inproc.index.log[-1] == ("open", "file:///a.py")
        # the second edit failed too: it carried "Xbc!" as its result, the index's copy gave "abc!"
        assert c.call("status")["requests"]["index_errors"] == 2


def test_a_change_with_many_edits_reaches_the_index_as_one_update(inproc):
    """"Replace All": hundreds of edits in one change re-sync the index once, not once per edit."""
    text = "x = 1\n" * 1000
    changes = [{"start": i, "end": i + 1, "text": "y"} for i in range(len(text) - 6, -1, -6)]  # 1000 edits
    with inproc.client() as c:
        c.call("open", {"uri": "file:///r.py", "text": text, "version": 1})
        del inproc.index.log[:]
        c.call("change", {"uri": "file:///r.py", "version": 2, "changes": changes})
        assert inproc.index.log == [("open", "file:///r.py")]
        assert inproc.index.buffers["file:///r.py"] == "y = 1\n" * 1000
        assert c.call("complete", {"uri": "file:///r.py", "offset": 0})["text"] == "y = 1\ny "[::-1]


def test_shutdown_answers_requests_in_flight_before_closing(inproc):
    """A client waiting on a request hears "cancelled (shutdown)", not a closed socket."""
    c = inproc.client()
    c.call("open", {"uri": "b", "text": "BLOCK", "version": 1})
    running = c.send("complete", {"uri": "b", "offset": 0})
    wait_until(lambda: inproc.completer.started.is_set())
    queued = c.send("complete", {"uri": "q", "text": "xyz", "offset": 0})
    with inproc.client() as other:
        other.call("shutdown")
    answers = {msgid: c.wait_response(msgid).error for msgid in (running, queued)}
    assert all(e is not None and e["code"] == REQUEST_CANCELLED and "shutdown" in e["message"]
               for e in answers.values()), answers
    c.close()


def test_initialize_says_the_longest_message_the_daemon_reads(inproc):
    with inproc.client() as c:
        info = c.call("initialize", {"client": "pytest", "workspaceFolders": []})
    assert info["maxMessageBytes"] == inproc.server.max_message_bytes == 1 << 20
    assert info["maxDocumentChars"] == inproc.service.docs.max_document_chars == 8 << 20


@pytest.mark.parametrize("method, extra", [("complete", {"offset": 0}),
                                           ("edit", {"start": 0, "end": 1, "instruction": "up"}),
                                           ("prepareEdit", {"start": 0, "end": 1})])
def test_a_stateless_text_longer_than_a_document_may_be_is_refused(inproc, method, extra):
    """``text`` in the request instead of an open document: the same limit as ``open``'s."""
    inproc.service.docs.max_document_chars = 10
    with inproc.client() as c:
        with pytest.raises(RpcError) as err:
            c.call(method, {"uri": "s", "text": "x" * 11, **extra})
        assert err.value.code == INVALID_PARAMS and "exceeds 10" in err.value.message
        assert c.call(method, {"uri": "s", "text": "x" * 10, **extra}) is not None
    assert inproc.completer.calls == ["s"]


@pytest.mark.parametrize("chunk", [4096, 65536, 100_000, None])
def test_a_message_just_under_the_limit_among_others_is_read(chunk):
    """Messages before and after it share the reads: only a message's own bytes count."""
    limit = 1 << 18
    small = [pack_request(i, "open", {"uri": f"u{i}", "text": "y" * 500, "version": 1}) for i in range(3)]
    probe = pack_request(9, "open", {"uri": "big", "text": "", "version": 1})
    big = pack_request(9, "open", {"uri": "big", "text": "x" * (limit - len(probe) - 100), "version": 1})
    assert limit - 200 < len(big) <= limit
    stream = b"".join(small) + big + b"".join(small)
    frames = FrameReader(limit)
    got = []
    step = chunk or len(stream)
    for i in range(0, len(stream), step):
        got += frames.feed(stream[i:i + step])
    assert [decode(o).params["uri"] for o in got] == ["u0", "u1", "u2", "big", "u0", "u1", "u2"]


def test_a_client_that_leaves_with_many_replies_pending_gets_no_writes(inproc, caplog):
    """Replies waiting for the connection's lock when the peer left are dropped, not written:
    asyncio logged every write to the dead socket after the 5th."""
    import time

    caplog.set_level(logging.WARNING, logger="asyncio")
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(inproc.sock))
    s.sendall(b"".join(pack_request(i, "status", {}) for i in range(1, 1001)))
    time.sleep(1.0)  # the daemon answers into full buffers: most replies wait for the lock
    s.close()
    time.sleep(1.0)
    with inproc.client() as c:
        assert c.call("status")["daemon"]["ready"]
    assert not [r for r in caplog.records if "socket.send() raised" in r.getMessage()]


@pytest.mark.parametrize("seed", [-1, 2**63])
def test_a_seed_out_of_range_is_refused_naming_it(inproc, seed):
    with inproc.client() as c:
        with pytest.raises(Exception) as err:
            c.call("complete", {"uri": "file:///s.py", "text": "x = 1\n", "offset": 6, "maxTokens": 1,
                                "temperature": 0.5, "seed": seed})
    assert "'seed' must be between 0 and" in str(err.value)
