"""The n-gram index: proposes draft continuations from buffers, history and workspace files.

May import: numpy, pathspec, the standard library. Never torch, transformers, ``ngramd.daemon``
or ``ngramd.lsp``: it sees token ids only (docs/design/index.md).
"""

from .config import IndexConfig
from .draft import NO_DRAFT, Branch, Draft, Source
from .store import NgramIndex

__all__ = ["NO_DRAFT", "Branch", "Draft", "Source", "IndexConfig", "NgramIndex"]
