"""BackgroundJob: the job runs on its thread when asked, asks coalesce, and a thread that cannot
be started does not stop it for good."""

from __future__ import annotations

import threading

from index.background import BackgroundJob


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
