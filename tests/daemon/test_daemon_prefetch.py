"""After each answer the service decodes the next suggestion in idle time (a ``prefetch`` job),
and any request preempts that work (daemon/service/worker.py DEFERENCE)."""

from __future__ import annotations

import threading

from daemon_helpers import wait_until


def _prefetcher(seen: list, ended: list, started: threading.Event):
    def prefetch_after(req, answer, cancel):
        seen.append((req.text, req.offset, answer.text))
        started.set()
        cancel.wait(30)  # idle-time work runs until something preempts it
        ended.append(cancel.is_set())
        return None
    return prefetch_after


def test_an_answer_is_followed_by_a_prefetch_that_a_request_preempts(inproc):
    seen, ended, started = [], [], threading.Event()
    inproc.completer.prefetch_after = _prefetcher(seen, ended, started)
    with inproc.client() as c:
        c.call("open", {"uri": "a", "text": "abcdefghijkl", "version": 1})
        first = c.call("complete", {"uri": "a", "offset": 2})
        wait_until(started.is_set)
        assert seen == [("abcdefghijkl", 2, first["text"])]  # the request it follows, and its answer
        second = c.call("complete", {"uri": "a", "offset": 3})  # answered: the prefetch gave way
        assert second["text"] == "kjihgfed"
        wait_until(lambda: ended)
        assert ended[0] is True  # cancelled, not run to its end


def test_no_prefetch_follows_an_empty_answer_or_when_it_is_off(inproc):
    seen, ended, started = [], [], threading.Event()
    inproc.completer.prefetch_after = _prefetcher(seen, ended, started)
    with inproc.client() as c:
        c.call("open", {"uri": "a", "text": "abc", "version": 1})
        assert c.call("complete", {"uri": "a", "offset": 3})["text"] == ""
        inproc.service.prefetch = False
        assert c.call("complete", {"uri": "a", "offset": 0})["text"] == "cba"
        assert c.call("status")["requests"] is not None  # a round trip: anything queued has been queued
    assert seen == []
