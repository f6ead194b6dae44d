"""The runtime seam: what the engine asks of a model, whichever engine runs it.

The speculative loop, the policy's calibration, the completer and the edits talk to a
``Runtime`` and its per-document ``KVCache`` only. The torch runtime (daemon/runtime/model.py)
and the llama.cpp runtime (daemon/runtime/llamacpp.py) implement it; nothing above the seam
knows which one runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Sequence, Union, runtime_checkable

if TYPE_CHECKING:
    import numpy as np
    import torch

    from ngramd.daemon.runtime.tree import DraftTree

# A pass's logits, [rows, vocab] fp32: a torch tensor on the torch runtime (on its device), a
# numpy array on llama.cpp. The engine reads them through what both have (indexing, ``argmax``).
Logits = Union["torch.Tensor", "np.ndarray"]


@runtime_checkable
class Device(Protocol):
    """Where a runtime computes: a ``torch.device``, or ``CPU``; ``str()`` names it."""

    type: str  # "cpu" | "cuda"


@dataclass(frozen=True)
class HostCpu:
    """The CPU as a runtime without torch names its device (``type`` and ``str()`` as torch's)."""

    type: str = "cpu"

    def __str__(self) -> str:
        return self.type


CPU = HostCpu()


@dataclass(frozen=True)
class Exactness:
    """The load-time self-check's verdict: whether a multi-token pass gives bitwise the logits of
    one-token passes on this runtime and machine. Where it does not, verifying a draft in one pass
    could choose another token than plain decoding: the daemon then drafts nothing, and says so."""

    exact: bool
    detail: str
    checked_rows: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"exact": self.exact, "detail": self.detail, "checked_rows": self.checked_rows}


NOT_CHECKED = Exactness(True, "not checked: this runtime's passes are exact by construction", 0)


@runtime_checkable
class KVCache(Protocol):
    """One document's keys and values inside a runtime."""

    tokens: list[int]  # the token ids whose entries it holds, in order

    def __len__(self) -> int: ...

    def reset(self) -> None:
        """Forget every entry."""

    def reuse_for(self, tokens: Sequence[int]) -> int:
        """Keep the longest common prefix with ``tokens``, drop the rest; returns its length."""

    def crop(self, n: int) -> None:
        """Keep the first ``n`` entries (roll back past rejected draft tokens)."""

    def select(self, keep: int, positions: Sequence[int]) -> None:
        """Keep the first ``keep`` entries, then those at ``positions`` (an accepted tree path,
        ascending), packed after them."""

    def extended(self, new_tokens: Sequence[int]) -> None:
        """Record that ``forward_pass`` appended ``new_tokens``."""


@runtime_checkable
class Runtime(Protocol):
    name: str
    kind: str  # "torch" | "llamacpp"
    device: Device
    dtype: Any  # torch.float32 on torch, "float32" on llama.cpp; str() names it
    tokenizer: Any  # a transformers fast tokenizer: prompts, chat templates, the index's ids
    supports_trees: bool  # False: the engine drafts chains only
    exactness: Exactness

    @property
    def vocab_size(self) -> int: ...

    @property
    def eos_token_id(self) -> int | None: ...

    def encode(self, text: str) -> list[int]: ...

    def tokenize_batch(self, texts: list[str]) -> list[list[int]]: ...

    def decode(self, ids: list[int]) -> str: ...

    def token_bytes(self, token_id: int) -> bytes: ...

    def is_special(self, token_id: int) -> bool: ...

    def new_cache(self) -> KVCache: ...

    def release_cache(self, cache: KVCache) -> None:
        """The cache is dropped for good (evicted, document closed): free what it holds."""

    def forward_pass(self, ids: Sequence[int], cache: KVCache, keep_last: int | None = None,
                     tree: DraftTree | None = None) -> Logits:
        """Run ``ids`` after ``cache``'s tokens; fp32 logits [keep_last or len(ids), vocab] of the
        last rows. ``tree``: the draft nodes at the end of ``ids`` form a tree (one pending token
        before them), attended as the tree says. The caller records the tokens (``extended``)."""

    def synchronize(self) -> None:
        """Wait for the pass just queued (a GPU), so that its time is known and a cancel between
        prefill pieces cancels something."""

    def memory_figures(self) -> dict[str, int]: ...
