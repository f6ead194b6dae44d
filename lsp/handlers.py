"""LSP handlers: adapters that fetch the document, call the daemon, convert types.

Every request handler is ``async``: the event loop never waits on the daemon.
Commands:
- ``ngramd.rewriteSelection(uri, range, instruction?, version?)``: the daemon's ``edit``
  of the range, applied with ``workspace/applyEdit``; returns the ``WorkspaceEdit``.
  ``version``: the document version the range belongs to; another version is refused
  (ContentModified) rather than applied to the wrong text. The rewrite code action
  carries no instruction (null), so that a client can ask the user for one; the server
  then uses ``DEFAULT_INSTRUCTION``.
- ``ngramd.prepareRewrite(uri, range, version?, instruction?)``: the daemon's ``prepareEdit``:
  an editor sends it when it starts asking the user for a rewrite's instruction, so that the
  daemon prefills the rewrite's prompt meanwhile, and again with the ``instruction`` typed
  so far when the typing pauses (editors/: 300 ms), so that the rewrite then prefills only
  what was typed after it. Answers the daemon's figures, or null when nothing was prepared
  (it is only a head start: it never fails the editor).
- ``ngramd.prepareCompletion(uri, position, version?)``: the daemon's ``prepareComplete``:
  an editor sends it when the cursor has rested at ``position`` (editors/: 300 ms), so that
  the daemon prefills the completion prompt there before the user types. Answers as
  ``prepareRewrite`` does; null also while completions are disabled or no daemon runs
  (it never starts one).
- ``ngramd.status()``: settings, connection state, counters and the daemon's status.
- ``ngramd.toggle(enabled?)``: flip (or set) ``enabled``; returns the new value.
"""

from __future__ import annotations

import logging
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams

from ngramd.lsp import items, positions
from ngramd.lsp.daemon_client import DaemonError, DaemonUnavailable
from ngramd.lsp.server import NgramdServer

log = logging.getLogger(__name__)

REWRITE = "ngramd.rewriteSelection"
PREPARE_REWRITE = "ngramd.prepareRewrite"
PREPARE_COMPLETION = "ngramd.prepareCompletion"
STATUS = "ngramd.status"
TOGGLE = "ngramd.toggle"
REWRITE_TITLE = "Rewrite selection with ngramd"
DEFAULT_INSTRUCTION = "Rewrite this code."
REWRITE_KIND = types.CodeActionKind.RefactorRewrite.value


