"""The exactness self-check at load: does a pass over several tokens give each row bitwise the
logits of one-token passes on this runtime, build and CPU?

Speculative decoding verifies a k-token draft in one pass and keeps the rows' argmaxes;
plain decoding runs one token a pass. The outputs are token-identical only if those rows
agree, and "close" is not enough: a different rounding can flip an argmax whose top two
logits are near. So the check compares fp32 logits with ``np.array_equal``. A build whose
kernels accumulate a multi-row product in another order than the one-row path (llama.cpp
with llamafile's GEMM, another CPU's kernels) fails it, and the daemon then drafts
nothing, or says its output is not exact; it is never silently different.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ngramd.daemon.runtime.base import Exactness

# Real code as the check's prompt: a few dozen tokens of context, then the rows compared.
CHECK_TEXT = '''def merge_sorted(left, right):
    """Merge two sorted lists into one sorted list."""
    out = []
    i = j = 0
    while i < len(left) and j < len(right):
        if left[i] <= right[j]:
            out.append(left[i])
            i += 1
        else:
            out.append(right[j])
            j += 1
    out.extend(left[i:])
    out.extend(right[j:])
    return out
'''

CHECK_PASSES = (8, 16)  # tokens in the multi-token passes compared against one-token passes


def check_exactness(runtime: Any, text: str = CHECK_TEXT, passes: Sequence[int] = CHECK_PASSES) -> Exactness:
    """Run ``text``'s last ``max(passes)`` tokens one at a time after its head, then again as
    passes of each size in ``passes`` from the same cache; compare every row bitwise."""
    ids = runtime.encode(text)
    width = max(passes)
    if len(ids) < width + 2:
        raise ValueError(f"the check's text has {len(ids)} tokens, fewer than {width + 2}")
    head, tail = ids[:-width], ids[-width:]
    cache = runtime.new_cache()
    try:
        runtime.forward_pass(head, cache, keep_last=1)
        cache.extended(head)
        singles = []
        for token in tail:
            singles.append(np.asarray(runtime.forward_pass([token], cache)[0], dtype=np.float32).copy())
            cache.extended([token])
        singles_arr = np.stack(singles)
        differing: list[str] = []
        checked = 0
        flipped = 0
        worst = 0.0
        for k in passes:
            cache.crop(len(head))
            multi = np.asarray(runtime.forward_pass(tail[:k], cache), dtype=np.float32)
            cache.extended(tail[:k])
            for row in range(k):
                checked += 1
                if not np.array_equal(multi[row], singles_arr[row]):
                    differing.append(f"{k}-token pass row {row}")
                    worst = max(worst, float(np.max(np.abs(multi[row] - singles_arr[row]))))
                    flipped += int(np.argmax(multi[row]) != np.argmax(singles_arr[row]))
    finally:
        runtime.release_cache(cache)
    sizes = " and ".join(str(k) for k in passes)
    if not differing:
        return Exactness(True, f"{checked} rows of {sizes}-token passes bitwise equal to one-token passes", checked)
    return Exactness(False, f"{len(differing)} of {checked} rows of {sizes}-token passes differ from one-token "
                            f"passes (first: {differing[0]}; largest difference {worst:.3g}; "
                            f"argmax changed in {flipped}): speculative output could differ from plain decoding",
                     checked)
