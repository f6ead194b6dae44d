"""Drafts for a fill-in-the-middle prompt: the proposer sees the text before the cursor.

A FIM prompt is ``<fim_prefix> PREFIX <fim_suffix> SUFFIX <fim_middle>`` (daemon/engine/prompt.py)
and the model writes the middle after it. Drafts are looked up by the last tokens of the
context, which there are the suffix's end and ``<fim_middle>``: nothing the index or the
output could continue. What the model continues is the prefix, so ``PrefixView`` hands its
inner proposer the context as it would be without the suffix: the prefix, then what was
generated.

Worked example (token ids; 90/91/92 the FIM tokens): prompt ``[90, 1, 2, 3, 91, 7, 8, 92]``,
generated ``[4]``: the inner proposer sees ``[1, 2, 3, 4]``.
"""

from __future__ import annotations

import numpy as np

from ngramd.daemon.engine.proposer import Proposer
from ngramd.index.draft import Draft


class PrefixView:
    """Wraps ``inner`` so that it sees ``context[prefix_start:prefix_end] + context[prompt_len:]``."""

    def __init__(self, inner: Proposer, prefix_start: int, prefix_end: int, prompt_len: int) -> None:
        assert 0 <= prefix_start <= prefix_end <= prompt_len
        self.inner = inner
        self.prefix_start = prefix_start
        self.prefix_end = prefix_end
        self.prompt_len = prompt_len

    def propose(self, context: np.ndarray, k: int, w: int) -> Draft:
        """``context``: [t] the prompt's ids then the generated ones."""
        view = np.concatenate([context[self.prefix_start:self.prefix_end], context[self.prompt_len:]])
        return self.inner.propose(view, k, w)

    def feedback(self, num_accepted: int) -> None:
        self.inner.feedback(num_accepted)
