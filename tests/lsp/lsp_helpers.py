"""Small helpers shared by the LSP end-to-end tests."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

from lsprotocol import types


async def until(cond: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll ``cond`` until it is truthy (the daemon side is updated asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def poll_status(client, done: Callable[[dict], bool], tries: int = 200) -> dict:
    """An editor's status poll (``ngramd.status {spawn: false}``: connects to a daemon that runs,
    starts none) until ``done(status)``; the last status, whether or not it got there."""
    for _ in range(tries):
        status = await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="ngramd.status", arguments=[{"spawn": False}]))
        if done(status):
            break
        await asyncio.sleep(0.02)
    return status


def pos(line: int, character: int) -> types.Position:
    return types.Position(line=line, character=character)


def rng(l1: int, c1: int, l2: int, c2: int) -> types.Range:
    return types.Range(start=pos(l1, c1), end=pos(l2, c2))


def open_doc(client, uri: str, text: str, version: int = 1, language: str = "python") -> None:
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id=language, version=version, text=text)))


def change(client, uri: str, version: int, *edits: tuple[types.Range, str]) -> None:
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangePartial(range=r, text=t) for r, t in edits]))


def inline_params(uri: str, line: int, character: int, *, invoked: bool = False,
                  selected: types.SelectedCompletionInfo | None = None) -> types.InlineCompletionParams:
    kind = types.InlineCompletionTriggerKind.Invoked if invoked else types.InlineCompletionTriggerKind.Automatic
    return types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=pos(line, character),
        context=types.InlineCompletionContext(trigger_kind=kind, selected_completion_info=selected))


def apply_lsp_edit(text: str, r: types.Range, new: str) -> str:
    """Apply an edit given in UTF-16 positions (the reference, independent of lsp/)."""
    lines = text.split("\n")

    def off(p: types.Position) -> int:
        line = lines[p.line]
        units = 0
        for i, ch in enumerate(line):
            if units >= p.character:
                return sum(len(x) + 1 for x in lines[:p.line]) + i
            units += 2 if ord(ch) > 0xFFFF else 1
        return sum(len(x) + 1 for x in lines[:p.line]) + len(line)

    return text[:off(r.start)] + new + text[off(r.end):]


async def raw_request(client, method: str, params: Any, msg_id: str) -> Any:
    """Send a request as a plain JSON object and return the result unstructured (or the
    JsonRpcException). Used for malformed params, and where lsprotocol's client-side
    structuring is wrong: it reads any code action that has a ``command`` as a Command."""
    import concurrent.futures

    from pygls.exceptions import JsonRpcException

    cf: concurrent.futures.Future = concurrent.futures.Future()
    client.protocol._request_futures[msg_id] = cf
    client.protocol._send_data({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
    try:
        return await asyncio.wait_for(asyncio.wrap_future(cf), 10)
    except JsonRpcException as exc:
        return exc


def client_capabilities(*, resolve_edit: bool = False, encodings: list[str] | None = None,
                        inline: bool = True, documentation: list[str] | None = None) -> types.ClientCapabilities:
    """An editor's capabilities, with inlineCompletion (pytest-lsp's captured ones lack it);
    ``inline=False``: an editor without it (Helix, Neovim before 0.12), which the completion
    list serves; ``documentation``: the completion documentation formats it takes (none said)."""
    code_action = types.CodeActionClientCapabilities(
        code_action_literal_support=types.ClientCodeActionLiteralOptions(
            code_action_kind=types.ClientCodeActionKindOptions(value_set=[
                types.CodeActionKind.RefactorRewrite])),
        resolve_support=types.ClientCodeActionResolveOptions(properties=["edit"]) if resolve_edit else None,
    )
    return types.ClientCapabilities(
        general=types.GeneralClientCapabilities(position_encodings=encodings) if encodings else None,
        workspace=types.WorkspaceClientCapabilities(
            apply_edit=True, configuration=True, workspace_folders=True,
            workspace_edit=types.WorkspaceEditClientCapabilities(document_changes=True)),
        text_document=types.TextDocumentClientCapabilities(
            synchronization=types.TextDocumentSyncClientCapabilities(dynamic_registration=False),
            completion=types.CompletionClientCapabilities(
                completion_item=types.ClientCompletionItemOptions(
                    snippet_support=False, documentation_format=documentation)),
            inline_completion=types.InlineCompletionClientCapabilities() if inline else None,
            code_action=code_action,
        ),
    )
