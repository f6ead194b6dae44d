"""A stand-in for ``ngramd lsp`` that pins the editor plugins' side of the protocol.

pygls 2 over stdio, no daemon, no model. It answers with fixed, rule-based text so that
a client test can check exactly what the client sent and what it did with the reply:

textDocument/inlineCompletion, by what precedes the cursor on its line:
- ends with ``#pos``    -> " <character>": the LSP column the client sent (UTF-16 units)
- ends with ``#multi``  -> two items, "first\\nsecond" and " other"
- ends with ``#snippet``-> a snippet item "call(${1:x})"
- ends with ``#crlf``   -> "first\\r\\nsecond" (a CRLF document's line break)
- ends with ``#none``   -> null
- ends with ``append(`` -> "(a, 0))" whose range replaces the character after the cursor (the
  ``)`` of ``fired.append(|)``: the real server's replaced closers)
- ends with a word that is a prefix of "return a + b" -> one item whose range starts at
  that word, insertText "return a + b\\n# done"
- else nothing. Disabled (``enabled`` false) -> nothing.

workspace/executeCommand:
- ngramd.status            -> the shape of the real server's status, plus what this
                              server saw: ``init`` (initializationOptions), ``settings``
                              (every didChangeConfiguration), ``merged`` (the settings as
                              the real server keeps them: each one's keys over the last's; a
                              key sent null is dropped), ``triggers`` (triggerKinds)
- ngramd.toggle [bool]     -> {"enabled": ...}
- ngramd.rewriteSelection uri range instruction [version] -> "[" + the range upper-cased
  + "]"; sends workspace/applyEdit and returns the edit (as the real server does), or only
  returns it when the instruction starts with "return-only"; a version other than the
  document's is refused with ContentModified (as the real server does). Every version
  received (None when absent) is in the status's ``rewrite_versions``. The instruction
  ``exit-before-answering`` ends this server at once (a crash mid-request)
- ngramd.prepareRewrite uri range version [instruction] -> null; the arguments are in the status's
  ``prepared``, and every rewrite command's name in ``commands``, in arrival order
- ngramd.prepareCompletion uri position version -> null; the arguments are in the
  status's ``prepared_completions``, in arrival order (not in ``commands``: the editor sends
  them on its own, whenever the cursor rests)
- fake.document uri        -> the server's copy of the document (incremental sync check)
- fake.open                -> the URIs of the documents open (didOpen, not yet didClose), sorted
"""

from __future__ import annotations

import os
import re
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcContentModified
from pygls.lsp.server import LanguageServer

server = LanguageServer("fake-ngramd", "0.0")
seen: dict[str, Any] = {"init": None, "settings": [], "merged": {}, "triggers": [], "enabled": True,
                        "rewrite_versions": [], "prepared": [], "commands": [], "prepared_completions": []}

TARGET = "return a + b"


@server.feature(types.INITIALIZE)
def initialize(ls: LanguageServer, params: types.InitializeParams) -> None:
    seen["init"] = params.initialization_options
    if isinstance(params.initialization_options, dict):
        seen["enabled"] = params.initialization_options.get("enabled", True)
        seen["merged"].update(params.initialization_options)


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
def did_change_configuration(ls: LanguageServer, params: types.DidChangeConfigurationParams) -> None:
    settings = params.settings
    seen["settings"].append(settings)
    if isinstance(settings, dict):
        flat = settings.get("ngramd", settings)
        if isinstance(flat, dict):
            seen["merged"].update(flat)
        if isinstance(flat, dict) and "enabled" in flat:
            seen["enabled"] = bool(flat["enabled"])


def _prefix(ls: LanguageServer, uri: str, pos: types.Position) -> str:
    doc = ls.workspace.get_text_document(uri)
    lines = doc.lines
    line = lines[pos.line].rstrip("\r\n") if pos.line < len(lines) else ""
    col = doc.position_codec.position_from_client_units(lines, pos).character if pos.line < len(lines) else 0
    return line[:col]


