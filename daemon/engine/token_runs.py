"""Runs of token ids: how far a run repeats another, where a pattern occurs.

The edit proposer follows its output through the original with these
(daemon/edit/proposer.py), and a learnt rename finds its word's occurrences with
them (daemon/edit/substitutions.py).
"""

from __future__ import annotations

import numpy as np


def follow(original: np.ndarray, pointer: int, new_tokens: np.ndarray) -> int:
    """How many of ``new_tokens`` repeat ``original`` from ``pointer`` on (a prefix length).

    original: [n] int32, new_tokens: [m] int32. Returns 0..m.
    Example: follow([5, 6, 7], 1, [6, 7, 9]) == 2.
    """
    assert original.ndim == 1 and new_tokens.ndim == 1
    m = min(len(new_tokens), max(len(original) - pointer, 0))
    if m == 0:
        return 0
    same = original[pointer:pointer + m] == new_tokens[:m]
    if same.all():
        return m
    return int(np.argmin(same))  # index of the first False


def occurrences(original: np.ndarray, pattern: np.ndarray) -> np.ndarray:
    """End positions (exclusive) of every occurrence of ``pattern`` in ``original``.

    original: [n] int32, pattern: [m] int32, m >= 1. Returns [c] int64, ascending.
    Example: occurrences([1, 2, 1, 2], [1, 2]) == [2, 4].
    """
    assert original.ndim == 1 and pattern.ndim == 1 and len(pattern) >= 1
    m = len(pattern)
    if m > len(original):
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(original[: len(original) - m + 1] == pattern[0])
    for j in range(1, m):
        if len(starts) == 0:
            break
        starts = starts[original[starts + j] == pattern[j]]
    return starts.astype(np.int64) + m
