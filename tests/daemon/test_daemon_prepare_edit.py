"""The `prepareEdit` method: an edit's prompt prefilled ahead, giving way to every request."""

from __future__ import annotations

import pytest
from daemon_helpers import wait_until

from ngramd.daemon.protocol.rpc import REQUEST_CANCELLED, RpcError


def test_prepare_edit_answers_what_it_prefilled(inproc):
    with inproc.client() as c:
        c.call("open", {"uri": "a", "text": "abc def", "version": 1})
        assert c.call("prepareEdit", {"uri": "a", "start": 0, "end": 3}) == {
            "tokens": 4, "prefilled": 3, "reused": 0}
        assert c.call("prepareEdit", {"uri": "s", "text": "stateless", "start": 2, "end": 5})["prefilled"] == 5


def test_a_running_prepare_gives_way_to_a_completion_of_another_document(inproc):
    with inproc.client() as c:
        c.call("open", {"uri": "b", "text": "BLOCK here", "version": 1})
        c.call("open", {"uri": "a", "text": "abc def", "version": 1})
        prepare = c.send("prepareEdit", {"uri": "b", "start": 0, "end": 5})
        wait_until(lambda: inproc.completer.started.is_set())
        assert c.call("complete", {"uri": "a", "offset": 0})["text"] == "fed cba"
        resp = c.wait_response(prepare)
        assert resp.error["code"] == REQUEST_CANCELLED and "preempted" in resp.error["message"]
        assert c.call("status")["requests"]["preempted"] == 1


@pytest.mark.parametrize("params, message", [
    ({"uri": "a", "start": 5, "end": 2}, "end"),
    ({"uri": "a", "start": 0, "end": 99}, "end"),
    ({"uri": "a", "start": 0}, "end"),
    ({"uri": "nope", "start": 0, "end": 0}, "not open"),
    ({"uri": "a", "start": 0, "end": 1, "version": 7}, "version 7"),
])
def test_bad_prepare_requests_get_clear_errors_and_run_nothing(inproc, params, message):
    with inproc.client() as c:
        c.call("open", {"uri": "a", "text": "abc def", "version": 1})
        with pytest.raises(RpcError) as err:
            c.call("prepareEdit", params)
        assert message in err.value.message
        assert c.call("status")["requests"].get("done", 0) == 0 and inproc.completer.calls == []


def test_the_instruction_typed_so_far_reaches_the_engine_and_a_blank_one_does_not(inproc):
    with inproc.client() as c:
        c.call("open", {"uri": "a", "text": "abc def", "version": 1})
        for typed in ("rename a", "   ", None):
            params = {"uri": "a", "start": 0, "end": 3, **({} if typed is None else {"instruction": typed})}
            assert c.call("prepareEdit", params)["tokens"] == 4
        assert inproc.completer.typed == ["rename a", None, None]


@pytest.mark.parametrize("instruction, message", [
    (5, "instruction"), ("x" * 10_001, "shorten the instruction")])
def test_a_bad_typed_instruction_gets_a_clear_error_and_runs_nothing(inproc, instruction, message):
    with inproc.client() as c:
        c.call("open", {"uri": "a", "text": "abc def", "version": 1})
        with pytest.raises(RpcError) as err:
            c.call("prepareEdit", {"uri": "a", "start": 0, "end": 3, "instruction": instruction})
        assert message in err.value.message and inproc.completer.calls == []
