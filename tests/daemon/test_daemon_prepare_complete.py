"""The `prepareComplete` method: a completion's prompt prefilled where the cursor rests,
giving way to every request."""

from __future__ import annotations

import pytest
from daemon_helpers import wait_until

from ngramd.daemon.protocol.rpc import REQUEST_CANCELLED, RpcError


def test_prepare_complete_answers_what_it_prefilled(inproc):
    with inproc.client() as c:
        c.call("open", {"uri": "a", "text": "abc def", "version": 1})
        assert c.call("prepareComplete", {"uri": "a", "offset": 3, "version": 1}) == {
            "tokens": 4, "prefilled": 3, "reused": 0}
        assert c.call("prepareComplete", {"uri": "s", "text": "stateless", "offset": 5})["prefilled"] == 5
        assert inproc.completer.calls == ["a", "s"]


def test_a_running_prepare_gives_way_to_a_completion_of_another_document(inproc):
    with inproc.client() as c:
        c.call("open", {"uri": "b", "text": "BLOCK here", "version": 1})
        c.call("open", {"uri": "a", "text": "abc def", "version": 1})
        prepare = c.send("prepareComplete", {"uri": "b", "offset": 5})
        wait_until(lambda: inproc.completer.started.is_set())
        assert c.call("complete", {"uri": "a", "offset": 0})["text"] == "fed cba"
        resp = c.wait_response(prepare)
        assert resp.error["code"] == REQUEST_CANCELLED and "preempted" in resp.error["message"]
        assert c.call("status")["requests"]["preempted"] == 1


def test_a_newer_prepare_of_the_document_supersedes_the_older(inproc):
    with inproc.client() as c:
        c.call("open", {"uri": "b", "text": "BLOCK here", "version": 1})
        first = c.send("prepareComplete", {"uri": "b", "offset": 5})
        wait_until(lambda: inproc.completer.started.is_set())
        second = c.send("prepareComplete", {"uri": "b", "offset": 6})
        assert "superseded" in c.wait_response(first).error["message"]
        c.call("cancel", {"uri": "b"})
        assert c.wait_response(second).error["code"] == REQUEST_CANCELLED


@pytest.mark.parametrize("method, params", [("prepareComplete", {"offset": 5}), ("complete", {"offset": 5})])
def test_closing_the_document_cancels_its_prepares_and_completions(inproc, method, params):
    """One still queued or running when its document closes would build the document's KV
    cache again after the close dropped it (a slot of the pool held for nothing)."""
    with inproc.client() as c:
        c.call("open", {"uri": "b", "text": "BLOCK here", "version": 1})
        c.call("open", {"uri": "a", "text": "abc def", "version": 1})
        running = c.send(method, {"uri": "b", **params})
        wait_until(lambda: inproc.completer.started.is_set())
        queued = c.send("prepareComplete", {"uri": "a", "offset": 3})  # waits behind it: another uri, kept
        c.call("close", {"uri": "b"})
        resp = c.wait_response(running)
        assert resp.error["code"] == REQUEST_CANCELLED and "cancelled" in resp.error["message"]
        assert c.wait_response(queued).result == {"tokens": 4, "prefilled": 3, "reused": 0}


@pytest.mark.parametrize("params, message", [
    ({"uri": "a", "offset": 99}, "offset"),
    ({"uri": "a", "offset": -1}, "offset"),
    ({"uri": "a"}, "offset"),
    ({"uri": "a", "offset": "3"}, "offset"),
    ({"uri": "nope", "offset": 0}, "not open"),
    ({"uri": "a", "offset": 1, "version": 7}, "version 7"),
])
def test_bad_prepare_requests_get_clear_errors_and_run_nothing(inproc, params, message):
    with inproc.client() as c:
        c.call("open", {"uri": "a", "text": "abc def", "version": 1})
        with pytest.raises(RpcError) as err:
            c.call("prepareComplete", params)
        assert message in err.value.message
        assert c.call("status")["requests"].get("done", 0) == 0 and inproc.completer.calls == []
