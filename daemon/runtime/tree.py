"""Draft trees: several candidate continuations verified in one forward pass.

A *tree* is a trie of draft tokens below the *root*, the pending token (the
last token of the context, not yet in the KV cache). The pass input is
``[root] + nodes`` in this order; node i sits at input index i + 1 and at
position ``past + depth(i)`` (the root has depth 0). Each input attends to the
whole cache, to its ancestors and to itself — never to a sibling branch.

Worked example. Branches [7, 8] and [7, 9], [5]: nodes 0:7 (parent root),
1:8 (parent 0), 2:9 (parent 0), 3:5 (parent root); depths 1, 2, 2, 1. Input
row 2 (node 1, token 8) sees the cache, the root, node 0 and itself.

Nodes of the first branch come first, so when the best branch is accepted
the KV cache is rolled back by a plain crop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class DraftTree:
    tokens: np.ndarray  # [n] int64 draft token per node
    parents: np.ndarray  # [n] int64, -1 = the root
    depths: np.ndarray  # [n] int64, >= 1
    branch_of: np.ndarray  # [n] int64, index of the first branch through this node

    @property
    def size(self) -> int:
        return len(self.tokens)

    @property
    def is_chain(self) -> bool:
        return bool(np.all(self.parents == np.arange(-1, self.size - 1)))

    def children(self, node: int) -> list[int]:
        """Children of ``node`` (-1: the root), in branch priority order."""
        if not len(self.parents):  # no draft: every pass of plain decoding asks
            return []
        return [int(i) for i in np.flatnonzero(self.parents == node)]


EMPTY_TREE = DraftTree(*(np.zeros(0, dtype=np.int64) for _ in range(4)))


def build_tree(branches: Sequence[Sequence[int]]) -> DraftTree:
    """Merge token sequences into a trie (shared prefixes once), first branch first."""
    tokens: list[int] = []
    parents: list[int] = []
    depths: list[int] = []
    branch_of: list[int] = []
    child_map: dict[tuple[int, int], int] = {}
    for b, seq in enumerate(branches):
        parent = -1
        for d, tok in enumerate(seq):
            key = (parent, int(tok))
            node = child_map.get(key)
            if node is None:
                node = len(tokens)
                child_map[key] = node
                tokens.append(int(tok))
                parents.append(parent)
                depths.append(d + 1)
                branch_of.append(b)
            parent = node
    if not tokens:
        return EMPTY_TREE
    return DraftTree(np.array(tokens, dtype=np.int64), np.array(parents, dtype=np.int64),
                     np.array(depths, dtype=np.int64), np.array(branch_of, dtype=np.int64))


def tree_visibility(tree: DraftTree) -> np.ndarray:
    """Which inputs of the pass ``[root] + nodes`` each input attends to: [n+1, n+1] bool, row i
    seeing the root, its ancestors and itself (the runtime adds every cached position)."""
    n = tree.size + 1
    allowed = np.zeros((n, n), dtype=bool)
    allowed[:, 0] = True  # everyone sees the root
    for i in range(tree.size):
        row = i + 1
        allowed[row, row] = True
        p = int(tree.parents[i])
        while p >= 0:
            allowed[row, p + 1] = True
            p = int(tree.parents[p])
    return allowed
