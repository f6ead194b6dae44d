"""The `edit` method's parameters are checked before the request is queued."""

from __future__ import annotations

from types import SimpleNamespace

from daemon_helpers import wait_until

from ngramd.daemon.protocol.rpc import INVALID_PARAMS


def test_an_invalid_edit_does_not_supersede_the_running_request(inproc):
    with inproc.client() as c:
        c.call("open", {"uri": "b", "text": "BLOCK here", "version": 1})
        running = c.send("complete", {"uri": "b", "offset": 0})
        wait_until(lambda: inproc.completer.started.is_set())
        resp = c.wait_response(c.send("edit", {"uri": "b", "start": 0, "end": 5, "instruction": "  "}))
        assert resp.error["code"] == INVALID_PARAMS and "instruction is empty" in resp.error["message"]
        assert c.call("status")["requests"]["running"] is not None  # still running, not superseded
        assert c.call("cancel", {"uri": "b"}) == {"cancelled": 1}
        c.wait_response(running)


def test_completion_options_on_an_edit_are_refused_not_ignored(inproc):
    with inproc.client() as c:
        c.call("open", {"uri": "a", "text": "abc def", "version": 1})
        for extra in ({"stop": ["\n"]}, {"multiline": False}):
            resp = c.wait_response(c.send("edit", {"uri": "a", "start": 0, "end": 3, "instruction": "up", **extra}))
            assert resp.error["code"] == INVALID_PARAMS and "does not take" in resp.error["message"]
        assert c.call("edit", {"uri": "a", "start": 0, "end": 3, "instruction": "up"})["text"] == "ABC"


def test_an_edit_too_long_for_the_model_is_refused_before_it_supersedes_the_running_edit(inproc):
    """Judged from characters before queueing (nothing tokenized on the event loop): a model
    of 64 positions whose longest token is 2 bytes cannot fit a 100-character selection."""
    model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=64), modules=lambda: [])
    inproc.completer.runtime = SimpleNamespace(model=model, vocab_size=3, token_bytes=lambda i: b"ab"[:i])
    with inproc.client() as c:
        text = "BLOCK " + "x" * 100
        c.call("open", {"uri": "b", "text": text, "version": 1})
        running = c.send("edit", {"uri": "b", "start": 0, "end": 5, "instruction": "lower"})
        wait_until(lambda: inproc.completer.started.is_set())
        for params in ({"start": 0, "end": len(text), "instruction": "lower"},  # >= 56 + 53 tokens
                       {"start": 0, "end": 5, "instruction": "x" * 100_000}):  # over the cap
            resp = c.wait_response(c.send("edit", {"uri": "b", **params}))
            assert resp.error["code"] == INVALID_PARAMS and "too long to rewrite" in resp.error["message"]
            assert c.call("status")["requests"]["running"] is not None  # still running, not superseded
        assert c.call("cancel", {"uri": "b"}) == {"cancelled": 1}
        c.wait_response(running)


def test_the_edit_length_bound_is_found_when_the_service_is_built_not_on_the_first_edit():
    """Reading every token's bytes takes ~0.15 s on the real vocabulary: done before the
    event loop runs, not inside the first edit's handler on the loop."""
    from ngramd.daemon.service.methods import Service

    reads = []
    model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=64), modules=lambda: [])
    runtime = SimpleNamespace(model=model, vocab_size=3, token_bytes=lambda i: reads.append(i) or b"ab"[:i])
    from ngramd.daemon.edit.session import EditingCompleter

    completer = SimpleNamespace(runtime=runtime)
    completer.edit_length_bound = lambda: EditingCompleter.edit_length_bound(completer)
    service = Service(completer, None)
    assert sorted(reads) == [0, 1, 2]
    assert service._edit_bound.positions == 64 and service._edit_bound.longest_token == 2


def test_stop_loops_reaches_the_engine_and_is_on_by_default(inproc):
    with inproc.client() as c:
        c.call("open", {"uri": "a", "text": "abc def", "version": 1})
        edit = {"uri": "a", "start": 0, "end": 3, "instruction": "up"}
        c.call("edit", edit)
        c.call("edit", {**edit, "stopLoops": False})
        assert [req.stop_loops for req in inproc.completer.edits] == [True, False]
        resp = c.wait_response(c.send("edit", {**edit, "stopLoops": "no"}))
        assert resp.error["code"] == INVALID_PARAMS and "stopLoops" in resp.error["message"]
        assert len(inproc.completer.edits) == 2


def test_a_rewrite_whose_document_closes_while_it_waits_leaves_no_cache_behind(inproc):
    """A rewrite runs on after its document closes (the editor may still apply it), so the
    close's cache drop comes before it, and the cache it builds must be dropped after it."""
    with inproc.client() as c:
        c.call("open", {"uri": "b", "text": "BLOCK here", "version": 1})
        c.call("open", {"uri": "a", "text": "abc def", "version": 1})
        running = c.send("complete", {"uri": "b", "offset": 0})
        wait_until(lambda: inproc.completer.started.is_set())
        queued = c.send("edit", {"uri": "a", "start": 0, "end": 3, "instruction": "up"})
        c.call("close", {"uri": "a"})
        assert c.call("cancel", {"uri": "b"}) == {"cancelled": 1}
        c.wait_response(running)
        assert c.wait_response(queued).result["text"] == "ABC"
        wait_until(lambda: inproc.completer.calls[-1:] == ["drop a"])
        calls = inproc.completer.calls
        assert calls.index("a") < len(calls) - 1  # a drop after the rewrite ran
