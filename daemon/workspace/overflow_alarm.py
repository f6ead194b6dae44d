"""The kernel dropped file events: told by watchdog's log alone.

When inotify's queue overflows (a big checkout, an unpacked archive: more events at once than
``fs.inotify.max_queued_events``, 16384 by default), the kernel drops events. watchdog rebuilds
its watches and logs a warning, but gives its handlers no event, so files created or removed
meanwhile would stay unknown to the index until something else rescanned their folder (30,000
files made in a loop left 5,980 indexed). ``OverflowAlarm`` listens for that warning and calls
back, so that the watcher rescans its folders.
"""

from __future__ import annotations

import logging
from typing import Callable

WATCHDOG_INOTIFY_LOGGER = "watchdog.observers.inotify_c"  # where watchdog's inotify reader logs


class OverflowAlarm(logging.Handler):
    """Calls ``on_overflow`` for each of watchdog's "queue overflowed" warnings while installed."""

    def __init__(self, on_overflow: Callable[[], None]) -> None:
        super().__init__(logging.WARNING)
        self._on_overflow = on_overflow
        self._logger = logging.getLogger(WATCHDOG_INOTIFY_LOGGER)

    def install(self) -> None:
        self._logger.addHandler(self)

    def uninstall(self) -> None:
        self._logger.removeHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        if "overflow" in record.getMessage().lower():
            try:
                self._on_overflow()
            except Exception:  # a handler must not raise into watchdog's reader thread
                self.handleError(record)