@server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
def inline_completion(ls: LanguageServer, params: types.InlineCompletionParams) -> types.InlineCompletionList | None:
    seen["triggers"].append(int(params.context.trigger_kind))
    if not seen["enabled"]:
        return None
    pos = params.position
    prefix = _prefix(ls, params.text_document.uri, pos)
    item = types.InlineCompletionItem
    if prefix.endswith("#pos"):
        return types.InlineCompletionList(items=[item(insert_text=f" {pos.character}")])
    if prefix.endswith("#multi"):
        return types.InlineCompletionList(items=[item(insert_text="first\nsecond"), item(insert_text=" other")])
    if prefix.endswith("#snippet"):
        return types.InlineCompletionList(items=[
            item(insert_text=types.StringValue(value="call(${1:x})"))])
    if prefix.endswith("#crlf"):
        return types.InlineCompletionList(items=[item(insert_text="first\r\nsecond")])
    if prefix.endswith("#none"):
        return None
    if prefix.endswith("append("):
        end = types.Position(line=pos.line, character=pos.character + 1)
        return types.InlineCompletionList(items=[item(insert_text="(a, 0))", range=types.Range(start=pos, end=end))])
    word = re.search(r"[A-Za-z_]+$", prefix)
    if word and TARGET.startswith(word.group(0)):
        start = types.Position(line=pos.line, character=pos.character - len(word.group(0)))
        return types.InlineCompletionList(items=[
            item(insert_text=TARGET + "\n# done", range=types.Range(start=start, end=pos))])
    return types.InlineCompletionList(items=[])


@server.command("ngramd.status")
def status(ls: LanguageServer, *args: Any) -> dict[str, Any]:
    return {
        "enabled": seen["enabled"],
        "connected": True,
        "daemon": {"model": {"name": "fake"}, "generation": {"drafted": 4, "accepted": 3}},
        "init": seen["init"],
        "settings": seen["settings"],
        "merged": {k: v for k, v in seen["merged"].items() if v is not None},
        "triggers": seen["triggers"],
        "rewrite_versions": seen["rewrite_versions"],
        "prepared": seen["prepared"],
        "commands": seen["commands"],
        "prepared_completions": seen["prepared_completions"],
    }


@server.command("ngramd.prepareRewrite")
def prepare_rewrite(ls: LanguageServer, *args: Any) -> None:
    seen["prepared"].append(list(args))
    seen["commands"].append("ngramd.prepareRewrite")


@server.command("ngramd.prepareCompletion")
def prepare_completion(ls: LanguageServer, *args: Any) -> None:
    seen["prepared_completions"].append(list(args))


@server.command("ngramd.toggle")
def toggle(ls: LanguageServer, *args: Any) -> dict[str, Any]:
    seen["enabled"] = bool(args[0]) if args else not seen["enabled"]
    return {"enabled": seen["enabled"]}


@server.command("fake.document")
def document(ls: LanguageServer, uri: str) -> str:
    return ls.workspace.get_text_document(uri).source


@server.command("fake.open")
def open_documents(ls: LanguageServer, *args: Any) -> list[str]:
    return sorted(ls.workspace.text_documents)


@server.command("ngramd.rewriteSelection")
async def rewrite(ls: LanguageServer, *args: Any) -> Any:
    uri, raw_range, instruction = args[:3]
    version = args[3] if len(args) > 3 else None
    seen["rewrite_versions"].append(version)
    seen["commands"].append("ngramd.rewriteSelection")
    if instruction == "exit-before-answering":
        os._exit(1)  # as a crash does: not 0
    rng = ls.protocol._converter.structure(raw_range, types.Range)
    doc = ls.workspace.get_text_document(uri)
    if version is not None and version != doc.version:
        raise JsonRpcContentModified(f"document is at version {doc.version}, not {version}")
    start, end = doc.offset_at_position(rng.start), doc.offset_at_position(rng.end)
    # Not idempotent, so that an edit applied twice shows: "beta" -> "[BETA]".
    new_text = "[" + doc.source[start:end].upper() + "]"
    edit = types.WorkspaceEdit(changes={uri: [types.TextEdit(range=rng, new_text=new_text)]})
    if not str(instruction).startswith("return-only"):
        await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=edit, label="rewrite"))
    return ls.protocol._converter.unstructure(edit)


if __name__ == "__main__":
    server.start_io()
