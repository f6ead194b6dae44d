"""When a model-loading command runs itself again with glibc's huge page tunable
(daemon/runtime/huge_pages.py): only where it gains pages it lacks, never twice, and keeping the
user's own tunables."""

from __future__ import annotations

from ngramd.daemon.runtime.huge_pages import SWITCH, TUNABLE, should_reexec, thp_mode, tunables_with_huge_pages


def test_reexec_only_where_the_kernel_gives_huge_pages_on_request():
    assert should_reexec({}, "madvise", (2, 36))
    assert not should_reexec({}, "always", (2, 36))  # every process has them already
    assert not should_reexec({}, "never", (2, 36))
    assert not should_reexec({}, "", (2, 36))  # no transparent huge pages here
    assert not should_reexec({}, "madvise", (2, 34))  # glibc before the tunable
    assert not should_reexec({}, "madvise", ())  # not glibc


def test_never_twice_and_never_when_switched_off():
    assert not should_reexec({"GLIBC_TUNABLES": TUNABLE}, "madvise", (2, 36))
    assert not should_reexec({"GLIBC_TUNABLES": f"glibc.malloc.arena_max=2:{TUNABLE}"}, "madvise", (2, 36))
    assert not should_reexec({SWITCH: "0"}, "madvise", (2, 36))
    assert should_reexec({SWITCH: "1"}, "madvise", (2, 36))


def test_the_users_tunables_are_kept():
    assert tunables_with_huge_pages({}) == TUNABLE
    assert tunables_with_huge_pages({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}) == \
        f"glibc.malloc.arena_max=2:{TUNABLE}"


def test_the_kernels_mode_is_the_bracketed_word(tmp_path):
    f = tmp_path / "enabled"
    f.write_text("always [madvise] never\n")
    assert thp_mode(f) == "madvise"
    f.write_text("[always] madvise never\n")
    assert thp_mode(f) == "always"
    assert thp_mode(tmp_path / "missing") == ""
