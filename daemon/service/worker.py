"""The one model worker: a fair queue of jobs run on a single dedicated thread.

Vocabulary:
- *job*: one model call (``complete`` or ``edit``) for a document ``uri``, with
  its own ``cancel`` Event that the engine checks between verification steps.
- *supersede*: a client's new job for a uri cancels every older job of the same kind
  it asked for that uri — a queued one is dropped before it runs, the running one has
  its Event set. Only the same kind: a completion asked while a rewrite of the
  document runs (the editor asks on every pause) must not throw the rewrite away; only
  the same client (``conn``): two editors on one file must not cancel each other's.
- *turns*: the next job is the least deferring kind's (requests first, see *preempted*),
  of the client (``conn``) served longest ago, its oldest: clients take turns on the
  model, so a client that queued 60 completions delays another's by at most one job.
  A client may queue ``max_queued`` jobs (past that it is refused "busy"), and a client
  with none queued is never refused: a flood from one client cannot starve another.
  Each client's queue waits are kept (``client_waits``; ``ngramd status``).
- *preempted*: a prepare job (work done ahead of a request the user has not made
  yet: ``PREPARE_EDIT``, an edit's prompt prefilled while its instruction is typed;
  ``PREPARE_COMPLETE``, a completion's while the cursor rests) gives way: a job
  cancels the queued and running jobs that defer more than it does (``DEFERENCE``:
  requests not at all, then a rewrite's prepare, then a completion's, which the
  editor sends on every rest of the cursor). So a request waits at most for the
  model pass a prepare is in (its passes are short: daemon/engine/completer.py
  ``PREPARE_CHUNK``), and a rewrite's prepare is never displaced by a cursor's.
  What a prepare finished stays useful (a prefill keeps its done passes).
- *cancelled*: the job's future fails with ``REQUEST_CANCELLED`` (reason in the
  message: "cancelled", "superseded", "preempted", "client disconnected", "shutdown").

Only one thread touches the model, so the engine needs no locking; the asyncio
loop only enqueues and awaits futures, so it stays responsive while a long
completion runs.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ngramd.daemon.protocol.rpc import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, REQUEST_CANCELLED, RpcError

log = logging.getLogger("ngramd.worker")
_ids = itertools.count(1)


PREPARE_EDIT = "prepareEdit"
PREPARE_COMPLETE = "prepareComplete"
PREFETCH = "prefetch"  # the next suggestion, decoded in idle time (daemon/engine/completer.py prefetch_after)
# How readily a kind of job gives way (see "preempted" above); a kind not listed, 0.
DEFERENCE = {PREPARE_EDIT: 1, PREPARE_COMPLETE: 2, PREFETCH: 3}
# Jobs queued by all clients together; past this only a client with none queued is admitted
MAX_QUEUED_TOTAL = 1024


@dataclass(eq=False)
class Job:
    kind: str  # "complete" | "edit" | PREPARE_EDIT | PREPARE_COMPLETE
    uri: str
    fn: Callable[[threading.Event], Any]  # runs on the worker thread
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    conn: int = 0
    request_id: Any = None
    cancel: threading.Event = field(default_factory=threading.Event)
    cancel_reason: str = ""
    job_id: int = field(default_factory=lambda: next(_ids))
    enqueued: float = field(default_factory=time.monotonic)

    def request_cancel(self, reason: str) -> None:
        if not self.cancel.is_set():
            self.cancel_reason = reason
            self.cancel.set()

    def resolve(self, result: Any = None, error: BaseException | None = None) -> None:
        """Complete the future from any thread."""
        def _set() -> None:
            if self.future.done():
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(result)
        try:
            self.loop.call_soon_threadsafe(_set)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    def describe(self) -> dict[str, Any]:
        return {"job": self.job_id, "kind": self.kind, "uri": self.uri,
                "requestId": self.request_id,
                "waited_s": round(time.monotonic() - self.enqueued, 3)}


# What torch's RuntimeErrors say when an allocation failed: the CPU allocator, and cuBLAS or
# cuDNN handles (made with cudaMalloc directly, not torch's allocator)
_OUT_OF_MEMORY_MESSAGES = ("out of memory", "can't allocate memory", "CUBLAS_STATUS_ALLOC_FAILED",
                           "CUDNN_STATUS_ALLOC_FAILED")


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says memory ran out: MemoryError, torch's OutOfMemoryError (CUDA), or the
    RuntimeError its CPU allocator raises (torch not imported here: the names and message tell)."""
    if isinstance(exc, MemoryError) or any(c.__name__ == "OutOfMemoryError" for c in type(exc).__mro__):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(m in text for m in _OUT_OF_MEMORY_MESSAGES)



