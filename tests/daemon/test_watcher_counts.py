"""A folder's counts in ``ngramd status`` follow its file events (issue 33 item 7): after an
event storm they showed the first scan's, though the index was right."""

import pytest
from daemon_helpers import real_index, wait_until

from ngramd.daemon.workspace.watcher import WorkspaceWatcher

pytestmark = pytest.mark.filterwarnings(
    "ignore:Callback with id .* already exists:RuntimeWarning:watchdog.observers.inotify")


def test_a_folders_counts_follow_an_event_storm(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    for i in range(3):
        (root / f"a{i}.py").write_text(f"a{i} = {i}\n")
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.1)
    try:
        w.add_folder(root)
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
        assert w.status()["folders"][0]["counts"]["indexed"] == 3
        for i in range(40):  # the storm: files made, rewritten, removed
            (root / f"b{i}.py").write_text(f"b{i} = {'x' * i}\n")
        for i in range(0, 40, 2):
            (root / f"b{i}.py").write_text("short\n")
        for i in range(0, 40, 4):
            (root / f"b{i}.py").unlink()
        (root / "a0.py").unlink()
        fresh = real_index().index_workspace(root)  # what a new daemon's scan finds
        assert fresh["indexed"] == 2 + 30
        wait_until(lambda: {k: w.status()["folders"][0]["counts"][k] for k in ("indexed", "tokens")}
                   == {"indexed": fresh["indexed"], "tokens": fresh["tokens"]})
    finally:
        w.stop()
