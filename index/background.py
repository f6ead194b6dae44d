"""A job run on a thread of its own whenever asked, requests coalesced.

The index brings evicted files back from disk (``scans.WorkspaceScans.restore_evicted``) when room frees up:
on the thread that closed a document (the daemon's thread mirroring documents into the index),
that read stalled the document syncs queued behind it. Asked here, the caller
returns at once; asks that come while the job runs make it run once more afterwards, not once per
ask.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

log = logging.getLogger("ngramd.index")


class BackgroundJob:
    def __init__(self, job: Callable[[], object], name: str, setup: Callable[[], object] | None = None) -> None:
        """``setup``: called first on the job's thread (to lower its priority, say)."""
        self._job = job
        self._name = name
        self._setup = setup
        self._cond = threading.Condition()
        self._wanted = False
        self._running = False
        self._thread: threading.Thread | None = None

    def request(self) -> None:
        """Run the job soon (once more if it runs now). Where no thread can be started (the
        process is out of them), it runs now, on the caller's thread; the next ask tries again."""
        with self._cond:
            self._wanted = True
            if self._thread is not None:
                self._cond.notify()
                return
            # started at the first ask: an index that never evicts has none; daemon: a read in
            # flight never holds up the process's exit (it only reads files)
            thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            try:
                thread.start()
                self._thread = thread
                return
            except RuntimeError as exc:
                log.warning("%s: no thread (%s); running it on the caller's", self._name, exc)
                self._wanted, self._running = False, True
        try:
            self._job()
        finally:
            with self._cond:
                self._running = False
                self._cond.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Whether every request so far has been served, waiting up to ``timeout`` seconds."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._wanted and not self._running, timeout)

    def _loop(self) -> None:
        if self._setup is not None:
            try:
                self._setup()
            except Exception:  # the job runs anyway
                log.exception("%s: its setup failed", self._name)
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._wanted)
                self._wanted, self._running = False, True
            try:
                self._job()
            except Exception:  # the index stays usable: the files wait for the next ask
                log.exception("%s failed", self._name)
            finally:
                with self._cond:
                    self._running = False
                    self._cond.notify_all()
