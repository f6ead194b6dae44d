"""scripts/edit_bounds.py: the copy search and the bounds' order on hand-made answers."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

_SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(_SCRIPTS))
_SPEC = importlib.util.spec_from_file_location("edit_bounds", _SCRIPTS / "edit_bounds.py")
edit_bounds = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(edit_bounds)


def _cost(n: int) -> float:  # ms for a pass over n new tokens: a pass costs, a row costs less
    return 30.0 + 2.0 * n


def _brute_longest_copy(source: list[int], truth: list[int], k: int) -> int:
    best = 0
    for i in range(len(source)):
        n = 0
        while n < min(k, len(truth)) and i + n < len(source) and source[i + n] == truth[n]:
            n += 1
        best = max(best, n)
    return best


@given(st.lists(st.integers(0, 3), max_size=30), st.lists(st.integers(0, 3), max_size=10), st.integers(0, 12))
def test_longest_copy_is_the_longest_prefix_found(source, truth, k):
    assert edit_bounds.longest_copy(np.asarray(source, dtype=np.int64), truth, k) == \
        _brute_longest_copy(source, truth, k)


def test_copies_from_the_prompt_beat_copies_from_the_original_alone():
    original = [1, 2, 3, 4, 5, 6, 7, 8]
    prompt = [90, 91, 92, 93, 94, 95] + original  # the file around the selection, then the selection
    answer = [1, 2, 3, 90, 91, 92, 93, 94, 95, 6, 7, 8]  # a line from the file copied in
    ms = {bound: edit_bounds.replay_bound(bound, answer, prompt, original, _cost, 100, 64)
          for bound in ("original", "prompt", "answer")}
    assert ms["answer"] == (1, _cost(12))  # the whole answer in one pass
    assert ms["prompt"][0] == 3  # 1 2 3 (+90), 91 .. 95 (+6), 7 (+8)
    assert ms["original"][0] > ms["prompt"][0] and ms["original"][1] > ms["prompt"][1]


def test_original_bound_copies_from_the_answer_so_far():
    answer = [5, 6, 5, 6, 5, 6, 5, 6]  # a loop the original does not hold
    passes, _ = edit_bounds.replay_bound("original", answer, [9], [1, 2], _cost, 100, 64)
    # 5 and 6 (not written before), then 5 6 (+5) and 6 5 6 copied from the answer so far
    assert passes == 4
