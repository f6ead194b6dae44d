"""Which older jobs a new one supersedes (daemon/service/worker.py)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from ngramd.daemon.protocol.rpc import REQUEST_CANCELLED, RpcError
from ngramd.daemon.service.worker import PREPARE_COMPLETE, PREPARE_EDIT, Job, Worker


async def _outcomes(kinds_and_uris, max_queued: int | None = None):
    """Submit jobs while the first one runs; the outcome of each: "done" or the error's message."""
    loop = asyncio.get_running_loop()
    worker = Worker() if max_queued is None else Worker(max_queued=max_queued)
    started, release = threading.Event(), threading.Event()

    def run(cancel: threading.Event) -> str:
        started.set()
        while not release.is_set() and not cancel.is_set():
            release.wait(0.01)
        return "ok"

    jobs = [Job(kind=kind, uri=uri, fn=run, future=loop.create_future(), loop=loop) for kind, uri in kinds_and_uris]
    worker.submit(jobs[0])
    await asyncio.to_thread(started.wait, 5)
    for job in jobs[1:]:
        worker.submit(job)
    release.set()
    out = []
    for job in jobs:
        try:
            await asyncio.wait_for(job.future, 5)
            out.append("done")
        except RpcError as exc:
            assert exc.code == REQUEST_CANCELLED or exc.message.startswith("busy")
            out.append(exc.message)
    worker.stop()
    return out


def test_a_completion_does_not_supersede_a_running_edit_of_the_same_document():
    assert asyncio.run(_outcomes([("edit", "file:///a.py"), ("complete", "file:///a.py")])) == ["done", "done"]


def test_a_newer_job_of_the_same_kind_and_document_supersedes_the_older():
    out = asyncio.run(_outcomes([("edit", "file:///a.py"), ("complete", "file:///a.py"),
                                 ("complete", "file:///a.py"), ("edit", "file:///b.py")]))
    assert out == ["done", "request superseded", "done", "done"]
    out = asyncio.run(_outcomes([("edit", "file:///a.py"), ("edit", "file:///a.py")]))
    assert out == ["request superseded", "done"]


@pytest.mark.parametrize("prepare", [PREPARE_EDIT, PREPARE_COMPLETE])
def test_a_prepare_job_gives_way_to_any_request(prepare):
    """Work ahead of a request (an edit's prompt prefilled while its instruction is typed, a
    completion's while the cursor rests) delays none for more than a pass: any request, of
    any document, preempts it, running or queued."""
    out = asyncio.run(_outcomes([(prepare, "file:///a.py"), ("complete", "file:///b.py")]))
    assert out == ["request preempted", "done"]
    out = asyncio.run(_outcomes([("complete", "file:///b.py"), (prepare, "file:///a.py"),
                                 ("edit", "file:///a.py")]))
    assert out == ["done", "request preempted", "done"]


def test_a_rewrites_prepare_preempts_a_cursors_prepare_and_never_the_reverse():
    """The editor sends a completion's prepare on every rest of the cursor; a rewrite's is sent
    when the user asks for a rewrite: the cursor's must not throw it away (same document or not)."""
    out = asyncio.run(_outcomes([(PREPARE_COMPLETE, "file:///a.py"), (PREPARE_EDIT, "file:///a.py")]))
    assert out == ["request preempted", "done"]
    out = asyncio.run(_outcomes([(PREPARE_EDIT, "file:///a.py"), (PREPARE_COMPLETE, "file:///a.py"),
                                 (PREPARE_COMPLETE, "file:///b.py")]))
    assert out == ["done", "done", "done"]


@pytest.mark.parametrize("prepare", [PREPARE_EDIT, PREPARE_COMPLETE])
def test_a_prepare_job_does_not_preempt_another_documents_prepare_of_its_kind(prepare):
    out = asyncio.run(_outcomes([(prepare, "file:///a.py"), (prepare, "file:///b.py"),
                                 (prepare, "file:///b.py")]))
    assert out == ["done", "request superseded", "done"]


def test_a_request_refused_as_busy_displaces_nothing():
    """The queue full of other documents' requests: the new request is refused, and the running
    request of its own document (which it would have superseded) runs on."""
    out = asyncio.run(_outcomes([("complete", "file:///a.py"), ("complete", "file:///b.py"),
                                 ("complete", "file:///c.py"), ("complete", "file:///a.py")], max_queued=2))
    assert out == ["done", "done", "done", "busy: 2 requests queued"]
    # a slot its own superseded request frees counts: that one is taken, not refused
    out = asyncio.run(_outcomes([("complete", "file:///a.py"), ("complete", "file:///b.py"),
                                 ("complete", "file:///c.py"), ("complete", "file:///c.py")], max_queued=2))
    assert out == ["done", "done", "request superseded", "done"]
