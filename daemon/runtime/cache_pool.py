"""Per-document KV caches, whichever runtime holds them: the pool the engine keeps them in."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Hashable, Sequence


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class KVPool:
    """Per-document caches, least recently used evicted beyond ``max_caches``. A key is a
    document's uri, or any hashable naming another cache of it (an edit's prompt). ``new_cache``
    and ``release`` are the runtime's (daemon/runtime/base.py): a llama.cpp cache holds a
    sequence of the model's context, which is handed back when the cache goes."""

    def __init__(self, max_caches: int, new_cache: Callable[[], Any],
                 release: Callable[[Any], None] | None = None) -> None:
        assert max_caches >= 1
        self.max_caches = max_caches
        self._new_cache = new_cache
        self._release = release or (lambda cache: None)
        self._caches: OrderedDict[Hashable, Any] = OrderedDict()

    def get(self, key: Hashable) -> Any:
        kv = self._caches.pop(key, None)
        if kv is None:
            while len(self._caches) >= self.max_caches:  # before the new one takes its place
                self._release(self._caches.popitem(last=False)[1])
            kv = self._new_cache()
        self._caches[key] = kv
        return kv

    def drop(self, key: Hashable) -> None:
        kv = self._caches.pop(key, None)
        if kv is not None:
            self._release(kv)

    def clear(self) -> None:
        while self._caches:
            self._release(self._caches.popitem(last=False)[1])

    def __len__(self) -> int:
        return len(self._caches)

    def cached_tokens(self) -> int:
        return sum(len(kv) for kv in self._caches.values())
