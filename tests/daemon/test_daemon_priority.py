"""Background threads run at the lowest priority; the rest of the process does not."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from daemon.priority import LOWEST, lower_this_thread


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_only_the_calling_thread_and_its_children_are_lowered():
    main_before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen = {}

    def child() -> None:
        seen["child"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    def background() -> None:
        seen["lowered"] = lower_this_thread()
        seen["self"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        t = threading.Thread(target=child)
        t.start()
        t.join()

    t = threading.Thread(target=background)
    t.start()
    t.join()
    assert seen == {"lowered": True, "self": LOWEST, "child": LOWEST}
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == main_before
