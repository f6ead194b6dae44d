"""Background threads run at the lowest priority; the rest of the process does not."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from ngramd.daemon.workspace.priority import LOWEST, lower_this_thread


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


PROBE = """
import os, threading, time
from ngramd.daemon.runtime.loading import load_runtime
from ngramd.daemon.workspace.priority import lower_this_thread
rt = load_runtime("tiny", device="cpu")
lowered = []
t = threading.Thread(target=lambda: (lowered.append(threading.get_native_id()), lower_this_thread(),
                                     rt.tokenize_batch(["a b"] * 8)))
t.start(); t.join()
# join() returns before the OS thread is gone: wait until the lowered thread itself has left
deadline = time.monotonic() + 10
while os.path.exists(f"/proc/self/task/{lowered[0]}") and time.monotonic() < deadline:
    time.sleep(0.01)
print(sorted({os.getpriority(os.PRIO_PROCESS, int(tid)) for tid in os.listdir("/proc/self/task")}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_a_lowered_indexing_thread_does_not_lower_the_tokenizer_pool_for_everyone():
    import subprocess

    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[0]"  # every thread left is at normal priority
