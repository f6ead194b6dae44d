"""Draft proposals: what the index hands to the verifier.

Vocabulary (Leviathan et al. 2022, "Fast Inference from Transformers via
Speculative Decoding"; Saxena 2023, prompt lookup decoding):

- *context*: the token ids the model has seen so far (prompt + generated).
- *match*: the longest suffix of the context that also occurs in an indexed
  document; ``match_len`` is its length in tokens.
- *branch*: the tokens that followed one such occurrence, up to ``k`` of them.
- *drafted*: tokens put to the model for verification; *accepted*: those the
  acceptance rule kept; *bonus*: the one token the model adds after the last
  accepted draft token.

Worked example. Indexed buffer ``[5, 6, 7, 8, 5, 6, 9]``, context ``[1, 5, 6]``.
The suffix ``[5, 6]`` occurs twice: once followed by ``[7, 8, 5, ...]``, once by
``[9]``. With k=3, w=2 the draft has two branches, ``[7, 8, 5]`` and ``[9]``,
each with match_len=2, count=1 and their source. A later occurrence ranks first
when everything else is equal.

"No draft" has exactly one representation: ``NO_DRAFT`` (zero branches).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np


class Source(enum.IntEnum):
    """Where a draft came from, in priority order (lower wins a tie)."""

    BUFFER = 0  # the document being completed, whole (text after the cursor too)
    OPEN_BUFFER = 1  # other documents open in an editor
    HISTORY = 2  # completions the user accepted earlier
    WORKSPACE = 3  # files on disk under the workspace folders
    EDIT_ORIGINAL = 4  # the original text of a range being rewritten (speculative edits)
    OUTPUT = 5  # what the model generated earlier in the same request (daemon/engine/context_lookup.py)


@dataclass(frozen=True)
class Branch:
    """One candidate continuation of the context."""

    tokens: np.ndarray  # [n] int32, 1 <= n <= k
    count: int  # occurrences in the index that support this branch's first token
    source: Source
    match_len: int  # length of the context suffix that matched

    def __post_init__(self) -> None:
        assert self.tokens.ndim == 1 and len(self.tokens) >= 1, "a branch has at least one token"


@dataclass(frozen=True)
class Draft:
    """Zero or more branches, best first. Branches diverge at their first token."""

    branches: tuple[Branch, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.branches)

    @property
    def best(self) -> Branch:
        return self.branches[0]


NO_DRAFT = Draft(())
