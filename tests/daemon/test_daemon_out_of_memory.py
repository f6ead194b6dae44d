"""A request that runs out of memory: a clear error, the KV caches given back, the daemon serving on.

Before, the caches stayed: on a GPU every later request, holding them, ran out too."""

from __future__ import annotations

import asyncio

import pytest

from ngramd.daemon.runtime.kv_cache import KVCache

from ngramd.daemon.runtime.cache_pool import KVPool
from ngramd.daemon.protocol.rpc import INTERNAL_ERROR, RpcError
from ngramd.daemon.service.worker import Job, Worker, is_out_of_memory


class OutOfMemoryError(RuntimeError):
    """As torch.OutOfMemoryError is named (CUDA)."""


@pytest.mark.parametrize("exc,expected", [
    (OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:117] . DefaultCPUAllocator: can't allocate memory"), True),
    (MemoryError(), True),
    (RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"), True),
    (RuntimeError("shape mismatch"), False),
    (ValueError("out of memory"), False),
])
def test_what_counts_as_out_of_memory(exc, expected):
    assert is_out_of_memory(exc) is expected


def _outcome(worker: Worker, fn) -> RpcError | str:
    async def run():
        loop = asyncio.get_running_loop()
        job = Job(kind="complete", uri="file:///a.py", fn=fn, future=loop.create_future(), loop=loop)
        worker.submit(job)
        try:
            return await asyncio.wait_for(job.future, 10)
        except RpcError as exc:
            return exc
    return asyncio.run(run())


def test_a_job_out_of_memory_gives_the_caches_back_and_the_next_one_runs():
    pool = KVPool(4, KVCache)
    for uri in ("a", "b", "c"):
        pool.get(uri)
    worker = Worker(on_out_of_memory=pool.clear)
    try:
        def exhausted(cancel):
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

        err = _outcome(worker, exhausted)
        assert isinstance(err, RpcError) and err.code == INTERNAL_ERROR
        assert err.message.startswith("out of memory; the daemon dropped its KV caches")
        assert len(pool) == 0 and worker.counts["out_of_memory"] == 1
        assert _outcome(worker, lambda cancel: "ok") == "ok"
        other = _outcome(worker, lambda cancel: 1 / 0)  # another failure keeps the caches
        assert isinstance(other, RpcError) and "ZeroDivisionError" in other.message
        assert worker.counts["out_of_memory"] == 1
    finally:
        worker.stop()


def test_the_completer_gives_its_caches_back():
    from ngramd.daemon.edit.session import EditingCompleter
    from ngramd.daemon.engine.loop import EngineConfig
    from ngramd.daemon.runtime.loading import load_runtime

    completer = EditingCompleter(load_runtime("tiny", "cpu"), None, EngineConfig(calibrate=False))
    completer.pool.get("file:///a.py")
    assert isinstance(completer.pool.get("file:///b.py"), KVCache) and len(completer.pool) == 2
    completer.release_memory()
    assert len(completer.pool) == 0


def test_a_memory_error_without_a_message_is_answered_and_the_worker_goes_on():
    """Python's own allocation failures say nothing (``MemoryError()``): reading its first line
    raised in the handler, the model thread died, and no request was answered again."""
    worker = Worker()
    try:
        def exhausted(cancel):
            raise MemoryError()

        err = _outcome(worker, exhausted)
        assert isinstance(err, RpcError) and err.message.startswith("out of memory")
        assert _outcome(worker, lambda cancel: "ok") == "ok"
    finally:
        worker.stop()


def test_a_failure_in_telling_a_jobs_outcome_fails_that_job_alone(monkeypatch):
    worker = Worker()
    try:
        run = worker._run
        monkeypatch.setattr(worker, "_run", lambda job: 1 / 0)
        err = _outcome(worker, lambda cancel: "ok")
        assert isinstance(err, RpcError) and err.code == INTERNAL_ERROR and "ZeroDivisionError" in err.message
        monkeypatch.setattr(worker, "_run", run)
        assert _outcome(worker, lambda cancel: "ok") == "ok"
    finally:
        worker.stop()


def test_the_daemon_gives_its_completers_memory_back():
    """The service hands the worker its completer's ``release_memory``."""
    from ngramd.daemon.service.methods import Service

    class Completer:
        def release_memory(self):
            pass

    completer = Completer()
    service = Service(completer, None)
    try:
        assert service.worker.on_out_of_memory == completer.release_memory
    finally:
        service.close()
