"""BackgroundJob: the job runs on its thread when asked, asks coalesce, and a thread that cannot
be started does not stop it for good."""

from __future__ import annotations

import threading

from ngramd.index.background import BackgroundJob


def test_asks_while_it_runs_make_it_run_once_more():
    release, started = threading.Event(), threading.Event()
    runs = []

    def job():
        runs.append(1)
        started.set()
        assert release.wait(10)

    bg = BackgroundJob(job, "t")
    bg.request()
    assert started.wait(10)
    for _ in range(5):
        bg.request()
    assert not bg.wait_idle(0.05)
    release.set()
    assert bg.wait_idle(10) and len(runs) == 2


def test_a_thread_that_cannot_start_runs_the_job_on_the_caller_and_the_next_ask_tries_again(monkeypatch):
    runs = []
    bg = BackgroundJob(lambda: runs.append(threading.current_thread().name), "bg")
    start = threading.Thread.start

    def refuse(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    bg.request()
    assert runs == [threading.current_thread().name] and bg.wait_idle(0)
    monkeypatch.setattr(threading.Thread, "start", start)
    bg.request()
    assert bg.wait_idle(10) and runs[-1] == "bg"


def test_the_setup_runs_first_on_the_jobs_thread():
    where = []
    bg = BackgroundJob(lambda: where.append(("job", threading.current_thread().name)), "bg",
                       setup=lambda: where.append(("setup", threading.current_thread().name)))
    bg.request()
    assert bg.wait_idle(10)
    assert where == [("setup", "bg"), ("job", "bg")]


def test_a_restore_thread_given_the_daemons_setup_runs_at_the_lowest_priority(tmp_path):
    """As serve builds its index (``background_setup=priority.lower_this_thread``): the restore
    thread reads and tokenizes at the lowest priority, as the scans do."""
    import os
    import sys

    import pytest

    from ngramd.daemon.workspace.priority import LOWEST, lower_this_thread
    from ngramd.index import IndexConfig, NgramIndex
    from index_helpers import char_tokenize

    if not sys.platform.startswith("linux"):
        pytest.skip("thread priorities are Linux's")
    seen = []
    idx = NgramIndex(char_tokenize, IndexConfig(max_indexed_tokens=100, restore_in_background=True),
                     background_setup=lambda: lower_this_thread() and seen.append(
                         os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
    p = tmp_path / "f.txt"
    p.write_text("y" * 20)
    idx.index_file(p)
    idx.open_buffer("u", "b" * 100)
    idx.close_buffer("u")
    assert idx.wait_restored(10) and idx.has_file(p)
    assert seen == [LOWEST]
