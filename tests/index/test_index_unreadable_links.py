"""A link whose target no one may resolve is skipped and counted, never the whole folder.

``ln -s /proc/1/root ws/p1root``: as a normal user, reading the link's target fails with a
PermissionError (``os.path.realpath`` raises it); the scan of ``ws`` failed with it and indexed
none of its files. As root the link resolves, so the tests simulate the error, and one test
makes it for real where it can.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from ngramd.index import IndexConfig, NgramIndex
from index_helpers import char_tokenize


def _folder(tmp_path, link_target: str):
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.py").write_text("alpha = 1\n")
    (root / "b.py").write_text("beta = 2\n")
    os.symlink(link_target, root / "p1root")
    return root


def deny_resolving(monkeypatch, link) -> None:
    """``os.path.realpath(link)`` raises as it does for a user's link to /proc/1/root."""
    realpath = os.path.realpath

    def denied(path, *args, **kwargs):
        if os.fspath(path) == os.fspath(link):
            raise PermissionError(13, "Permission denied", "/proc/1/root")
        return realpath(path, *args, **kwargs)

    monkeypatch.setattr(os.path, "realpath", denied)


@pytest.mark.parametrize("listing", ["walk", "git"])
def test_a_link_that_cannot_be_resolved_is_skipped_and_counted(tmp_path, monkeypatch, listing):
    # dangling: like /proc/1/root for a user, it cannot be stat-ed either (the walk lists it as a file)
    root = _folder(tmp_path, "/nonexistent-s19/root")
    if listing == "git":
        if shutil.which("git") is None:
            pytest.skip("git not installed")
        subprocess.run(["git", "init", "-q", str(root)], check=True)
    deny_resolving(monkeypatch, root / "p1root")
    idx = NgramIndex(char_tokenize, IndexConfig(min_n=2))
    out = idx.index_workspace(root)
    assert out["indexed"] == 2 and out["unreadable"] == 1 and out["stopped"] is False
    assert idx.has_file(root / "a.py") and idx.has_file(root / "b.py")
    assert idx.stats()["skipped"] == {"unreadable": 1}


def _proc1_root_is_unreadable() -> bool:
    try:
        os.readlink("/proc/1/root")
        return False
    except PermissionError:
        return True
    except OSError:  # no /proc: nothing to try
        return False


@pytest.mark.skipif(not _proc1_root_is_unreadable(), reason="needs a user who may not read /proc/1/root (not root)")
def test_a_link_to_proc_1_root_is_skipped_and_counted(tmp_path):
    """The fuzzing review's case itself, where the user may not read the link's target."""
    root = _folder(tmp_path, "/proc/1/root")
    idx = NgramIndex(char_tokenize, IndexConfig(min_n=2))
    out = idx.index_workspace(root)
    assert out["indexed"] == 2 and out["unreadable"] == 1
