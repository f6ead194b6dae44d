"""The n-gram index: proposes draft continuations from buffers, history and workspace files."""

from .config import IndexConfig
from .draft import NO_DRAFT, Branch, Draft, Source
from .store import NgramIndex

__all__ = ["NO_DRAFT", "Branch", "Draft", "Source", "IndexConfig", "NgramIndex"]
