"""A path no one may read (``ln -s /proc/1/root ws/p1root``) is skipped and counted, never the folder.

Reading the link's target fails with a PermissionError (where even root may not: a container without
ptrace rights); ``os.path.realpath`` and Python 3.11's ``Path.is_file`` raise it. The folder's scan
failed with it ("error", none of its files indexed); an event for such a path ended in a traceback.
The simulated variants run everywhere; the real link where reading /proc/1/root is denied.
"""

import os
import pathlib

import pytest
from daemon_helpers import real_index, wait_until

from ngramd.daemon.workspace.watcher import WorkspaceWatcher

pytestmark = pytest.mark.filterwarnings(
    "ignore:Callback with id .* already exists:RuntimeWarning:watchdog.observers.inotify")


def _proc1_root_is_unreadable() -> bool:
    try:
        os.readlink("/proc/1/root")
        return False
    except PermissionError:
        return True
    except OSError:  # no /proc
        return False


needs_unreadable_proc = pytest.mark.skipif(not _proc1_root_is_unreadable(),
                                           reason="needs a user who may not read /proc/1/root")


def _folder(tmp_path) -> pathlib.Path:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    (root / "a.py").write_text("alpha = 1\n")
    (root / "secret.py").write_text("secret = 2\n")
    return root


def _deny(monkeypatch, *paths) -> None:
    """What a user meets at ``paths`` (a link to /proc/1/root): resolving, stat-ing, ``is_file``
    all raise a PermissionError."""
    denied = {os.fspath(p) for p in paths}

    def refuse(real):
        def call(path, *args, **kwargs):
            if os.fspath(path) in denied:
                raise PermissionError(13, "Permission denied", os.fspath(path))
            return real(path, *args, **kwargs)
        return call

    monkeypatch.setattr(os.path, "realpath", refuse(os.path.realpath))
    monkeypatch.setattr(os, "stat", refuse(os.stat))
    monkeypatch.setattr(pathlib.Path, "is_file", refuse(pathlib.Path.is_file))


def _ready(w: WorkspaceWatcher) -> dict:
    folder = w.status()["folders"][0]
    return folder if folder["state"] in ("ready", "error") else None


@pytest.mark.parametrize("real", [False, pytest.param(True, marks=needs_unreadable_proc)])
def test_a_folder_holding_an_unreadable_link_is_indexed_without_it(tmp_path, monkeypatch, real):
    root = _folder(tmp_path)
    link = root / "p1root"
    os.symlink("/proc/1/root" if real else "/nonexistent-s19/root", link)
    if not real:
        _deny(monkeypatch, link)
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.1)
    try:
        w.add_folder(root)
        folder = wait_until(lambda: _ready(w))
        assert folder["state"] == "ready", folder.get("error")
        assert folder["counts"]["indexed"] == 2 and folder["counts"]["unreadable"] == 1
        assert sorted(index._files) == [str(root / "a.py"), str(root / "secret.py")]
    finally:
        w.stop()


@pytest.mark.parametrize("real", [False, pytest.param(True, marks=needs_unreadable_proc)])
def test_an_event_for_an_unreadable_path_skips_and_counts_it(tmp_path, monkeypatch, real):
    """A link made in a watched folder, and a file indexed before that may no longer be read: each
    is counted as the scan counts it ("unreadable"), and the file leaves the index, as at a rescan."""
    root = _folder(tmp_path)
    link, secret = root / "p1root", root / "secret.py"
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.1)
    try:
        w.add_folder(root)
        assert wait_until(lambda: _ready(w))["state"] == "ready"
        assert index.has_file(secret)
        _deny(monkeypatch, *([secret] if real else [secret, link]))
        os.symlink("/proc/1/root" if real else "/nonexistent-s19/root", link)
        secret.write_text("secret = 3\n")
        (root / "zz.py").write_text("zz = 1\n")  # last in path order: once it is in, so are the others
        wait_until(lambda: index.has_file(root / "zz.py") and w.status()["pending"] == 0)
        assert index.stats()["skipped"] == {"unreadable": 2}
        assert not index.has_file(secret) and not index.has_file(link)
    finally:
        w.stop()
