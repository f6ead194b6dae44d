"""A closed document's KV caches and answer go before any later work on the model, even when the
close arrives while the model is busy (daemon/engine/engine_lock.py): a prepare queued after a
close and reopen prefills afresh instead of reusing the closed document's cache."""

from __future__ import annotations

import threading

import pytest

from ngramd.daemon.engine.completer import Completer
from ngramd.daemon.engine.engine_lock import EngineLock
from ngramd.daemon.engine.loop import EngineConfig
from ngramd.daemon.protocol.requests import CompletionRequest

TEXT = "def area(radius):\n    return 3.14159 * radius ** 2\n\n\ndef circumference(radius):\n    return"
URI = "file:///shapes.py"


@pytest.fixture
def completer(tiny):
    return Completer(tiny, None, EngineConfig(calibrate=False))


def test_a_close_while_the_model_is_busy_is_noted_at_once_and_applied_before_the_next_work(completer):
    completer.complete(CompletionRequest(uri=URI, text=TEXT, offset=len(TEXT), max_tokens=4), threading.Event())
    assert completer.stats()["kv_caches"] == 1
    with completer._lock:  # the model thread runs a long job (a prefetch, a prepare)
        noted = threading.Thread(target=completer.forget, args=(URI,))
        noted.start()
        noted.join(5)
        assert not noted.is_alive(), "forget waited for the work running on the model"
    prepared = completer.prepare_complete(URI, TEXT[:-len("    return")], len(TEXT) - len("    return"))
    assert prepared.reused == 0 and prepared.prefilled == prepared.tokens - 1 > 10
    assert URI not in completer.answers._answers  # its remembered answer went with the close


def test_release_forgotten_frees_the_noted_caches_without_other_work(completer):
    completer.complete(CompletionRequest(uri=URI, text=TEXT, offset=len(TEXT), max_tokens=4), threading.Event())
    completer.forget(URI)
    assert completer.stats()["kv_caches"] == 1  # noted only: nothing has taken the lock yet
    completer.release_forgotten()
    assert completer.stats()["kv_caches"] == 0


def test_the_lock_forgets_each_noted_key_once_and_stays_usable_after_a_failure():
    forgotten: list[str] = []

    def forget_now(key: str) -> None:
        if key == "bad":
            raise RuntimeError("boom")
        forgotten.append(key)

    lock = EngineLock(forget_now)
    lock.forget("b")
    lock.forget("a")
    lock.forget("a")
    with lock:
        pass
    with lock:
        pass
    assert forgotten == ["a", "b"]
    lock.forget("bad")
    with pytest.raises(RuntimeError):
        with lock:
            pass
    with lock:  # released on the failure
        pass
