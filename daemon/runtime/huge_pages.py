"""The model's memory in 2 MB pages on Linux, where the kernel gives them only on request.

llama.cpp reads the model into memory it allocates with malloc (daemon/runtime/llamacpp.py: read,
not mapped), as torch does its tensors. In 4 KB pages a one-token pass walks some 25,000 pages of
weights and pays for the TLB misses: on the 2-core test machine a pass of the embedded model took
0.91-0.92x the time of llama.cpp's own ``Llama`` in 2 MB pages, 0.94-0.99x in 4 KB pages
(docs/benchmarks.md, "Huge pages"). Linux's
transparent huge pages are most often set to ``madvise``: a process gets them only for memory it
marks. glibc marks its large blocks when its tunable ``glibc.malloc.hugetlb=1`` is set, and reads
tunables at process start only. So a command that loads a model runs itself again, once, with it
set (``os.execv``: the same pid and open files, before any thread or model exists).

``NGRAMD_HUGE_PAGES=0`` turns it off. Elsewhere (no glibc 2.35+, huge pages ``never`` or already
``always``) nothing is done.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Mapping

TUNABLE = "glibc.malloc.hugetlb=1"
SWITCH = "NGRAMD_HUGE_PAGES"  # "0": stay in 4 KB pages
THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_mode(path: Path = THP_ENABLED) -> str:
    """The kernel's transparent huge page mode (``always``, ``madvise``, ``never``), or ""."""
    try:
        text = path.read_text()
    except OSError:
        return ""
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else ""


def _glibc_version() -> tuple[int, ...]:
    name, version = platform.libc_ver()
    if name != "glibc":
        return ()
    try:
        return tuple(int(x) for x in version.split("."))
    except ValueError:
        return ()


def should_reexec(env: Mapping[str, str], mode: str, glibc: tuple[int, ...]) -> bool:
    """Whether running again with ``TUNABLE`` would give this process huge pages it lacks."""
    return (env.get(SWITCH, "1") != "0" and mode == "madvise" and glibc >= (2, 35)
            and TUNABLE not in env.get("GLIBC_TUNABLES", "").split(":"))


def tunables_with_huge_pages(env: Mapping[str, str]) -> str:
    """``GLIBC_TUNABLES`` with ``TUNABLE`` added to whatever the user set."""
    existing = env.get("GLIBC_TUNABLES", "")
    return f"{existing}:{TUNABLE}" if existing else TUNABLE


def reexec_with_huge_pages() -> None:
    """Run this command again with glibc's huge page tunable, where that helps (the module
    docstring); returns only where it does not, or where the exec failed."""
    if not sys.platform.startswith("linux") or not should_reexec(os.environ, thp_mode(), _glibc_version()):
        return
    os.environ["GLIBC_TUNABLES"] = tunables_with_huge_pages(os.environ)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(sys.executable, sys.orig_argv)
    except OSError:  # keeps going in 4 KB pages
        os.environ[SWITCH] = "0"
