"""The ngramd language server: state and daemon plumbing (handlers: lsp/handlers.py).

Vocabulary:
- *keystroke generation*: a per-document number, drawn anew from one server-wide
  counter by every ``didOpen`` and ``didChange`` (never reused, so a document closed
  and reopened meanwhile cannot look unchanged); a completion that started under an
  older generation is *stale* and answers nothing.
- *too large*: an open document longer than the daemon keeps (``maxDocumentChars``) or
  whose ``open`` message would be longer than it reads (``maxMessageBytes``; both from its
  ``initialize`` answer): it is not sent
  (neither its opens nor its changes), completions in it answer nothing at once and a
  rewrite of it fails saying so; the user is told once per document. When it shrinks
  under the limit it is sent whole (``open``) and served again.
- *in-flight request*: the daemon ``requestId`` of the completion running for a
  document; a keystroke cancels it in the daemon (``cancel``), and so do the
  editor's ``$/cancelRequest`` (pygls cancels the handler's task, which sends
  ``cancel`` on its way out) and a timeout. A rewrite abandoned the same two ways is
  cancelled in the daemon too: the daemon runs one request at a time.

pygls owns the document text (``workspace.text_documents``); this class keeps only
counters and ids, never a second copy of any text.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from lsprotocol import types
from pygls.exceptions import JsonRpcContentModified, JsonRpcException, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument

from ngramd.daemon.protocol import rpc
from ngramd.daemon.protocol.paths import resolve_socket_path
from ngramd.daemon.protocol.requests import FINISHED_EDIT_STOPS
from ngramd.lsp import items, positions
from ngramd.lsp.config import Settings
from ngramd.lsp.daemon_client import DaemonError, DaemonUnavailable, RpcConnection
from ngramd.lsp.daemon_limits import DaemonLimits, message_fits
from ngramd.lsp.deadline import CompletionDeadline
from ngramd.lsp.daemon_link import SPAWN_BACKOFF_S, DaemonLink
from ngramd.lsp.protocol import NgramdProtocol, is_parse_error

log = logging.getLogger(__name__)

VERSION = "0.1.0"
CLIENT_NAME = f"ngramd-lsp {VERSION}"
PROBE_S = 1.0  # how long an observing status waits to connect to a running daemon
MAX_REFUSALS_SHOWN = 8  # distinct refusals shown between two completions: more is a flood


@dataclass
class Rewrite:
    """The daemon's replacement text for ``range`` of ``uri`` at document ``version``."""

    uri: str
    version: int | None
    range: types.Range  # ordered and clamped to the text: exactly what the daemon replaced
    text: str


@dataclass
class Proposal:
    """A daemon answer and where it applies."""

    doc: TextDocument
    offset: int
    text: str
    result: dict[str, Any]
    rest: str = ""  # the text after the completed place on its line (lsp/items.py)
    multiline: bool = True  # what the daemon was asked for

    @property
    def stop_reason(self) -> str:
        return str(self.result.get("stop_reason") or "")

    @property
    def fim(self) -> bool:
        """Whether the model saw ``rest`` (a fill-in-the-middle prompt)."""
        prompt = self.result.get("prompt")
        return isinstance(prompt, str) and items.is_fim_prompt(prompt)


