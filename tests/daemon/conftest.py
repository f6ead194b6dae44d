"""Fixtures for the daemon service tests (tests/daemon); helpers in daemon_helpers.py.

- ``inproc``: the real Server + Service in-process with a fake engine and index
  (protocol tests, fast);
- the real ``serve --model tiny`` process is a module fixture in test_daemon_process.py
  (started once: startup costs seconds on 2 cores).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from daemon_helpers import InProcessDaemon  # noqa: E402


@pytest.fixture
def inproc():
    with tempfile.TemporaryDirectory(prefix="ngd-") as d:
        daemon = InProcessDaemon(Path(d) / "s.sock")
        yield daemon
        daemon.stop()


