"""ms a token of one-token decoding after a prompt, timed the same way on ngramd's llama.cpp
runtime and on llama.cpp's own ``Llama`` (scripts/measure_decode_shapes.py and
scripts/measure_huge_pages.py). The prompt's last token is fed again and again: the pass's
cost, not its output, is measured."""

from __future__ import annotations

import time
from typing import Any, Sequence


def runtime_ms_per_token(runtime: Any, ids: Sequence[int], tokens: int) -> float:
    """``ids[:-1]`` prefilled on a fresh cache of ``runtime``, then ``tokens`` one-token passes."""
    kv = runtime.new_cache()
    try:
        runtime.forward_pass(ids[:-1], kv, keep_last=1)
        kv.extended(ids[:-1])
        t0 = time.perf_counter()
        for _ in range(tokens):
            runtime.forward_pass(ids[-1:], kv, keep_last=1)
            kv.extended(ids[-1:])
        return (time.perf_counter() - t0) * 1000 / tokens
    finally:
        runtime.release_cache(kv)


def llama_ms_per_token(llm: Any, ids: Sequence[int], tokens: int) -> float:
    """The same on a ``llama_cpp.Llama``: its cache reset, ``ids[:-1]`` evaluated, then one token at a time."""
    llm.reset()
    llm.eval(ids[:-1])
    t0 = time.perf_counter()
    for _ in range(tokens):
        llm.eval(ids[-1:])
    return (time.perf_counter() - t0) * 1000 / tokens
