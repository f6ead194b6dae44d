"""Once shutdown has begun (a `shutdown` request, SIGTERM), new model work is refused with
REQUEST_CANCELLED ("the daemon is shutting down") and never reaches the model; the pass already
running ends as before (docs/rpc.md, `shutdown`)."""

from __future__ import annotations

import threading

import pytest

from daemon.requests import CompletionResult, GenerationStats
from daemon.rpc import REQUEST_CANCELLED
from daemon_helpers import FakeCompleter

HELD = "file:///held.py"
LATE = "file:///late.py"
# each model method and its params on a small text
LATE_WORK = {
    "complete": {"uri": LATE, "text": "abc", "offset": 0},
    "edit": {"uri": LATE, "text": "abc", "start": 0, "end": 3, "instruction": "shout"},
    "prepareComplete": {"uri": LATE, "text": "abc", "offset": 0},
    "prepareEdit": {"uri": LATE, "text": "abc", "start": 0, "end": 3},
}


class PassInProgress(FakeCompleter):
    """A completion of ``HELD`` is a model pass that goes on after it is cancelled until the
    test releases it, holding the daemon in its shutdown grace while later work arrives."""

    def __init__(self) -> None:
        super().__init__()
        self.cancelled = threading.Event()  # the held pass was told to stop: shutdown has begun
        self.release = threading.Event()

    def complete(self, req, cancel=None):
        if req.uri != HELD:
            return super().complete(req, cancel)
        self.started.set()
        cancel.wait(30)
        self.cancelled.set()
        self.release.wait(30)
        return CompletionResult("", [], "", GenerationStats(), cancelled=True, stop_reason="cancelled")


@pytest.mark.parametrize("method", sorted(LATE_WORK))
def test_work_sent_after_shutdown_is_refused_and_never_reaches_the_model(inproc, method):
    completer = inproc.service.completer = PassInProgress()
    with inproc.client() as editor, inproc.client() as asker, inproc.client() as late:
        try:
            held = editor.send("complete", {"uri": HELD, "text": "x", "offset": 0})
            assert completer.started.wait(10)
            assert asker.call("shutdown") is None
            assert completer.cancelled.wait(10)
            late_id = late.send(method, LATE_WORK[method])
        finally:
            completer.release.set()  # without the fix the late work runs once the held pass ends
        reply = late.wait_response(late_id, timeout=10)
        assert reply.error is not None, reply.result
        assert reply.error["code"] == REQUEST_CANCELLED
        assert "shutting down" in reply.error["message"]
        assert LATE not in completer.calls
        # the pass that was running ends as before: cancelled, "request shutdown"
        assert editor.wait_response(held, timeout=10).error == {
            "code": REQUEST_CANCELLED, "message": "request shutdown"}
