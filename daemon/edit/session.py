"""The engine's Completer with speculative edits on top: the one object that the service, the
command line and the bench drive (daemon/service/model_port.py names what the service needs).

Completion (daemon/engine) knows nothing of edits; edits (daemon/edit/editor.py) run on the
same Completer: its runtime, KV caches and draft policy are shared by both.
"""

from __future__ import annotations

import threading
from typing import Any

from ngramd.daemon.edit.editor import LengthBound, prepare_edit, run_edit
from ngramd.daemon.engine.completer import Completer
from ngramd.daemon.protocol.requests import CompletionResult, EditRequest, Prepared


class EditingCompleter(Completer):
    def edit(self, req: EditRequest, cancel: threading.Event | None = None) -> CompletionResult:
        """Rewrite ``req.text[req.start:req.end]``; see daemon/edit/editor.py. Raises ValueError for bad input."""
        return run_edit(self, req, cancel)

    def prepare_edit(self, uri: str, text: str, start: int, end: int,
                     cancel: threading.Event | None = None, instruction: str | None = None) -> Prepared:
        """Prefill an edit's prompt up to its instruction, or through ``instruction`` (typed so
        far); see daemon/edit/editor.py ``prepare_edit``."""
        return prepare_edit(self, uri, text, start, end, cancel, instruction)

    def edit_length_bound(self) -> LengthBound | bool:
        """Whether an edit can fit the model, judged from characters (False: the model does not
        tell its positions). Reads every token's bytes: ~0.15 s for a 49k vocabulary."""
        return LengthBound.of(self.runtime) or False

    def memory_figures(self) -> dict[str, Any]:
        """The runtime's own memory figures for ``ngramd status`` (packed weight copies, a GPU's)."""
        figures = getattr(self.runtime, "memory_figures", None)
        return figures() if callable(figures) else {}
