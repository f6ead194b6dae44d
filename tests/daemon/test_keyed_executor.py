"""KeyedExecutor: one key's jobs in order, one at a time; a job held up blocks only its key."""

from __future__ import annotations

import threading

import pytest

from ngramd.daemon.service.keyed_executor import KeyedExecutor


def test_one_keys_jobs_run_in_order_one_at_a_time():
    ex = KeyedExecutor(4, "t")
    try:
        release, second_started = threading.Event(), threading.Event()
        first = ex.submit("doc", release.wait, 10)
        second = ex.submit("doc", second_started.set)
        # with threads free, a job of the same key must still wait for the one before it
        assert not second_started.wait(0.3) and not first.done()
        release.set()
        assert first.result(10) is True and second.result(10) is None and second_started.is_set()
        ran = []
        futures = [ex.submit("doc", ran.append, i) for i in range(200)]
        for f in futures:
            f.result(10)
        assert ran == list(range(200))
    finally:
        ex.shutdown()


def test_a_key_held_up_does_not_hold_up_another():
    ex = KeyedExecutor(2, "t")
    release = threading.Event()
    slow = ex.submit("big", release.wait, 10)
    later_same_key = ex.submit("big", lambda: "after")
    assert ex.submit("small", lambda: "done").result(10) == "done"  # while "big" is held
    assert not slow.done() and not later_same_key.done()
    release.set()
    assert slow.result(10) is True and later_same_key.result(10) == "after"
    ex.shutdown()


def test_an_error_reaches_its_caller_and_the_key_goes_on():
    ex = KeyedExecutor(1, "t")
    failing = ex.submit("k", lambda: 1 / 0)
    after = ex.submit("k", lambda: "ok")
    with pytest.raises(ZeroDivisionError):
        failing.result(10)
    assert after.result(10) == "ok"
    ex.shutdown()


def test_shutdown_cancels_what_has_not_started():
    ex = KeyedExecutor(1, "t")
    release = threading.Event()
    running = ex.submit("k", release.wait, 10)
    queued = ex.submit("k", lambda: "never")
    ex.shutdown()
    assert queued.cancelled()
    for key in ("k", "other"):  # the running key's too: its drain would take it, and never run it
        with pytest.raises(RuntimeError):
            ex.submit(key, lambda: None)
    release.set()
    assert running.result(10) is True


class _SlowOpenIndex:
    """An index whose open of the text "BIG" waits to be released (a big document tokenizing)."""

    def __init__(self):
        self.release = threading.Event()
        self.calls = []

    def open_buffer(self, uri, text):
        if text == "BIG":
            assert self.release.wait(10)
        self.calls.append(("open", uri, text))

    def edit_buffer(self, uri, start, end, text, result=None):
        self.calls.append(("edit", uri, text))

    def close_buffer(self, uri):
        self.calls.append(("close", uri))


def test_the_daemon_syncs_a_document_while_another_big_one_is_being_indexed():
    """Each document's index updates in order, but not behind another document's: one
    thread for all held every client's keystrokes behind a big document's tokenizing."""
    import asyncio

    from ngramd.daemon.service.methods import Service

    index = _SlowOpenIndex()
    service = Service(None, index)

    async def scenario():
        big = asyncio.ensure_future(service.dispatch(1, "open", {"uri": "file:///big.py", "text": "BIG", "version": 1}))
        await asyncio.sleep(0)
        big_change = asyncio.ensure_future(service.dispatch(
            1, "change", {"uri": "file:///big.py", "version": 2, "changes": [{"text": "BIG!"}]}))
        await asyncio.wait_for(service.dispatch(2, "open", {"uri": "file:///small.py", "text": "s", "version": 1}), 10)
        await asyncio.wait_for(service.dispatch(
            2, "change", {"uri": "file:///small.py", "version": 2,
                          "changes": [{"range": {"start": 1, "end": 1}, "text": "t"}]}), 10)
        assert not big.done() and not big_change.done()
        index.release.set()
        await asyncio.wait_for(asyncio.gather(big, big_change), 10)

    try:
        asyncio.run(scenario())
    finally:
        service.close()
    big_calls = [c for c in index.calls if c[1] == "file:///big.py"]
    assert big_calls == [("open", "file:///big.py", "BIG"), ("open", "file:///big.py", "BIG!")]  # in order
    assert index.calls.index(("open", "file:///small.py", "s")) < index.calls.index(big_calls[0])


def test_a_cancelled_jobs_callback_may_call_the_executor_at_shutdown():
    """Cancelling runs the future's callbacks at once: under the executor's lock, one that
    submitted (asyncio's future chaining, a logger) waited on that lock for ever. Run in a
    process of its own: a deadlock there must fail this test, not hang the test run at exit."""
    import subprocess
    import sys
    from pathlib import Path

    script = """
import threading
from ngramd.daemon.service.keyed_executor import KeyedExecutor
ex = KeyedExecutor(1, "t")
release = threading.Event()
ex.submit("k", release.wait, 10)
queued = ex.submit("k", lambda: None)
refused = []
def submit_again(fut):
    try:
        ex.submit("k", lambda: None)
    except RuntimeError as exc:
        refused.append(exc)
queued.add_done_callback(submit_again)
ex.shutdown()
release.set()
assert queued.cancelled() and len(refused) == 1
print("ok")
"""
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], cwd=repo, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
