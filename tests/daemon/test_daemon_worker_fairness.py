"""Fairness between clients on the one model worker (daemon/service/worker.py, "turns";
issue 33 item 4): one client's flood does not hold up another's request, a newer request
supersedes only its own client's, and each client's queue waits are reported."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

from ngramd.daemon.protocol.rpc import RpcError
from ngramd.daemon.service.worker import PREFETCH, PREPARE_COMPLETE, Job, Worker

sys.path.insert(0, str(Path(__file__).parent))
from daemon_helpers import wait_until  # noqa: E402


async def _run_order(first, rest, **worker_args):
    """Submit ``rest`` (conn, kind, uri) while the job ``first`` runs; the order the jobs ran in,
    and each one's outcome ("done" or the error's message)."""
    loop = asyncio.get_running_loop()
    worker = Worker(**worker_args)
    started, release = threading.Event(), threading.Event()
    ran: list[tuple[int, str]] = []

    def make(conn: int, uri: str):
        def run(cancel: threading.Event) -> str:
            ran.append((conn, uri))
            if not started.is_set():
                started.set()
                while not release.is_set() and not cancel.is_set():
                    release.wait(0.01)
            return "ok"
        return run

    jobs = [Job(kind=kind, uri=uri, fn=make(conn, uri), future=loop.create_future(), loop=loop, conn=conn)
            for conn, kind, uri in [first, *rest]]
    worker.submit(jobs[0])
    await asyncio.to_thread(started.wait, 5)
    for job in jobs[1:]:
        worker.submit(job)
    release.set()
    outcomes = []
    for job in jobs:
        try:
            await asyncio.wait_for(job.future, 10)
            outcomes.append("done")
        except RpcError as exc:
            outcomes.append(exc.message)
    waits = {conn: worker.client_waits(conn) for conn in {j.conn for j in jobs}}
    worker.stop()
    return ran, outcomes, waits


def test_clients_take_turns_so_a_flood_does_not_hold_up_another_clients_request():
    """Client 1 queued 20 completions before client 2 asked for one: client 2's runs next,
    not after all 20 (it did: 105.7 s for a 0.25 s completion)."""
    flood = [(1, "complete", f"file:///f{i}.py") for i in range(20)]
    ran, outcomes, waits = asyncio.run(_run_order((1, "complete", "file:///x.py"),
                                                  [*flood, (2, "complete", "file:///b.py")]))
    assert set(outcomes) == {"done"}
    assert ran[:3] == [(1, "file:///x.py"), (2, "file:///b.py"), (1, "file:///f0.py")]
    assert waits[2]["ran"] == 1 and waits[1]["ran"] == 21 and waits[1]["queued"] == 0


def test_turns_alternate_between_flooding_clients_and_interactive_requests_come_first():
    rest = [(1, "complete", "file:///a1"), (1, "complete", "file:///a2"), (2, "complete", "file:///b1"),
            (2, "complete", "file:///b2"), (3, PREPARE_COMPLETE, "file:///c"), (1, PREFETCH, "file:///a0")]
    ran, outcomes, _ = asyncio.run(_run_order((1, "complete", "file:///x"), rest))
    assert [uri for _, uri in ran] == ["file:///x", "file:///b1", "file:///a1", "file:///b2", "file:///a2",
                                       "file:///c", "file:///a0"]


def test_a_newer_request_supersedes_only_its_own_clients_older_one():
    rest = [(1, "complete", "file:///a.py"), (2, "complete", "file:///a.py"), (1, "complete", "file:///a.py")]
    _, outcomes, _ = asyncio.run(_run_order((3, "complete", "file:///x.py"), rest))
    assert outcomes == ["done", "request superseded", "done", "done"]


def test_a_flooding_client_is_refused_but_cannot_starve_another():
    flood = [(1, "complete", f"file:///f{i}.py") for i in range(6)]
    _, outcomes, _ = asyncio.run(_run_order((1, "complete", "file:///x.py"),
                                            [*flood, (2, "complete", "file:///b.py")],
                                            max_queued=4, max_queued_total=4))
    assert outcomes == ["done"] * 5 + ["busy: 4 requests queued"] * 2 + ["done"]


def test_status_reports_each_clients_queue_waits(inproc):
    from ngramd.daemon.cli.serve_cmd import format_status

    with inproc.client() as a, inproc.client() as b:
        blocked = a.send("complete", {"uri": "x", "text": "BLOCK", "offset": 0})
        wait_until(lambda: inproc.completer.started.is_set())
        queued = [a.send("complete", {"uri": f"q{i}", "text": "abc", "offset": 0}) for i in range(5)]
        b_req = b.send("complete", {"uri": "b", "text": "xyz", "offset": 0})
        wait_until(lambda: len(b.call("status")["requests"]["queued"]) == 6)
        b.call("cancel", {"uri": "x"})
        a.wait_response(blocked)
        assert b.wait(b_req)["text"] == "zyx"
        assert all(a.wait(m)["text"] == "cba" for m in queued)
        status = b.call("status")
        clients = {c["conn"]: c["queue"] for c in status["daemon"]["clients"]}
        assert sorted(q["ran"] for q in clients.values()) == [1, 6]
        assert all(q["queued"] == 0 and q["wait_max_s"] >= q["wait_mean_s"] >= 0 for q in clients.values())
        text = format_status(status)
        assert "ran 6  waited mean" in text and "ran 1  waited mean" in text