class Worker:
    """Run jobs one at a time on a dedicated thread."""

    def __init__(self, max_queued: int = 256, on_out_of_memory: Callable[[], object] | None = None,
                 max_queued_total: int = MAX_QUEUED_TOTAL) -> None:
        """``max_queued``: jobs one client may have queued; ``max_queued_total``: all clients
        (see *turns*). ``on_out_of_memory``: called after a job ran out of memory (the engine's
        KV caches dropped: else every later request, holding them, ran out too)."""
        self.max_queued = max_queued
        self.max_queued_total = max(max_queued_total, max_queued)
        self._turns = itertools.count(1)
        self._served: dict[int, int] = {}  # conn -> the turn it was last served at (see *turns*)
        self._waits: dict[int, dict[str, float]] = {}  # conn -> its queue waits (``client_waits``)
        self.on_out_of_memory = on_out_of_memory
        self._queue: collections.deque[Job] = collections.deque()
        self._cond = threading.Condition()
        self._running: Job | None = None
        self._stopped = False
        self.counts = collections.Counter()  # done, cancelled, superseded, failed
        self._thread = threading.Thread(target=self._loop, name="ngramd-model", daemon=True)
        self._thread.start()

    # -- called from the event loop ---------------------------------------------------

    def submit(self, job: Job) -> None:
        """Queue ``job``; older jobs of its kind for the same uri are superseded."""
        with self._cond:
            if self._stopped:
                job.resolve(error=RpcError(REQUEST_CANCELLED, "the daemon is shutting down"))
                return
            deference = DEFERENCE.get(job.kind, 0)

            def superseded(j: Job) -> bool:
                return j.uri == job.uri and j.kind == job.kind and j.conn == job.conn

            def preempted(j: Job) -> bool:
                return DEFERENCE.get(j.kind, 0) > deference

            staying = [j for j in self._queue if not superseded(j) and not preempted(j)]
            own = sum(1 for j in staying if j.conn == job.conn)
            # a flood of distinct uris: refused, and it displaces nothing; a client with nothing
            # queued always gets its turn
            if own >= self.max_queued or (own and len(staying) >= self.max_queued_total):
                self.counts["refused"] += 1
                job.resolve(error=RpcError(INTERNAL_ERROR, f"busy: {own} requests queued"))
                return
            self._cancel_where(superseded, "superseded")
            self._cancel_where(preempted, "preempted")
            self._queue.append(job)
            self._cond.notify()

    def cancel(self, pred: Callable[[Job], bool], reason: str = "cancelled") -> int:
        with self._cond:
            return self._cancel_where(pred, reason)

    def snapshot(self) -> dict[str, Any]:
        with self._cond:
            running = self._running.describe() if self._running else None
            return {"running": running, "queued": [j.describe() for j in self._queue],
                    **self.counts}

    def client_waits(self, conn: int) -> dict[str, Any]:
        """How long ``conn``'s jobs waited in the queue before they ran (prefetches, which the
        daemon queues itself, not counted), and how many it has queued now."""
        with self._cond:
            w = self._waits.get(conn) or {"ran": 0, "total_s": 0.0, "max_s": 0.0, "last_s": 0.0}
            queued = sum(1 for j in self._queue if j.conn == conn)
        ran = int(w["ran"])
        return {"queued": queued, "ran": ran, "wait_mean_s": round(w["total_s"] / ran, 3) if ran else 0.0,
                "wait_max_s": round(w["max_s"], 3), "wait_last_s": round(w["last_s"], 3)}

    def forget_client(self, conn: int) -> None:
        """``conn`` closed: its turn and waits go (connection ids are never reused)."""
        with self._cond:
            self._served.pop(conn, None)
            self._waits.pop(conn, None)

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopped = True
            self._cancel_where(lambda j: True, "shutdown")
            self._cond.notify_all()
        self._thread.join(timeout)

    # -- internals ----------------------------------------------------------------------

    def _cancel_where(self, pred: Callable[[Job], bool], reason: str) -> int:
        """Cancel matching jobs; the caller holds the condition."""
        n = 0
        for job in [j for j in self._queue if pred(j)]:
            self._queue.remove(job)
            job.request_cancel(reason)
            job.resolve(error=RpcError(REQUEST_CANCELLED, f"request {reason}"))
            self.counts[reason] += 1
            n += 1
        running = self._running
        if running is not None and pred(running) and not running.cancel.is_set():
            running.request_cancel(reason)
            n += 1
        return n

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                job = self._running = self._next()
            try:
                result, error = self._run(job)
            except BaseException as exc:  # a bug in the handling itself: this job fails, the worker goes on
                log.exception("job %s: its outcome could not be told", job.job_id)
                result, error = None, RpcError(INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
            with self._cond:  # not running any more before anyone hears the outcome
                self._running = None
            job.resolve(result, error)

    def _next(self) -> Job:
        """Take the next job off the queue (see *turns*); the caller holds the condition, and
        the queue is not empty."""
        least = min(DEFERENCE.get(j.kind, 0) for j in self._queue)
        job = min((j for j in self._queue if DEFERENCE.get(j.kind, 0) == least),
                  key=lambda j: (self._served.get(j.conn, 0), j.job_id))
        self._queue.remove(job)
        self._served[job.conn] = next(self._turns)
        if job.kind != PREFETCH:
            waited = time.monotonic() - job.enqueued
            w = self._waits.setdefault(job.conn, {"ran": 0, "total_s": 0.0, "max_s": 0.0, "last_s": 0.0})
            w["ran"] += 1
            w["total_s"] += waited
            w["max_s"] = max(w["max_s"], waited)
            w["last_s"] = waited
        return job

    def _out_of_memory(self, job: Job, what: str) -> RpcError:
        """The error for a job that ran out of memory (``what``: its exception, in a line), once
        memory is given back; called after the except block, whose traceback held the pass's tensors."""
        self.counts["out_of_memory"] += 1
        log.error("job %s (%s) ran out of memory: %s", job.job_id, job.kind, what)
        freed = ""
        if self.on_out_of_memory is not None:
            try:
                self.on_out_of_memory()
                freed = "; the daemon dropped its KV caches"
            except Exception:
                log.exception("giving memory back failed")
        return RpcError(INTERNAL_ERROR, f"out of memory{freed} (a shorter text or maxTokens, or a smaller "
                                        "model, may fit)")

    def _run(self, job: Job) -> tuple[Any, RpcError | None]:
        """Run one job; the outcome as (result, error), counted."""
        out_of_memory = None
        try:
            result = job.fn(job.cancel)
        except RpcError as exc:
            self.counts["failed"] += 1
            return None, exc
        except NotImplementedError as exc:
            self.counts["failed"] += 1
            return None, RpcError(METHOD_NOT_FOUND, f"{job.kind} is not available: {exc}")
        except ValueError as exc:  # the engine's verdict on the request's values
            self.counts["failed"] += 1
            return None, RpcError(INVALID_PARAMS, str(exc))
        except Exception as exc:  # the engine failed; report it, keep serving
            self.counts["failed"] += 1
            if not is_out_of_memory(exc):
                log.exception("job %s failed", job.job_id)
                return None, RpcError(INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
            out_of_memory = (str(exc).splitlines() or [type(exc).__name__])[0][:300]  # MemoryError() says nothing
        if out_of_memory is not None:
            return None, self._out_of_memory(job, out_of_memory)
        if job.cancel.is_set() or getattr(result, "cancelled", False):
            reason = job.cancel_reason or "cancelled"
            self.counts[reason] += 1
            return None, RpcError(REQUEST_CANCELLED, f"request {reason}")
        self.counts["done"] += 1
        return result, None
