"""Background work yields the CPU to the model.

The daemon indexes workspaces on threads of its own while the model decodes on
the same few cores. At equal priority the indexer (file reads, the tokenizer,
numpy sorts) and torch's threads share the cores: completions on a 2-core CPU
ran 4.2x slower during a workspace scan, and as fast as idle with the indexer
at the lowest priority (docs/benchmarks.md at 53c478e, "Decoding while a workspace is
indexed"). A background thread therefore runs at the lowest
scheduling priority: it still gets every idle cycle, and almost none while the
model runs.

Linux gives each thread its own nice value (``setpriority`` on the thread id);
threads it starts inherit it. Elsewhere this is a no-op. So do thread pools it
starts, for everyone who uses them later: the tokenizer's starts at its first
batch, which both runtimes therefore ask for at load (``TokenizerMethods.start_tokenizer_pool``).
"""

from __future__ import annotations

import logging
import os
import sys
import threading

log = logging.getLogger("ngramd.priority")
LOWEST = 19


def lower_this_thread() -> bool:
    """Make the calling thread (and threads it starts) the lowest priority; True if it took effect."""
    if not sys.platform.startswith("linux") or not hasattr(os, "setpriority"):
        return False
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOWEST)
        return True
    except OSError as exc:  # e.g. a sandbox that forbids it: indexing still works
        log.debug("could not lower the priority of %s: %s", threading.current_thread().name, exc)
        return False