class NgramdServer(LanguageServer):
    def __init__(self, settings: Settings, socket_path: str, *, spawn: bool = True) -> None:
        super().__init__("ngramd", VERSION, protocol_cls=NgramdProtocol,
                         text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.settings = settings
        self.default_socket = socket_path
        self.link = DaemonLink(self._socket_path(settings), model=settings.model,
                               device=settings.device, exact_kernels=settings.exact_kernels,
                               on_connect=self._on_connect,
                               on_start_failed=self._daemon_start_failed, spawn=spawn)
        self._start_failure_shown: str | None = None  # the last failed start's reason told the user
        self._ids = itertools.count(1)
        self._generations = itertools.count(1)
        self._generation: dict[str, int] = {}
        self._inflight: dict[str, str] = {}
        # the rewrites running on each document, told (set) when it changes or closes: their
        # answer would replace the wrong text, so they stop at once and free the daemon
        self._rewrites: dict[str, set[asyncio.Event]] = {}
        _quiet_pygls_for_closed_documents()
        self._refusals_shown: set[str] = set()  # the daemon's refusals shown to the user
        self.limits = DaemonLimits()  # the connected daemon's, once it says
        # open documents whose last sync the daemon refused, its re-sync too: the next change
        # goes as a whole `open`, never as an edit of a copy the daemon does not hold
        self._unsynced: set[str] = set()
        self._too_large: set[str] = set()  # open documents too large for the daemon: not sent
        self._too_large_told: set[str] = set()  # the open documents the user was told that of
        # Where the editor's cursor last rested (the last prepareCompletion asked, or a completion
        # asked since: uri, position, version): a daemon that comes (the one this server started,
        # still loading when the cursor rested; or one started again) holds nothing prepared, so
        # it is prepared there on connection, one place for every editor. None while the editor
        # sends no prepares (none yet, or its setting is off).
        self._resting: tuple[str, types.Position, int | None] | None = None
        # Whether the daemon's model sees the text after the cursor (a fill-in-the-middle prompt),
        # learnt from its last completion; None until one came from the daemon connected now.
        self._model_sees_rest: bool | None = None
        # how long a completion waits for its answer: timeoutMs stretched to the daemon's figures
        self.deadline = CompletionDeadline()
        self.counters = {"completions": 0, "empty": 0, "stale": 0, "cancelled": 0,
                         "failed": 0, "resyncs": 0, "mid_line": 0}

    # -- documents ------------------------------------------------------------------

    def open_document(self, uri: str) -> TextDocument | None:
        """pygls' document for ``uri`` if the editor opened it (never one read from disk)."""
        try:
            return self.workspace.text_documents.get(unquote(uri))
        except RuntimeError:  # before initialize
            return None

    def require_document(self, uri: str) -> TextDocument:
        doc = self.open_document(uri)
        if doc is None:
            raise JsonRpcInvalidParams(f"{rpc.DOCUMENT_NOT_OPEN}{uri}")
        return doc

    def encoding(self) -> str:
        return str(getattr(self.workspace.position_encoding, "value", None)
                   or self.workspace.position_encoding or positions.UTF16)

    def offset_of(self, doc: TextDocument, pos: types.Position) -> int:
        return positions.offset_at(doc.source, pos.line, pos.character, self.encoding())

    def range_of(self, doc: TextDocument, rng: types.Range) -> tuple[int, int]:
        """Offsets ``(start, end)`` of ``rng`` in the document's current text."""
        return positions.range_offsets(doc.source, (rng.start.line, rng.start.character),
                                       (rng.end.line, rng.end.character), self.encoding())

    def position_of(self, doc: TextDocument, offset: int) -> types.Position:
        line, character = positions.position_at(doc.source, offset, self.encoding())
        return types.Position(line=line, character=character)

    def folder_paths(self) -> list[str]:
        try:
            folders = list(self.workspace.folders.values())
        except RuntimeError:
            return []
        return [p for p in (to_fs_path(f.uri) for f in folders) if p and os.path.isdir(p)]

    # -- document sync -> daemon ---------------------------------------------------------

    def document_opened(self, doc: TextDocument) -> None:
        self._generation[doc.uri] = next(self._generations)
        if self._fits_daemon(doc):
            self._sync(doc.uri, "open", self._open_params(doc))

    def document_changed(self, uri: str, version: int | None, changes: list[dict[str, Any]]) -> None:
        """Called by the protocol, after applying them, with offsets into the text before each edit."""
        self._generation[uri] = next(self._generations)
        self.cancel_inflight(uri)
        self._stop_rewrites(uri)
        doc = self.open_document(uri)
        was_too_large = uri in self._too_large
        if doc is not None and not self._fits_daemon(doc):
            if not was_too_large:  # the daemon's copy is out of date and stays so: drop it
                self._sync(uri, "close", {"uri": uri}, resync=False)
            return
        if (was_too_large or uri in self._unsynced) and doc is not None:  # the daemon has no (good) copy
            self._sync(uri, "open", self._open_params(doc))
            return
        self._sync(uri, "change", {"uri": uri, "version": version or 0, "changes": changes})

    def document_closed(self, uri: str) -> None:
        self.cancel_inflight(uri)
        self._stop_rewrites(uri)
        if self._resting is not None and self._resting[0] == uri:
            self._resting = None
        self._generation.pop(uri, None)
        self._too_large_told.discard(uri)
        self._unsynced.discard(uri)
        if uri in self._too_large:
            self._too_large.discard(uri)
            return  # the daemon has no copy
        self._sync(uri, "close", {"uri": uri}, resync=False)

    def cancel_inflight(self, uri: str) -> None:
        request_id = self._inflight.pop(uri, None)
        if request_id is not None:
            self.link.send("cancel", {"uri": uri, "requestId": request_id})

    def _stop_rewrites(self, uri: str) -> None:
        for moved in self._rewrites.pop(uri, ()):
            moved.set()

    @staticmethod
    def _open_params(doc: TextDocument) -> dict[str, Any]:
        return {"uri": doc.uri, "text": doc.source, "version": doc.version or 0,
                "languageId": doc.language_id or ""}

    def _sync(self, uri: str, method: str, params: dict[str, Any], resync: bool = True) -> None:
        fut = self.link.send(method, params)
        if fut is not None and resync:
            fut.add_done_callback(lambda f: self._sync_done(f, uri, method))

    def _sync_done(self, fut: asyncio.Future[Any], uri: str, method: str) -> None:
        if method == "open":
            self._resync_done(fut, uri)  # the daemon holds this text now, or still its older copy
        if fut.cancelled() or not isinstance(fut.exception(), DaemonError):
            return  # a lost connection is re-synced whole on reconnect
        log.warning("daemon refused %s for %s (%s); re-sending the document", method, uri,
                    fut.exception())
        self.resync(uri)

    def resync(self, uri: str) -> None:
        """Replace the daemon's copy of ``uri`` by pygls' text (no further retry: if the
        daemon refuses that too, the next change is sent whole, as an ``open``)."""
        doc = self.open_document(uri)
        if doc is not None and uri not in self._too_large:
            self.counters["resyncs"] += 1
            fut = self.link.send("open", self._open_params(doc))
            if fut is not None:
                fut.add_done_callback(lambda f: self._resync_done(f, uri))

    def _resync_done(self, fut: asyncio.Future[Any], uri: str) -> None:
        """After a whole ``open`` of ``uri``: in step if the daemon took it; if it refused it,
        the next change is sent whole too (a lost connection re-sends it anyway)."""
        if fut.cancelled():
            return
        if isinstance(fut.exception(), DaemonError):
            if uri not in self._unsynced:
                log.warning("daemon refused the whole text of %s (%s): its next change is sent whole",
                            uri, fut.exception())
            self._unsynced.add(uri)
        elif fut.exception() is None:
            self._unsynced.discard(uri)

    def _fits_daemon(self, doc: TextDocument) -> bool:
        """Whether the daemon reads ``doc``'s ``open`` and keeps the document; keeps
        ``_too_large`` up to date and tells the user (and the log) once per open document
        that it is too large."""
        if self.limits.document_fits(self._open_params(doc)):
            if doc.uri in self._too_large:
                self._too_large.discard(doc.uri)
                log.info("%s fits the daemon again: sending it", doc.uri)
            return True
        self._too_large.add(doc.uri)
        if doc.uri not in self._too_large_told:
            self._too_large_told.add(doc.uri)
            why = self._too_large_reason(doc)
            log.warning("%s", why)
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning,
                                                             message=f"ngramd: {why}"))
        return False

    def is_too_large(self, uri: str) -> bool:
        """Whether the open document ``uri`` is too large for the daemon (nothing of it is sent)."""
        return uri in self._too_large

    def _too_large_reason(self, doc: TextDocument) -> str:
        return self.limits.too_large_reason(doc.uri, doc.source)

    def _too_large_refusal(self, doc: TextDocument) -> DaemonError:
        """A rewrite's error for a document too large for the daemon, worded as the daemon's."""
        return DaemonError(rpc.INVALID_PARAMS, self._too_large_reason(doc), "edit")

    async def _on_connect(self, conn: RpcConnection) -> None:
        """A new daemon connection: say hello, then re-send every open buffer and any
        workspace folder change made while the hello was in flight.

        The opens are written synchronously after the last await, so they precede any
        sync message sent once the link is ready.
        """
        folders = self.folder_paths()
        info = await conn.request("initialize", {"client": CLIENT_NAME, "workspaceFolders": folders},
                                  timeout=60.0)
        self._start_failure_shown = None  # a daemon answered: a later failed start is news
        self.daemon_info = info if isinstance(info, dict) else {}
        self._model_sees_rest = None  # this daemon may run another model
        self.deadline.forget()  # and run on another machine's time
        self.limits.update(self.daemon_info)
        conn.max_message_bytes = self.limits.max_message_bytes
        pid = self.daemon_info.get("pid")
        if isinstance(pid, int) and not isinstance(pid, bool):
            conn.daemon_pid = pid  # the link then knows a daemon it started served
        now = self.folder_paths()
        if now != folders:  # changed meanwhile: that workspaceFolders was dropped (not ready)
            conn.send("workspaceFolders", {"added": [p for p in now if p not in folders],
                                           "removed": [p for p in folders if p not in now]}
                      ).add_done_callback(_log_failure)
        try:
            docs = list(self.workspace.text_documents.values())
        except RuntimeError:
            docs = []
        sent = [doc for doc in docs if self._fits_daemon(doc)]  # this daemon's limit may differ
        for doc in sent:
            fut = conn.send("open", self._open_params(doc))
            fut.add_done_callback(_log_failure)
            fut.add_done_callback(lambda f, uri=doc.uri: self._resync_done(f, uri))
        self._prepare_resting(conn)
        log.info("daemon ready (%s); %d open documents sent", self.daemon_info, len(sent))

    def _daemon_start_failed(self, reason: str) -> None:
        """Tell the user why no daemon serves (a model that cannot be loaded, say): the link
        calls this once per failed start (one every ``SPAWN_BACKOFF_S`` while the user types);
        a reason already shown is not shown again until a daemon has connected."""
        if reason == self._start_failure_shown:
            log.info("the daemon did not start again: %s", reason)
            return
        self._start_failure_shown = reason
        self.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=(
            f"ngramd: the daemon did not start: {reason}; a request after {SPAWN_BACKOFF_S:.0f} s "
            f"tries again")))

    # -- completion ---------------------------------------------------------------------

    async def propose(self, uri: str, pos: types.Position, *, multiline: bool,
                      selected: types.SelectedCompletionInfo | None = None) -> Proposal | None:
        """Debounce, then ask the daemon to complete at ``pos``.

        None when disabled, stale (a keystroke came meanwhile), cancelled by the daemon,
        or when the daemon fails or does not answer within its deadline: ``timeoutMs``
        stretched to what the daemon's answers cost (lsp/deadline.py), a daemon still
        starting waited for apart.
        ``selected``: complete the text as it would be with the menu's selection applied
        (sent as the daemon's stateless ``text``), the proposal continuing after it.
        ``multiline`` is asked for only where the rest of the line is blank: lines written
        before the rest of a line would split it (lsp/items.py).
        """
        if not self.settings.enabled:
            return None
        doc = self.require_document(uri)
        uri = doc.uri  # the spelling the daemon knows (the request's may be encoded otherwise)
        if uri in self._too_large:  # the daemon has no copy (the user was told)
            return None
        generation = self._generation.get(uri, 0)
        if self.settings.debounce_ms:
            await asyncio.sleep(self.settings.debounce_ms / 1000)
        if self._generation.get(uri, 0) != generation:
            self.counters["stale"] += 1
            return None
        text = doc.source
        offset = self.offset_of(doc, pos)
        if self._resting is not None:  # the user is here now: a daemon that comes prepares this place
            self._resting = (uri, pos, doc.version)
        params: dict[str, Any] = {"uri": uri, "offset": offset, "version": doc.version or 0,
                                  "maxTokens": self.settings.max_tokens,
                                  "temperature": self.settings.temperature}
        rest = positions.line_rest(text, offset)
        if selected is not None:
            s, e = self.range_of(doc, selected.range)
            params["text"] = text[:s] + selected.text + text[e:]
            params["offset"] = s + len(selected.text)
            rest = positions.line_rest(text, e)
            del params["version"]
        params["multiline"] = multiline = multiline and not rest.strip()
        self.cancel_inflight(uri)  # the user is here now, even where nothing is asked
        if self._model_sees_rest is False and not items.only_closers(rest):
            # a model blind to the rest of the line seldom writes a line that ends with it, and
            # nothing else is offered there (items.replaced_rest): not worth a pass per keystroke
            self.counters["mid_line"] += 1
            return None
        request_id = f"{os.getpid()}-{next(self._ids)}"
        params["requestId"] = request_id
        if selected is not None and not message_fits("complete", params, "text", self.limits.max_message_bytes):
            log.debug("completion of %s with the selection applied is longer than the daemon reads", uri)
            return None
        self._inflight[uri] = request_id
        timeout = self.deadline.seconds(self.settings.timeout_ms, self.settings.max_tokens)
        started = time.monotonic()
        try:
            if not self.link.ready:  # a daemon starting (loading, timing its passes) is no slow answer
                await self.link.connection(self.link.start_timeout)
                started = time.monotonic()
            result = await self._call_in_sync("complete", params, timeout)
        except asyncio.CancelledError:
            self.counters["cancelled"] += 1
            if self._inflight.get(uri) == request_id:
                self.cancel_inflight(uri)
            raise
        except DaemonUnavailable as exc:  # includes no answer within the deadline: stop the daemon's work
            self.counters["failed"] += 1
            if self.link.ready and time.monotonic() - started >= timeout:
                self.deadline.timed_out()  # the next completion waits longer
            log.warning("completion failed: %s", exc)
            if self._inflight.get(uri) == request_id:
                self.cancel_inflight(uri)
            return None
        except DaemonError as exc:
            if exc.code == rpc.REQUEST_CANCELLED:
                self.counters["cancelled"] += 1
            elif exc.code == rpc.CONTENT_MODIFIED:  # still stale after the re-send: the user typed
                self.counters["stale"] += 1
                log.info("completion for %s stale after re-sending it: %s", uri, exc.message)
            else:
                self.counters["failed"] += 1
                self._report_refusal(exc)
            return None
        finally:
            if self._inflight.get(uri) == request_id:
                del self._inflight[uri]
        if self._generation.get(uri, 0) != generation:
            self.counters["stale"] += 1
            return None
        if not isinstance(result, dict) or not isinstance(result.get("text"), str) or result.get("cancelled"):
            self.counters["empty"] += 1
            return None
        self.counters["completions"] += 1
        self.deadline.answered(time.monotonic() - started, result.get("stats"))
        self._refusals_shown.clear()  # a refusal after this one is news again
        log.debug("completion in %.0f ms: %r", (time.monotonic() - started) * 1000, result["text"][:80])
        proposal = Proposal(doc, offset, result["text"], result, rest, multiline)
        self._model_sees_rest = proposal.fim
        return proposal

    async def _call_in_sync(self, method: str, params: dict[str, Any], timeout: float) -> Any:
        """The daemon's answer to ``method`` on ``params["uri"]``; once re-sends the document and
        asks again if the daemon's copy was stale or missing (``_is_out_of_date``: e.g. it holds
        another editor's unsaved text of the file); any other refusal is raised as is, and so is
        one of a request that sends its own ``text``."""
        deadline = time.monotonic() + timeout
        try:
            return await self.link.call(method, params, timeout)
        except DaemonError as exc:
            if not _is_out_of_date(exc) or "text" in params:
                raise
            uri = params["uri"]
            log.info("daemon's copy of %s is out of date for %s (%s); re-sending", uri, method, exc.message)
            self.resync(uri)
            return await self.link.call(method, params, max(0.01, deadline - time.monotonic()))

    def _report_refusal(self, exc: DaemonError) -> None:
        """Log the daemon's refusal of a completion; show it too when the user can fix it
        (``_is_users_doing``), once per distinct refusal until a completion succeeds or
        the settings change: a refused setting fails every keystroke's request alike.
        Anything else (busy, a document lost meanwhile, an internal error) passes by
        itself and its message varies per request, so it is only logged."""
        if not _is_users_doing(exc):
            log.warning("daemon error: %s", exc)
            return
        if exc.message in self._refusals_shown or len(self._refusals_shown) >= MAX_REFUSALS_SHOWN:
            log.debug("daemon error (shown before, or enough shown): %s", exc)
            return
        self._refusals_shown.add(exc.message)
        log.warning("daemon error: %s", exc)
        self.window_show_message(types.ShowMessageParams(
            type=types.MessageType.Error, message=f"ngramd: the daemon refused the completion: {exc.message}"))

    async def edit(self, uri: str, rng: types.Range, instruction: str, version: int | None = None) -> Rewrite:
        """The daemon's rewrite of ``rng``.

        ``version``: the document version ``rng`` was taken from (a code action's), if
        known. Raises JsonRpcContentModified when the document is at another version,
        before or after the daemon's work: the range would then replace the wrong text (a
        change or close while the daemon works stops the rewrite there, and in the daemon).
        Raises JsonRpcException(RequestFailed) for a rewrite that did not finish (never
        applied: it would delete the rest of the selection). Raises DaemonError /
        DaemonUnavailable; an abandoned rewrite (cancelled by the editor, or past its
        timeout) is cancelled in the daemon.
        """
        doc = self.require_document(uri)
        uri = doc.uri  # the spelling the daemon knows (the request's may be encoded otherwise)
        if uri in self._too_large:
            raise self._too_large_refusal(doc)
        at = doc.version
        if version is not None and version != at:
            raise JsonRpcContentModified(
                f"{uri} changed since the rewrite was offered (version {version}, now {at}); ask again")
        start, end = self.range_of(doc, rng)
        replaced = types.Range(start=self.position_of(doc, start), end=self.position_of(doc, end))
        params = {"uri": uri, "start": start, "end": end, "instruction": instruction,
                  "version": at or 0, "requestId": f"{os.getpid()}-{next(self._ids)}"}
        moved = asyncio.Event()  # set when the document changes or closes
        self._rewrites.setdefault(uri, set()).add(moved)
        call = asyncio.ensure_future(self._edit_call(doc, params))
        watch = asyncio.ensure_future(moved.wait())
        try:
            await asyncio.wait({call, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when the editor cancels the request
            watch.cancel()
            if not call.done():
                call.cancel()  # it tells the daemon to stop
            running = self._rewrites.get(uri)
            if running is not None:
                running.discard(moved)
                if not running:
                    del self._rewrites[uri]
        if moved.is_set() and call.done() and not call.cancelled():
            call.exception()  # whatever it was, the answer is moot
        if not moved.is_set():
            result = call.result()
            if not isinstance(result, dict) or not isinstance(result.get("text"), str):
                raise DaemonError(rpc.INTERNAL_ERROR, f"unexpected edit result: {str(result)[:200]}", "edit")
            if result.get("stop_reason") not in FINISHED_EDIT_STOPS:
                raise JsonRpcException(code=types.LSPErrorCodes.RequestFailed, message=_unfinished(result))
        if self.open_document(uri) is not doc:
            raise JsonRpcContentModified(f"{uri} was closed while ngramd rewrote it")
        if moved.is_set() or doc.version != at:
            raise JsonRpcContentModified(
                f"{uri} changed while ngramd rewrote it (version {at}, now {doc.version}); ask again")
        return Rewrite(uri, at, replaced, result["text"])

    async def _edit_call(self, doc: TextDocument, params: dict[str, Any]) -> Any:
        """The daemon's ``edit`` answer; a rewrite abandoned (cancelled, or the daemon away) is
        cancelled in the daemon."""
        uri = params["uri"]
        timeout = max(self.settings.timeout_ms / 1000, 30.0)
        deadline = time.monotonic() + timeout  # the retry below gets what is left, not more
        try:
            try:
                return await self.link.call("edit", params, timeout)
            except DaemonError as exc:
                if not _is_out_of_date(exc):  # the daemon's copy is stale or gone: re-send it, once
                    raise
                if uri in self._too_large:  # it grew too large meanwhile: that is why, not "not open"
                    raise self._too_large_refusal(doc) from exc
                self.resync(uri)
                return await self.link.call("edit", params, max(0.01, deadline - time.monotonic()))
        except (asyncio.CancelledError, DaemonUnavailable):
            self.link.send("cancel", {"uri": uri, "requestId": params["requestId"]})
            raise

    async def prepare_edit(self, uri: str, rng: types.Range, version: int | None = None,
                           instruction: str | None = None) -> dict[str, Any] | None:
        """Ask the daemon to prefill a rewrite's prompt of ``rng`` up to its instruction (the
        editor is asking the user for it), or through the ``instruction`` typed so far. None when
        nothing was prepared: a document not open, too large or at another version, a daemon that
        refused, is busy (the job gives way to any request) or is away. Never raises for those: a
        head start is no request of the user's.
        """
        doc = self.open_document(uri)
        if doc is None or doc.uri in self._too_large or (version is not None and version != doc.version):
            return None
        start, end = self.range_of(doc, rng)
        params: dict[str, Any] = {"uri": doc.uri, "start": start, "end": end, "version": doc.version or 0}
        if instruction is not None and instruction.strip():
            params["instruction"] = instruction
        return await self._prepare("prepareEdit", params)

    async def _prepare(self, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """A daemon ``prepare*`` call's figures; None when it did not prepare (a head start only).
        A copy of the document the daemon refuses as stale (another editor's text, say) is
        re-sent and the prepare asked again, once, as a completion is."""
        try:
            result = await self._call_in_sync(method, params, max(self.settings.timeout_ms / 1000, 30.0))
        except (DaemonError, DaemonUnavailable) as exc:
            log.debug("%s of %s did nothing: %s", method, params["uri"], exc)
            return None
        return result if isinstance(result, dict) else None

    async def prepare_completion(self, uri: str, pos: types.Position,
                                 version: int | None = None) -> dict[str, Any] | None:
        """Ask the daemon to prefill the completion prompt at ``pos`` (the editor's cursor rests
        there), so that the first completion asked there prefills only what was typed since.
        None when nothing was prepared, for the reasons of ``prepare_edit``, when disabled, or
        when no daemon runs: unlike a request, it never starts one."""
        self._resting = (uri, pos, version) if self._prepares_wanted else None
        if not self._prepares_wanted or not await self.link.probe(PROBE_S):
            return None  # a cursor at rest is no reason to start a daemon (after `ngramd stop`, say)
        params = self._prepare_complete_params(uri, pos, version)  # after the probe, which may wait
        return None if params is None else await self._prepare("prepareComplete", params)

    @property
    def _prepares_wanted(self) -> bool:
        """Completions are on and the editor's setting allows prepares (``prepareCompletions``)."""
        return self.settings.enabled and self.settings.prepare_completions

    def _prepare_complete_params(self, uri: str, pos: types.Position,
                                 version: int | None) -> dict[str, Any] | None:
        """``prepareComplete``'s params for ``pos`` in the document as it is now; None when it is
        not open, too large for the daemon, or no longer at ``version``."""
        doc = self.open_document(uri)
        if doc is None or doc.uri in self._too_large or (version is not None and version != doc.version):
            return None
        return {"uri": doc.uri, "offset": self.offset_of(doc, pos), "version": doc.version or 0}

    def _prepare_resting(self, conn: RpcConnection) -> None:
        """On a new connection, after the opens: prepare where the cursor last rested, if its
        document is still as it was then (a keystroke since asks its own completion) and was
        sent to this daemon (``_too_large`` was just brought up to date for it)."""
        if self._resting is None or not self._prepares_wanted:
            return
        params = self._prepare_complete_params(*self._resting)
        if params is not None:
            conn.send("prepareComplete", params).add_done_callback(_log_prepare)

    # -- status -----------------------------------------------------------------------

    async def status(self, observe: bool = False) -> dict[str, Any]:
        """The LSP's state and the daemon's ``status``.

        ``observe``: look without starting a daemon (an editor's poll must not undo
        ``ngramd stop``), but connect to one that runs (another editor may have started
        it); with none connected, ``daemon`` is only ``{"state": "starting"}`` while an
        attempt that may start one is in flight, else ``{"state": "stopped"}``.
        """
        daemon: Any
        if observe and not await self.link.probe(PROBE_S):
            daemon = {"state": "starting" if self.link.starting else "stopped"}
        else:
            try:
                daemon = await self.link.call("status", None, min(self.settings.timeout_ms / 1000, 5.0))
            except (DaemonUnavailable, DaemonError) as exc:
                daemon = {"error": str(exc)}
        return {
            "enabled": self.settings.enabled,
            "settings": self.settings.to_options(),
            "socket": self.link.socket_path,
            "connected": self.link.ready,
            "connects": self.link.connects,
            "daemonsStarted": self.link.spawned,
            "lastError": self.link.last_error,
            "counters": dict(self.counters),
            "completionTimeoutMs": round(1000 * self.deadline.seconds(self.settings.timeout_ms,
                                                                      self.settings.max_tokens)),
            "torchLoaded": "torch" in sys.modules,  # must stay False: the LSP is thin
            "daemon": daemon,
        }

    def apply_settings(self, options: Any) -> list[types.ShowMessageParams]:
        """Apply the valid editor settings; returns the messages for the user.

        A refused value (named in an error message) keeps its old value; the other keys
        apply. The daemon is shared by every editor of the user, so a new ``model`` or
        ``device`` is not forced on a running one: it applies to the next daemon this LSP
        starts, and an info message says how to get there.
        """
        old, (new, refused) = self.settings, self.settings.applied(options)
        self.settings = new
        messages = [types.ShowMessageParams(
            type=types.MessageType.Error,
            message=f"ngramd: {why}; it keeps its value, the other settings apply") for why in refused]
        if new != old:
            self._refusals_shown.clear()  # the new settings' refusals are news
        socket = self._socket_path(new)
        same_daemon = socket == self.link.socket_path and self.link.ready
        self.link.reconfigure(socket_path=socket, model=new.model, device=new.device,
                              exact_kernels=new.exact_kernels)
        if same_daemon and (new.model, new.device, new.exact_kernels) != (old.model, old.device, old.exact_kernels):
            stop = "ngramd stop" if socket == str(resolve_socket_path(None)) else f"ngramd stop --socket {socket}"
            messages.append(types.ShowMessageParams(type=types.MessageType.Info, message=(
                f"ngramd: the running daemon keeps its model; run `{stop}` and the next "
                f"completion starts one with model {new.model or 'default'} on {new.device}.")))
        return messages

    def _socket_path(self, settings: Settings) -> str:
        """The editor's ``socket`` setting resolved as ``ngramd serve`` resolves it ("~/x" too)."""
        return str(resolve_socket_path(settings.socket)) if settings.socket else self.default_socket

    # -- errors -------------------------------------------------------------------------

    def report_server_error(self, error: Exception, source: Any) -> None:
        """Unparseable JSON gets a JSON-RPC parse error (id null); nothing is shown in
        the editor for errors already answered to a request."""
        if is_parse_error(error):
            # A plain dict: pygls' converter would drop the null id that JSON-RPC requires.
            self.protocol._send_data({"jsonrpc": "2.0", "id": None, "error": {
                "code": int(types.ErrorCodes.ParseError), "message": f"parse error: {error}"}})
            return
        if is_expected_refusal(error):
            log.info("request refused, the document closed or changed meanwhile: %s", error)
            return
        log.error("server error (%s): %s", getattr(source, "__name__", source), error)


def is_expected_refusal(error: BaseException | None) -> bool:
    """A request refused for an expected race, answered to the editor already, not a server
    error: InvalidParams for a document that is not open (a request sent just before
    didClose), or ContentModified (a rewrite of a document that changed since it was offered)."""
    return isinstance(error, JsonRpcContentModified) or (
        isinstance(error, JsonRpcInvalidParams) and str(error.message).startswith(rpc.DOCUMENT_NOT_OPEN))


class _ClosedDocumentFilter(logging.Filter):
    """Drops pygls' own traceback (logged at ERROR) for ``is_expected_refusal``;
    ``report_server_error`` logs it at INFO instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not is_expected_refusal(record.exc_info[1] if record.exc_info else None)


def _quiet_pygls_for_closed_documents() -> None:
    pygls_log = logging.getLogger("pygls.protocol.json_rpc")
    if not any(isinstance(f, _ClosedDocumentFilter) for f in pygls_log.filters):
        pygls_log.addFilter(_ClosedDocumentFilter())


def _is_out_of_date(exc: DaemonError) -> bool:
    """Whether the daemon refused because its copy of the document is stale or missing
    (daemon/service/methods.py, daemon/service/documents.py): re-sending the document repairs that, and
    nothing else; any other INVALID_PARAMS (a refused setting) would be re-sent in vain."""
    return exc.code == rpc.CONTENT_MODIFIED or (
        exc.code == rpc.INVALID_PARAMS and exc.message.startswith(rpc.DOCUMENT_NOT_OPEN))


def _is_users_doing(exc: DaemonError) -> bool:
    """Whether the daemon refused what the user asked for (a setting out of range, a
    method this daemon lacks), which repeats until the user acts; not a document the
    daemon lost, which ``_call_in_sync`` repairs."""
    return exc.code == rpc.METHOD_NOT_FOUND or (
        exc.code == rpc.INVALID_PARAMS and not exc.message.startswith(rpc.DOCUMENT_NOT_OPEN))


def _unfinished(result: dict[str, Any]) -> str:
    """What the user is told about a rewrite that stopped before its end."""
    stop = result.get("stop_reason")
    n = len(result.get("token_ids") or [])
    after = f" after {n} tokens" if n else ""
    advice = "select less and ask again"
    if stop == "max_tokens":
        why = f"it reached its length limit{after}"
    elif stop == "repetition":
        why, advice = f"the model went round in a loop{after}", "reword the instruction or select less"
    else:
        why = f"it stopped early (stop reason {stop!r})"
    return f"ngramd: the rewrite did not finish ({why}), so nothing was changed; {advice}"


def _log_prepare(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled() and fut.exception() is not None:  # a head start only: preempted, say
        log.debug("prepareComplete on connection did nothing: %s", fut.exception())


def _log_failure(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.warning("daemon refused re-sent state: %s", fut.exception())
