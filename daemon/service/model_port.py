"""What the service asks of the model: the one seam between the RPC methods and the engine.

The command line hands the service an ``EditingCompleter`` (daemon/edit/session.py); the
service's tests hand it fakes. The service imports no module of the model's (pyproject.toml's
import contracts), so the model's types are named here as the service sees them.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol, runtime_checkable

from ngramd.daemon.protocol.requests import CompletionRequest, CompletionResult, EditRequest, Prepared


@runtime_checkable
class ModelPort(Protocol):
    def complete(self, req: CompletionRequest, cancel: threading.Event | None = None) -> CompletionResult: ...

    def edit(self, req: EditRequest, cancel: threading.Event | None = None) -> CompletionResult: ...

    def prepare_complete(self, uri: str, text: str, offset: int,
                         cancel: threading.Event | None = None) -> Prepared: ...

    def prepare_edit(self, uri: str, text: str, start: int, end: int, cancel: threading.Event | None = None,
                     instruction: str | None = None) -> Prepared: ...

    def forget(self, uri: str) -> None:
        """Document closed: ``uri``'s KV caches go before any later work, noted without waiting."""

    def release_forgotten(self) -> None:
        """Free what ``forget`` noted, now: waits for the work running."""

    def drop_cache(self, uri: str) -> None:
        """Forget ``uri``'s KV caches now: waits for the work running."""

    def release_memory(self) -> None:
        """Memory ran out: forget every KV cache."""

    def stats(self) -> dict[str, Any]:
        """Totals over all requests, for ``ngramd status``."""

    def edit_length_bound(self) -> Any:
        """An object whose ``check(text, start, end, instruction)`` raises ValueError for an edit
        that cannot fit the model; False when the model does not tell its positions; None while
        there is no model yet (asked again at the next edit)."""

    def memory_figures(self) -> dict[str, Any]:
        """The runtime's memory figures for ``ngramd status``."""
