"""A workspace folder removed and added again at once: its watch and its files are the new add's.

Each race is made to happen every time: the thread that loses it is held at a seam (watchdog's
``schedule``, the index's ``forget_root``, the forget thread's start) until the other side has had
its chance, then let go. Without the fix the other side runs meanwhile; with it, it waits, and the
test goes on after a second.
"""

import threading
from pathlib import Path

import pytest
from daemon_helpers import FakeIndex, real_index, wait_until

import ngramd.daemon.workspace.watcher as watcher_module
from ngramd.daemon.workspace.watcher import WorkspaceWatcher

# watchdog's harmless "Callback ... already exists" (see daemon/workspace/watcher.py, whose filter pytest resets
# around each test); under -W error it would kill watchdog's inotify reader and leave the test deaf
pytestmark = pytest.mark.filterwarnings(
    "ignore:Callback with id .* already exists:RuntimeWarning:watchdog.observers.inotify")

GRACE_S = 1.0  # how long the other side is given to run while one is held (only with the race)


def _folder(tmp_path: Path, n: int = 3) -> Path:
    for i in range(n):
        (tmp_path / f"f{i}.py").write_text(f"def f{i}():\n    return {i}\n")
    return tmp_path.resolve()


def _ready(w: WorkspaceWatcher) -> bool:
    folders = w.status()["folders"]
    return len(folders) == 1 and folders[0]["state"] == "ready"


def _no_forget_running() -> bool:
    return not any(t.name == "ngramd-forget" for t in threading.enumerate())


def test_a_folder_added_again_while_its_first_watch_is_set_up_still_gets_events(tmp_path):
    """watchdog gives both adds' watches one emitter; the first add's thread, held right after its
    schedule until the folder is removed and added again, used to unschedule its watch, and the
    emitter with it: the folder said ready but no edit reached the index."""
    root = _folder(tmp_path)
    index = FakeIndex()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.1)
    schedule = w._observer.schedule
    first_scheduled, release, second_scheduled = threading.Event(), threading.Event(), threading.Event()
    calls = []

    def schedule_holding_the_first(handler, path, **kwargs):
        if path != str(root) or not kwargs.get("recursive"):  # the user's excludes file's watch
            return schedule(handler, path, **kwargs)
        calls.append(path)
        watch = schedule(handler, path, **kwargs)
        if len(calls) == 1:
            first_scheduled.set()
            release.wait(60)
        else:
            second_scheduled.set()
        return watch
    w._observer.schedule = schedule_holding_the_first
    try:
        w.add_folder(root)
        assert first_scheduled.wait(20)
        assert w.remove_folder(root)
        assert w.add_folder(root)
        second_scheduled.wait(GRACE_S)  # the race: the new watch joins the held one's emitter
        release.set()
        wait_until(lambda: _ready(w))
        assert len(calls) == 2
        (root / "late.py").write_text("late = 1\n")
        wait_until(lambda: str(root / "late.py") in index.files, timeout=10)
        emitters = [e for e in w._observer.emitters if e.watch.path == str(root)]
        assert len(emitters) == 1 and emitters[0].is_alive()
        assert w._watches[root] == emitters[0].watch
    finally:
        release.set()
        w.stop()


def test_a_folder_removed_while_its_first_watch_is_set_up_is_not_watched(tmp_path):
    """The held thread finds its folder removed (not added again): it unschedules its own watch."""
    root = _folder(tmp_path)
    w = WorkspaceWatcher(FakeIndex(), lambda p: False, debounce_s=0.1)
    schedule = w._observer.schedule
    scheduled, release = threading.Event(), threading.Event()

    def schedule_held(handler, path, **kwargs):
        watch = schedule(handler, path, **kwargs)
        if path == str(root):
            scheduled.set()
            release.wait(60)
        return watch
    w._observer.schedule = schedule_held
    try:
        w.add_folder(root)
        assert scheduled.wait(20)
        assert w.remove_folder(root)
        release.set()
        wait_until(lambda: not any(e.watch.path == str(root) for e in w._observer.emitters))
        assert root not in w._watches
    finally:
        release.set()
        w.stop()


def _hold_forget_root(index, held: threading.Event, release: threading.Event, calls: int = 1) -> None:
    """The index's first ``calls`` forget_root calls wait for ``release`` (``held`` set as one does)."""
    forget_root = index.forget_root
    n = []

    def slow(*args, **kwargs):
        n.append(1)
        if len(n) <= calls:
            held.set()
            release.wait(60)
        return forget_root(*args, **kwargs)
    index.forget_root = slow


def _hold_forget_thread(monkeypatch, held: threading.Event, release: threading.Event) -> None:
    """The forget thread waits for ``release`` before it does anything (a busy machine: it runs at nice 19)."""
    lower = watcher_module.lower_this_thread

    def slow_start():
        if threading.current_thread().name == "ngramd-forget":
            held.set()
            release.wait(60)
        return lower()
    monkeypatch.setattr(watcher_module, "lower_this_thread", slow_start)


def _hold_scan_start(index, began: threading.Event) -> None:
    index_workspace = index.index_workspace

    def scan(*args, **kwargs):
        began.set()
        return index_workspace(*args, **kwargs)
    index.index_workspace = scan


@pytest.mark.parametrize("where", ["forget_root", "thread_start", "two_removes"])
def test_the_forget_of_a_folder_removed_and_added_again_leaves_the_new_scan_its_files(tmp_path, monkeypatch, where):
    """The forget of the remove used to run whenever its thread came: after the new add's scan had
    registered the folder, it dropped the folder and its files from the index, and the folder said
    ready with nothing indexed (or a scan still running installed nothing more).

    forget_root: the forget is held inside the index's forget_root (past any check of the watcher);
    thread_start: the forget thread is held before it begins; two_removes: the first of two removes
    is held in forget_root, the second one's forget is not."""
    root = _folder(tmp_path)
    keys = {str(root / f"f{i}.py") for i in range(3)}
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.1)
    held, release, second_scan = threading.Event(), threading.Event(), threading.Event()
    if where == "thread_start":
        _hold_forget_thread(monkeypatch, held, release)
    else:
        _hold_forget_root(index, held, release)
    try:
        w.add_folder(root)
        wait_until(lambda: _ready(w))
        assert all(index.has_file(k) for k in keys)
        assert w.remove_folder(root)
        assert held.wait(20)
        if where == "two_removes":
            assert w.add_folder(root)
            assert w.remove_folder(root)
        _hold_scan_start(index, second_scan)
        assert w.add_folder(root)
        second_scan.wait(GRACE_S)  # the race: the new scan runs, even to its end, before the forget
        release.set()
        wait_until(lambda: _ready(w) and _no_forget_running())
        assert {k for k in keys if index.has_file(k)} == keys
        assert index.stats()["workspace_files"] == len(keys)
        (root / "late.py").write_text("late = 1\n")  # and the folder is followed
        wait_until(lambda: index.has_file(str(root / "late.py")), timeout=10)
    finally:
        release.set()
        w.stop()