def register(server: NgramdServer) -> None:
    @server.feature(types.INITIALIZE)
    def initialize(ls: NgramdServer, params: types.InitializeParams) -> None:
        # A bad option must not stop the editor's session: it is reported, the rest applies.
        for message in ls.apply_settings(params.initialization_options):
            ls.window_show_message(message)

    @server.feature(types.INITIALIZED)
    def initialized(ls: NgramdServer, params: types.InitializedParams) -> None:
        ls.link.start()  # connect now, starting a daemon if none answers

    @server.feature(types.SHUTDOWN)
    async def shutdown(ls: NgramdServer, params: None) -> None:
        await ls.link.close()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: NgramdServer, params: types.DidOpenTextDocumentParams) -> None:
        doc = ls.open_document(params.text_document.uri)
        if doc is not None:
            ls.document_opened(doc)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: NgramdServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.document_closed(params.text_document.uri)

    @server.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    def did_change_folders(ls: NgramdServer, params: types.DidChangeWorkspaceFoldersParams) -> None:
        from pygls.uris import to_fs_path

        def paths(folders: Any) -> list[str]:
            return [p for p in (to_fs_path(f.uri) for f in folders or []) if p]

        ls.link.send("workspaceFolders", {"added": paths(params.event.added),
                                          "removed": paths(params.event.removed)})

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: NgramdServer,
                                       params: types.DidChangeConfigurationParams) -> None:
        settings = params.settings
        if not settings and _can_pull_configuration(ls):
            # pull model (VS Code sends null settings): ask for our section
            pulled = await ls.workspace_configuration_async(types.ConfigurationParams(
                items=[types.ConfigurationItem(section="ngramd")]))
            settings = pulled[0] if pulled else None
        for message in ls.apply_settings(settings):
            ls.window_show_message(message)

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(ls: NgramdServer, params: types.InlineCompletionParams
                                ) -> types.InlineCompletionList | None:
        invoked = params.context.trigger_kind == types.InlineCompletionTriggerKind.Invoked
        selected = params.context.selected_completion_info
        proposal = await ls.propose(params.text_document.uri, params.position,
                                    multiline=ls.settings.multiline, selected=selected)
        if proposal is None:
            return None
        shape = dict(invoked=invoked, multiline=proposal.multiline, rest=proposal.rest, fim=proposal.fim,
                     stop_reason=proposal.stop_reason, encoding=ls.encoding())
        if selected is not None:
            found = items.selected_items(proposal.text, selected, **shape)
        else:
            cursor = ls.position_of(proposal.doc, proposal.offset)
            found = items.inline_items(proposal.text, cursor, **shape)
        return types.InlineCompletionList(items=found)

    @server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=[]))
    async def completion(ls: NgramdServer, params: types.CompletionParams) -> types.CompletionList:
        if _has_inline_completion(ls):
            # the editor shows the same text as a ghost: the menu's request would only cancel the
            # inline one for the same place (one request a document at a time) and cost a second
            # daemon call each keystroke; complete (not incomplete): the editor need not ask again
            return types.CompletionList(is_incomplete=False, items=[])
        uri = params.text_document.uri
        proposal = await ls.propose(uri, params.position, multiline=ls.settings.multiline)
        if proposal is None:  # incomplete: the next keystroke asks again, unless there is nothing to ask
            return types.CompletionList(is_incomplete=ls.settings.enabled, items=[])
        text = proposal.doc.source
        cursor = ls.position_of(proposal.doc, proposal.offset)
        word = items.word_before(text[positions.line_start(text, proposal.offset):proposal.offset])
        word_start = ls.position_of(proposal.doc, proposal.offset - len(word))
        item = items.completion_item(proposal.text, word, types.Range(start=word_start, end=cursor),
                                     markup=_takes_plain_text_markup(ls), rest=proposal.rest,
                                     fim=proposal.fim, encoding=ls.encoding())
        return types.CompletionList(is_incomplete=True, items=[item] if item else [])

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
        code_action_kinds=[types.CodeActionKind.RefactorRewrite], resolve_provider=True))
    def code_action(ls: NgramdServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        rng = params.range
        if rng.start == rng.end or not ls.settings.enabled:
            return []
        doc = ls.require_document(params.text_document.uri)
        if ls.is_too_large(doc.uri):  # the rewrite would fail (the user was told why)
            return []
        if params.context.only and not any(_kind_covers(str(getattr(k, "value", k)), REWRITE_KIND)
                                           for k in params.context.only):
            return []
        args = [doc.uri, _unstructure(ls, rng), None, doc.version]
        action = types.CodeAction(title=REWRITE_TITLE, kind=types.CodeActionKind.RefactorRewrite,
                                  data={"uri": doc.uri, "range": args[1], "instruction": None,
                                        "version": doc.version})
        if not _can_resolve_edit(ls):
            action.command = types.Command(title=REWRITE_TITLE, command=REWRITE, arguments=args)
        return [action]

    @server.feature(types.CODE_ACTION_RESOLVE)
    async def code_action_resolve(ls: NgramdServer, action: types.CodeAction) -> types.CodeAction:
        data = action.data if isinstance(action.data, dict) else {}
        uri, rng, instruction, version = _rewrite_args(ls, [data.get("uri"), data.get("range"),
                                                            data.get("instruction"), data.get("version")])
        action.edit = await _rewrite(ls, uri, rng, instruction, version)
        return action

    @server.command(REWRITE)
    async def rewrite_selection(ls: NgramdServer, *args: Any) -> Any:
        edit = await _rewrite(ls, *_rewrite_args(ls, list(args)))
        applied = await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(
            edit=edit, label=REWRITE_TITLE))
        if not getattr(applied, "applied", False):  # the editor refused it (the document changed, say)
            reason = getattr(applied, "failure_reason", None) or "no reason given"
            log.warning("the editor did not apply the rewrite: %s", reason)
            raise JsonRpcException(code=types.LSPErrorCodes.RequestFailed,
                                   message=f"the editor did not apply the rewrite ({reason}); ask again")
        return _unstructure(ls, edit)

    @server.command(PREPARE_REWRITE)
    async def prepare_rewrite(ls: NgramdServer, *args: Any) -> Any:
        if not 2 <= len(args) <= 4:
            raise JsonRpcInvalidParams(
                f"{PREPARE_REWRITE} takes [uri, range, version?, instruction?], got {len(args)} arguments")
        uri, rng, version = _uri_range_version(ls, PREPARE_REWRITE, args[0], args[1], args[2] if len(args) >= 3 else None)
        instruction = args[3] if len(args) == 4 else None
        if instruction is not None and not isinstance(instruction, str):
            raise JsonRpcInvalidParams(f"{PREPARE_REWRITE}: instruction must be a string or null, "
                                       f"got {type(instruction).__name__}")
        return await ls.prepare_edit(uri, rng, version, instruction)

    @server.command(PREPARE_COMPLETION)
    async def prepare_completion(ls: NgramdServer, *args: Any) -> Any:
        if not 2 <= len(args) <= 3:
            raise JsonRpcInvalidParams(
                f"{PREPARE_COMPLETION} takes [uri, position, version?], got {len(args)} arguments")
        uri, version, pos = _uri_version_and(ls, PREPARE_COMPLETION, args[0], args[2] if len(args) == 3 else None,
                                             args[1], types.Position)
        return await ls.prepare_completion(uri, pos, version)

    @server.command(STATUS)
    async def status(ls: NgramdServer, *args: Any) -> dict[str, Any]:
        # [{"spawn": false}]: an editor's poll, which must never start a daemon
        observe = bool(args) and isinstance(args[0], dict) and args[0].get("spawn") is False
        return await ls.status(observe=observe)

    @server.command(TOGGLE)
    def toggle(ls: NgramdServer, *args: Any) -> dict[str, Any]:
        if args and not isinstance(args[0], bool):
            raise JsonRpcInvalidParams(f"{TOGGLE} takes an optional boolean, got {args[0]!r}")
        enabled = args[0] if args else not ls.settings.enabled
        ls.apply_settings({"enabled": enabled})
        return {"enabled": ls.settings.enabled}


