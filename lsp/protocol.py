"""pygls protocol tweaks: malformed requests answered, incremental changes as offsets,
commands cancellable.

Five things pygls 2.1 does not do the way ngramd needs:

1. A request whose params do not validate is logged and dropped by pygls, so the
   editor would wait for an answer forever. Here it gets an ``InvalidParams`` error
   naming the bad field, and the server carries on.
2. pygls applies ``didChange`` edits before any handler runs, so the handler can no
   longer turn an edit's range into character offsets of the text it applied to.
   Here each edit is converted with the server's ``range_of`` (``ngramd.lsp.positions``, the
   one position helper) on the text before it, applied to pygls' document (which stays the only copy of
   the text), and the offsets are handed to the server for the daemon.
3. pygls runs a ``workspace/executeCommand`` handler as a task of its own, which the
   editor's ``$/cancelRequest`` never reaches: a rewrite the editor gave up on would
   go on running in the daemon. Here the command runs as the request's own task.
4. pygls finds a document under any percent-encoding of its uri (``a%20b.py`` and
   ``a b.py``), the daemon only under the spelling it was sent. Every message to the
   daemon uses the document's own ``doc.uri`` (its didOpen spelling); for didClose,
   which pygls handles after forgetting the document, that uri is looked up first.
5. A request after ``shutdown`` is dropped unanswered by pygls; the protocol asks for an
   ``InvalidRequest`` error, which it gets here.
"""

from __future__ import annotations

import inspect
import json
import logging
from typing import Any

import cattrs
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.protocol import LanguageServerProtocol, lsp_method
from pygls.protocol.language_server import _prepare_command_arguments


log = logging.getLogger(__name__)


class Malformed:
    """Stands in for a message whose params did not validate."""

    jsonrpc = "2.0"

    def __init__(self, msg_id: Any, method: str, detail: str) -> None:
        self.id = msg_id
        self.method = method
        self.detail = detail


def _describe(exc: BaseException) -> str:
    cause = exc.__cause__ or exc
    if isinstance(cause, cattrs.ClassValidationError):
        try:
            return "; ".join(cattrs.transform_error(cause))[:500]
        except Exception:  # pragma: no cover - cattrs' formatting is best-effort
            pass
    return str(cause)[:500] or type(cause).__name__


class NgramdProtocol(LanguageServerProtocol):
    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            method = data.get("method")
            if "jsonrpc" in data and isinstance(method, str):
                return Malformed(data.get("id"), method, _describe(exc))
            raise

    def handle_message(self, message: Any) -> None:
        if isinstance(message, Malformed):
            text = f"invalid params for {message.method}: {message.detail}"
            if message.id is None:
                log.warning("ignoring notification: %s", text)
            else:
                self._send_response(message.id, error=types.ResponseError(
                    code=types.ErrorCodes.InvalidParams, message=text))
            return
        method = getattr(message, "method", None)
        if self._shutdown and method not in (None, types.EXIT) and getattr(message, "id", None) is not None:
            # pygls drops it unanswered: the editor would wait for ever (a second shutdown too)
            self._send_response(message.id, error=types.ResponseError(
                code=types.ErrorCodes.InvalidRequest, message=f"{method}: the server is shutting down"))
            return
        super().handle_message(message)

    @lsp_method(types.WORKSPACE_EXECUTE_COMMAND)
    async def lsp_workspace__execute_command(self, params: types.ExecuteCommandParams) -> Any:
        """pygls' own, run in this request's task so that ``$/cancelRequest`` cancels the command.

        Commands are async or plain functions (a ``@server.thread`` one would run on the
        event loop here; ngramd registers none)."""
        handler = self.fm.commands.get(params.command)
        if handler is None:
            raise JsonRpcInvalidParams.of(ValueError(f"Command name {params.command!r} is not defined"))
        try:
            args, kwargs = _prepare_command_arguments(handler, params, self._converter)
        except Exception as exc:
            raise JsonRpcInvalidParams.of(exc)
        result = handler(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams) -> Any:
        """pygls' own, under the uri the document was opened with: pygls finds a document
        under any percent-encoding of its uri, the daemon only under the one it was sent,
        and pygls forgets the document before the server's handler could ask for it."""
        doc = self._server.open_document(params.text_document.uri)  # type: ignore[attr-defined]
        if doc is not None and doc.uri != params.text_document.uri:
            params = types.DidCloseTextDocumentParams(
                text_document=types.TextDocumentIdentifier(uri=doc.uri))
        yield from super().lsp_text_document__did_close(params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams) -> None:
        """Apply each edit via the server's ``range_of`` and hand the daemon its offsets."""
        uri = params.text_document.uri
        doc = self._server.open_document(uri)  # type: ignore[attr-defined]
        if doc is None:
            log.warning("didChange for a document that is not open: %s", uri)
            return
        changes: list[dict[str, Any]] = []
        for change in params.content_changes:
            if isinstance(change, types.TextDocumentContentChangePartial):
                text = doc.source
                start, end = self._server.range_of(doc, change.range)  # type: ignore[attr-defined]
                doc.apply_change(types.TextDocumentContentChangeWholeDocument(
                    text=text[:start] + change.text + text[end:]))
                changes.append({"start": start, "end": end, "text": change.text})
            else:
                doc.apply_change(change)
                changes.append({"text": change.text})
        doc.version = params.text_document.version
        # doc.uri: the spelling the daemon was sent at didOpen (see did_close)
        self._server.document_changed(doc.uri, doc.version, changes)  # type: ignore[attr-defined]


def is_parse_error(error: BaseException) -> bool:
    return isinstance(error, json.JSONDecodeError) or isinstance(
        getattr(error, "__cause__", None), json.JSONDecodeError)