def _unstructure(ls: NgramdServer, value: Any) -> Any:
    return ls.protocol._converter.unstructure(value)


def _can_resolve_edit(ls: NgramdServer) -> bool:
    caps = ls.client_capabilities.text_document
    support = caps.code_action.resolve_support if caps and caps.code_action else None
    return bool(support and "edit" in support.properties)


def _can_pull_configuration(ls: NgramdServer) -> bool:
    ws = ls.client_capabilities.workspace
    return bool(ws and ws.configuration)


def _kind_covers(wanted: str, kind: str) -> bool:
    """Whether a code action ``kind`` is asked for by ``only`` entry ``wanted``: the same
    kind or a parent of it, on dot boundaries (``refactor`` covers ``refactor.rewrite``,
    ``refactor.re`` does not)."""
    return kind == wanted or kind.startswith(wanted + ".")


def _rewrite_args(ls: NgramdServer, args: list[Any]) -> tuple[str, types.Range, str, int | None]:
    """Validate ``[uri, range, instruction?, version?]`` with errors that say what is wrong."""
    if not 2 <= len(args) <= 4:
        raise JsonRpcInvalidParams(f"{REWRITE} takes [uri, range, instruction?, version?], "
                                   f"got {len(args)} arguments")
    instruction = args[2] if len(args) >= 3 and args[2] is not None else DEFAULT_INSTRUCTION
    if not isinstance(instruction, str):
        raise JsonRpcInvalidParams(f"{REWRITE}: instruction must be a string, got {instruction!r}")
    uri, rng, version = _uri_range_version(ls, REWRITE, args[0], args[1], args[3] if len(args) == 4 else None)
    return uri, rng, instruction, version


def _uri_range_version(ls: NgramdServer, command: str, uri: Any, raw_range: Any,
                       version: Any) -> tuple[str, types.Range, int | None]:
    """A command's document, range and (optional) version, with errors that say what is wrong."""
    uri, version, rng = _uri_version_and(ls, command, uri, version, raw_range, types.Range)
    return uri, rng, version


def _uri_version_and(ls: NgramdServer, command: str, uri: Any, version: Any, raw: Any,
                     lsp_type: type) -> tuple[str, int | None, Any]:
    """A command's document, (optional) version and one argument of ``lsp_type`` (a Range, a
    Position), with errors that say what is wrong."""
    if not isinstance(uri, str) or not uri:
        raise JsonRpcInvalidParams(f"{command}: uri must be a string, got {uri!r}")
    if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
        raise JsonRpcInvalidParams(f"{command}: version must be an integer or null, got {version!r}")
    try:
        value = ls.protocol._converter.structure(raw, lsp_type)
    except Exception as exc:
        kind = lsp_type.__name__
        raise JsonRpcInvalidParams(f"{command}: {kind.lower()} must be an LSP {kind}, got {raw!r}") from exc
    return uri, version, value


def _takes_plain_text_markup(ls: NgramdServer) -> bool:
    """Whether the editor listed plain text among its completion documentation formats: MarkupContent
    is for those that did (the protocol); a plain string documents an item in any editor."""
    completion = getattr(ls.client_capabilities.text_document, "completion", None)
    formats = getattr(getattr(completion, "completion_item", None), "documentation_format", None) or ()
    return types.MarkupKind.PlainText in formats


def _has_inline_completion(ls: NgramdServer) -> bool:
    """Whether the editor said it asks for inline completions (VS Code, Neovim 0.12)."""
    text_document = ls.client_capabilities.text_document
    return getattr(text_document, "inline_completion", None) is not None


async def _rewrite(ls: NgramdServer, uri: str, rng: types.Range, instruction: str,
                   version: int | None = None) -> types.WorkspaceEdit:
    try:
        rewrite = await ls.edit(uri, rng, instruction, version)
    except DaemonError as exc:
        raise JsonRpcException(code=exc.code, message=f"ngramd edit failed: {exc.message}") from exc
    except DaemonUnavailable as exc:
        raise JsonRpcInternalError(f"ngramd edit failed: {exc}") from exc
    ws_caps = ls.client_capabilities.workspace
    versioned = bool(ws_caps and ws_caps.workspace_edit and ws_caps.workspace_edit.document_changes)
    return items.workspace_edit(rewrite.uri, rewrite.version, rewrite.range, rewrite.text, versioned)
