"""``ngramd lsp`` end to end (pytest-lsp spawns it) against the fake daemon.

The fake daemon applies the LSP's change offsets to its own copy of each document,
so comparing that copy with the editor's text checks the position translation and
the incremental sync across the process boundary.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from ngramd.daemon.protocol import rpc
from lsp_helpers import apply_lsp_edit, change, inline_params, open_doc, poll_status, pos, raw_request, rng, until

URI = "file:///tmp/ngl-doc/a.py"
EMOJI = "\U0001F600"


async def test_initialize_result(fake, sock):
    """The server advertises inline completion (with options), completion, code actions
    with resolve, its four commands, and incremental sync."""
    import os
    import sys

    from pytest_lsp import make_test_lsp_client

    from pytest_lsp import client_capabilities

    # VS Code's captured capabilities, plus inlineCompletion which they lack
    caps = client_capabilities("visual-studio-code")
    caps.text_document.inline_completion = types.InlineCompletionClientCapabilities()
    client = make_test_lsp_client()
    await client.start_io(sys.executable, "-m", "ngramd.daemon.cli", "lsp", "--socket", sock,
                          env=dict(os.environ, NGRAMD_LSP_NO_SPAWN="1"))
    try:
        result = await client.initialize_session(types.InitializeParams(capabilities=caps))
        caps = result.capabilities
        assert caps.inline_completion_provider is not None
        assert caps.completion_provider is not None
        assert caps.code_action_provider.resolve_provider is True
        assert set(caps.execute_command_provider.commands) == {
            "ngramd.rewriteSelection", "ngramd.prepareRewrite", "ngramd.prepareCompletion", "ngramd.status",
            "ngramd.toggle"}
        sync = caps.text_document_sync
        assert sync.change == types.TextDocumentSyncKind.Incremental and sync.open_close
        assert caps.position_encoding == types.PositionEncodingKind.Utf16
        await client.shutdown_session()
    finally:
        await client.stop()


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8"])
async def test_incremental_sync_non_ascii(fake, sock, lsp_client, encoding):
    from lsp_helpers import client_capabilities

    client = await lsp_client(sock, capabilities=client_capabilities(encodings=[encoding]))
    text = f"def f():\n    s = '{EMOJI}漢字'\n    return s\n"
    open_doc(client, URI, text)
    await until(lambda: fake.docs.get(URI), what="open")

    def col(line_text: str, chars: int) -> int:
        prefix = line_text[:chars]
        return len(prefix.encode("utf-16-le")) // 2 if encoding == "utf-16" else len(prefix.encode())

    line1 = text.split("\n")[1]
    # insert after the emoji, then replace 漢字 by a CJK+combining string, then delete a line
    at = line1.index(EMOJI) + 1
    change(client, URI, 2, (rng(1, col(line1, at), 1, col(line1, at)), "é\u0301"))
    expected = text.replace(EMOJI, EMOJI + "é\u0301")
    line1b = expected.split("\n")[1]
    s, e = line1b.index("漢"), line1b.index("字") + 1
    change(client, URI, 3, (rng(1, col(line1b, s), 1, col(line1b, e)), "中文"))
    expected = expected.replace("漢字", "中文")
    change(client, URI, 4, (rng(2, 0, 3, 0), ""),  # two edits in one notification
           (rng(0, 4, 0, 5), "g"))
    expected = "def g():\n" + expected.split("\n")[1] + "\n"
    await until(lambda: fake.docs[URI]["version"] == 4, what="version 4")
    assert fake.docs[URI]["text"] == expected


async def test_inline_completion_automatic_and_invoked(fake, sock, lsp_client):
    client = await lsp_client(sock)
    text = f"x = '{EMOJI}'; y = \n"
    open_doc(client, URI, text)
    cursor_chars = text.index("\n")
    cursor_units = cursor_chars + 1  # the emoji is 2 UTF-16 units
    auto = await client.text_document_inline_completion_async(inline_params(URI, 0, cursor_units))
    assert len(auto.items) == 1
    item = auto.items[0]
    assert item.insert_text == fake.proposal  # multiline by default
    assert item.range == rng(0, cursor_units, 0, cursor_units)
    call = fake.methods("complete")[-1]
    assert call["offset"] == cursor_chars and call["version"] == 1 and call["uri"] == URI
    assert call["multiline"] is True and call["maxTokens"] == 64

    invoked = await client.text_document_inline_completion_async(
        inline_params(URI, 0, cursor_units, invoked=True))
    assert [i.insert_text for i in invoked.items] == [fake.proposal, fake.proposal.split("\n")[0]]


@pytest.mark.parametrize("client_args", [("--stdio",), ("--stdio", "--clientProcessId=4242")])
async def test_the_flags_lsp_clients_append_are_accepted(fake, sock, lsp_client, client_args):
    """vscode-languageclient appends `--stdio` (and some clients `--clientProcessId=N`) to the
    server's arguments: the server starts and answers as without them."""
    client = await lsp_client(sock, extra_args=client_args)
    open_doc(client, URI, "y = \n")
    answer = await client.text_document_inline_completion_async(inline_params(URI, 0, 4))
    assert [item.insert_text for item in answer.items] == [fake.proposal]


@pytest.mark.parametrize("flag, says", [
    ("--pipe=/tmp/lsp-pipe", "--pipe: ngramd lsp speaks LSP over stdio only"),
    ("--node-ipc", "--node-ipc: ngramd lsp speaks LSP over stdio only"),
    ("--socket=6009", "'6009' looks like a TCP port"),
])
def test_other_lsp_transports_are_a_clear_usage_error(flag, says, sock):
    done = subprocess.run([sys.executable, "-m", "ngramd.daemon.cli", "lsp", flag], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, NGRAMD_LSP_NO_SPAWN="1"))
    assert done.returncode == 2
    assert says in done.stderr


async def test_inline_completion_single_line_setting(fake, sock, lsp_client):
    client = await lsp_client(sock, options={"multiline": False, "maxTokens": 9})
    open_doc(client, URI, "a = \n")
    result = await client.text_document_inline_completion_async(inline_params(URI, 0, 4))
    assert [i.insert_text for i in result.items] == [fake.proposal.split("\n")[0]]
    call = fake.methods("complete")[-1]
    assert call["multiline"] is False and call["maxTokens"] == 9


async def test_inline_completion_selected_completion_info(fake, sock, lsp_client):
    """The item replaces the menu selection's range and starts with its text; the daemon
    completes the text with the selection applied."""
    client = await lsp_client(sock)
    open_doc(client, URI, "import os\nos.pa\n")
    selected = types.SelectedCompletionInfo(range=rng(1, 3, 1, 5), text="path")
    result = await client.text_document_inline_completion_async(
        inline_params(URI, 1, 5, selected=selected))
    assert len(result.items) == 1
    assert result.items[0].range == selected.range
    assert result.items[0].insert_text == "path" + fake.proposal
    call = fake.methods("complete")[-1]
    assert call["text"] == "import os\nos.path\n" and call["offset"] == len("import os\nos.path")


@pytest.mark.parametrize("formats", [None, [types.MarkupKind.PlainText]])
async def test_completion_fallback(fake, sock, lsp_client, formats):
    from lsp_helpers import client_capabilities

    client = await lsp_client(sock, capabilities=client_capabilities(inline=False, documentation=formats))  # as Helix
    fake.proposal = "ult = compute()\nprint(result)"
    open_doc(client, URI, f"# {EMOJI}\nres")
    result = await client.text_document_completion_async(types.CompletionParams(
        text_document=types.TextDocumentIdentifier(uri=URI), position=pos(1, 3)))
    assert result.is_incomplete is True and len(result.items) == 1
    item = result.items[0]
    assert item.label == "result = compute()"
    assert item.text_edit.range == rng(1, 0, 1, 3) and item.text_edit.new_text == item.label
    if formats:  # MarkupContent only where the editor said it takes it, else a string
        assert item.documentation == types.MarkupContent(kind=types.MarkupKind.PlainText, value="res" + fake.proposal)
    else:
        assert item.documentation == "res" + fake.proposal
    assert item.insert_text_format == types.InsertTextFormat.PlainText
    assert fake.methods("complete")[-1]["offset"] == len(f"# {EMOJI}\nres")


async def test_an_editor_with_inline_completion_gets_no_completion_list(fake, sock, lsp_client):
    """VS Code asks for both on a keystroke: the list's request would cancel the inline one for the
    same place and cost a second daemon call. The list is empty, complete, and asks nothing."""
    client = await lsp_client(sock)
    open_doc(client, URI, "res")
    calls = len(fake.methods("complete"))
    result = await client.text_document_completion_async(types.CompletionParams(
        text_document=types.TextDocumentIdentifier(uri=URI), position=pos(0, 3)))
    assert result.is_incomplete is False and not result.items
    assert len(fake.methods("complete")) == calls


async def test_the_completion_list_while_disabled_is_complete(fake, sock, lsp_client):
    """Incomplete would have the editor ask again on every keystroke, for nothing."""
    from lsp_helpers import client_capabilities

    client = await lsp_client(sock, options={"enabled": False}, capabilities=client_capabilities(inline=False))
    open_doc(client, URI, "res")
    result = await client.text_document_completion_async(types.CompletionParams(
        text_document=types.TextDocumentIdentifier(uri=URI), position=pos(0, 3)))
    assert result.is_incomplete is False and not result.items
    assert not fake.methods("complete")


async def test_a_request_after_shutdown_gets_an_invalid_request_error(fake, sock, lsp_client):
    client = await lsp_client(sock)
    open_doc(client, URI, "x = 1\n")
    await client.shutdown_async(None)
    with pytest.raises(JsonRpcException) as info:
        await asyncio.wait_for(client.text_document_inline_completion_async(inline_params(URI, 0, 5)), 10)
    assert info.value.code == types.ErrorCodes.InvalidRequest and "shutting down" in info.value.message
    client.exit(None)  # ended here: the fixture's own shutdown would now be refused the same way
    assert await asyncio.wait_for(client._server.wait(), 10) == 0


async def test_cancel_request_cancels_in_daemon(fake, sock, lsp_client):
    client = await lsp_client(sock)
    fake.delay = 30
    open_doc(client, URI, "a = \n")
    fut = asyncio.wrap_future(client.protocol.send_request(
        types.TEXT_DOCUMENT_INLINE_COMPLETION, inline_params(URI, 0, 4), msg_id="slow-1"))
    await until(lambda: fake.methods("complete"), what="complete sent")
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="slow-1"))
    with pytest.raises(JsonRpcException) as err:
        await asyncio.wait_for(fut, 10)
    assert err.value.code == types.LSPErrorCodes.RequestCancelled
    rid = fake.methods("complete")[-1]["requestId"]
    await until(lambda: rid in fake.cancelled, what="daemon-side cancel")


async def test_keystroke_cancels_stale_request(fake, sock, lsp_client):
    client = await lsp_client(sock)
    fake.delay = 30
    open_doc(client, URI, "a = \n")
    fut = asyncio.ensure_future(client.text_document_inline_completion_async(inline_params(URI, 0, 4)))
    await until(lambda: fake.methods("complete"), what="complete sent")
    change(client, URI, 2, (rng(0, 4, 0, 4), "1"))
    assert await asyncio.wait_for(fut, 10) is None  # stale: nothing to show
    rid = fake.methods("complete")[-1]["requestId"]
    await until(lambda: rid in fake.cancelled, what="daemon-side cancel")
    fake.delay = 0
    fresh = await client.text_document_inline_completion_async(inline_params(URI, 0, 5))
    assert fresh.items[0].insert_text == fake.proposal


async def test_debounce_drops_superseded_request(fake, sock, lsp_client):
    """With a debounce, a keystroke during the wait means the daemon is never asked."""
    client = await lsp_client(sock, options={"debounceMs": 300})
    open_doc(client, URI, "a = \n")
    fut = asyncio.ensure_future(client.text_document_inline_completion_async(inline_params(URI, 0, 4)))
    await asyncio.sleep(0.05)
    change(client, URI, 2, (rng(0, 4, 0, 4), "1"))
    assert await asyncio.wait_for(fut, 10) is None
    assert fake.methods("complete") == []


async def test_slow_daemon_gives_empty_result(fake, sock, lsp_client):
    client = await lsp_client(sock, options={"timeoutMs": 300})
    fake.delay = 20
    open_doc(client, URI, "a = \n")
    result = await asyncio.wait_for(
        client.text_document_inline_completion_async(inline_params(URI, 0, 4)), 10)
    assert result is None


def _record_apply_edit(client):
    applied = []

    @client.feature(types.WORKSPACE_APPLY_EDIT)
    def apply_edit(params: types.ApplyWorkspaceEditParams):
        applied.append(params)
        return types.ApplyWorkspaceEditResult(applied=True)

    return applied


async def test_code_action_and_rewrite_command(fake, sock, lsp_client):
    client = await lsp_client(sock)
    applied = _record_apply_edit(client)
    text = f"s = '{EMOJI}abc'\n"
    open_doc(client, URI, text)
    selection = rng(0, 7, 0, 10)  # "abc", after the 2-unit emoji
    actions = await raw_request(client, types.TEXT_DOCUMENT_CODE_ACTION, {
        "textDocument": {"uri": URI}, "range": client.protocol._converter.unstructure(selection),
        "context": {"diagnostics": []}}, "ca-1")
    assert len(actions) == 1 and actions[0]["title"] == "Rewrite selection with ngramd"
    assert actions[0]["kind"] == "refactor.rewrite"
    command = types.Command(**actions[0]["command"])
    assert command.command == "ngramd.rewriteSelection"
    result = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command=command.command, arguments=command.arguments))
    call = fake.methods("edit")[-1]
    assert (call["start"], call["end"]) == (6, 9) and call["instruction"]
    assert len(applied) == 1
    edit = applied[0].edit.document_changes[0]
    assert edit.text_document.uri == URI and edit.text_document.version == 1
    assert edit.edits[0].range == selection and edit.edits[0].new_text == "ABC"
    assert apply_lsp_edit(text, edit.edits[0].range, edit.edits[0].new_text) == f"s = '{EMOJI}ABC'\n"
    assert result["documentChanges"][0]["edits"][0]["newText"] == "ABC"

    # an empty selection offers nothing
    none = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=URI), range=rng(0, 1, 0, 1),
        context=types.CodeActionContext(diagnostics=[])))
    assert not none


async def test_a_rewrite_the_editor_refuses_to_apply_fails_with_its_reason(fake, sock, lsp_client):
    """An editor may refuse the server's workspace/applyEdit (its document changed in between):
    the command fails saying so, rather than returning as if the rewrite had been made."""
    client = await lsp_client(sock)

    @client.feature(types.WORKSPACE_APPLY_EDIT)
    def refuse(params: types.ApplyWorkspaceEditParams):
        return types.ApplyWorkspaceEditResult(applied=False, failure_reason="the document changed")

    open_doc(client, URI, "abc\n")
    with pytest.raises(JsonRpcException) as err:
        await client.workspace_execute_command_async(_rewrite_params(0, 3))
    assert err.value.code == types.LSPErrorCodes.RequestFailed
    assert "did not apply the rewrite (the document changed)" in err.value.message


async def test_code_action_resolve(fake, sock, lsp_client):
    from lsp_helpers import client_capabilities

    client = await lsp_client(sock, capabilities=client_capabilities(resolve_edit=True))
    open_doc(client, URI, "x = 1\ny = 2\n")
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=URI), range=rng(0, 0, 1, 5),
        context=types.CodeActionContext(diagnostics=[])))
    assert actions[0].command is None and actions[0].edit is None
    resolved = await client.code_action_resolve_async(actions[0])
    edit = resolved.edit.document_changes[0].edits[0]
    assert edit.new_text == "X = 1\nY = 2" and edit.range == rng(0, 0, 1, 5)


async def test_rewrite_errors_are_clear(fake, sock, lsp_client):
    client = await lsp_client(sock)
    _record_apply_edit(client)
    open_doc(client, URI, "x = 1\n")
    fake.edit_error = (rpc.METHOD_NOT_FOUND, "this engine does not support 'edit'")
    with pytest.raises(JsonRpcException) as err:
        await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="ngramd.rewriteSelection", arguments=[URI, {"start": {"line": 0, "character": 0},
                                                                "end": {"line": 0, "character": 1}}]))
    assert "does not support 'edit'" in err.value.message
    with pytest.raises(JsonRpcException) as err:
        await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="ngramd.rewriteSelection", arguments=[URI, "not a range"]))
    assert err.value.code == types.ErrorCodes.InvalidParams and "range" in err.value.message


async def test_prepare_rewrite_asks_the_daemon_to_prepare_the_range_and_never_fails_the_editor(
        fake, sock, lsp_client):
    """Sent when the editor starts asking for the instruction: the daemon gets the range in
    characters (the emoji is two UTF-16 units) and the document's version; a refusal, a
    stale version or a daemon error answers null, never an error the editor would show."""
    client = await lsp_client(sock)
    open_doc(client, URI, f"s = '{EMOJI}'\nt = 2\n")
    await until(lambda: URI in fake.docs)

    async def prepare(*args):
        return await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="ngramd.prepareRewrite", arguments=[URI, *args]))
    whole = {"start": {"line": 0, "character": 0}, "end": {"line": 1, "character": 5}}
    assert await prepare(whole, 1) == {"tokens": 14, "prefilled": 13, "reused": 0}
    assert fake.methods("prepareEdit") == [{"uri": URI, "start": 0, "end": 13, "version": 1}]
    assert await prepare(whole, 7) is None  # the range belongs to another version
    fake.prepare_error = (rpc.METHOD_NOT_FOUND, "this engine does not support 'prepareEdit'")
    assert await prepare(whole) is None
    assert len(fake.methods("prepareEdit")) == 2
    assert await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="ngramd.prepareRewrite", arguments=["file:///not/open.py", whole])) is None
    with pytest.raises(JsonRpcException) as err:
        await prepare("not a range")
    assert err.value.code == types.ErrorCodes.InvalidParams and "prepareRewrite: range" in err.value.message


async def test_prepare_rewrite_passes_on_the_instruction_typed_so_far(fake, sock, lsp_client):
    """Sent again when the user pauses typing the instruction: the daemon gets it (a blank one
    is left out: nothing typed yet); an instruction that is not a string is the plugin's bug."""
    client = await lsp_client(sock)
    open_doc(client, URI, "s = 1\nt = 2\n")
    await until(lambda: URI in fake.docs)

    async def prepare(*args):
        return await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="ngramd.prepareRewrite", arguments=[URI, *args]))
    whole = {"start": {"line": 0, "character": 0}, "end": {"line": 1, "character": 5}}
    assert await prepare(whole, 1, "rename s to") is not None
    assert await prepare(whole, None, "  ") is not None
    assert await prepare(whole, 1, None) is not None
    assert fake.methods("prepareEdit") == [
        {"uri": URI, "start": 0, "end": 11, "version": 1, "instruction": "rename s to"},
        {"uri": URI, "start": 0, "end": 11, "version": 1},
        {"uri": URI, "start": 0, "end": 11, "version": 1}]
    for bad in ([whole, 1, 5], [whole, 1, "x", "extra"]):
        with pytest.raises(JsonRpcException) as err:
            await prepare(*bad)
        assert err.value.code == types.ErrorCodes.InvalidParams and "prepareRewrite" in err.value.message
    assert len(fake.methods("prepareEdit")) == 3


async def test_prepare_completion_asks_the_daemon_to_prepare_the_cursor_and_never_fails_the_editor(
        fake, sock, lsp_client):
    """Sent when the editor's cursor rests: the daemon gets the offset in characters (the emoji
    is two UTF-16 units) and the document's version; a stale version, a refusal, a document
    not open or disabled completions answer null, never an error the editor would show."""
    client = await lsp_client(sock)
    open_doc(client, URI, f"s = '{EMOJI}'\nt = 2\n")
    await until(lambda: URI in fake.docs)

    async def prepare(*args, uri=URI):
        return await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="ngramd.prepareCompletion", arguments=[uri, *args]))
    line_one = {"line": 1, "character": 2}
    assert await prepare(line_one, 1) == {"tokens": 11, "prefilled": 10, "reused": 0}
    assert fake.methods("prepareComplete") == [{"uri": URI, "offset": 10, "version": 1}]
    assert await prepare({"line": 0, "character": 7}) == {"tokens": 7, "prefilled": 6, "reused": 0}  # after the emoji
    assert await prepare(line_one, 7) is None  # the position belongs to another version
    fake.prepare_error = (rpc.METHOD_NOT_FOUND, "this engine does not support 'prepareComplete'")
    assert await prepare(line_one) is None
    assert len(fake.methods("prepareComplete")) == 3
    assert await prepare(line_one, uri="file:///not/open.py") is None
    await client.workspace_execute_command_async(types.ExecuteCommandParams(command="ngramd.toggle",
                                                                            arguments=[False]))
    fake.prepare_error = None
    assert await prepare(line_one) is None and len(fake.methods("prepareComplete")) == 3
    for bad, message in [("not a position", "prepareCompletion: position"), (None, "position")]:
        with pytest.raises(JsonRpcException) as err:
            await prepare(bad)
        assert err.value.code == types.ErrorCodes.InvalidParams and message in err.value.message
    with pytest.raises(JsonRpcException) as err:
        await prepare(line_one, "2")
    assert err.value.code == types.ErrorCodes.InvalidParams and "version" in err.value.message
    with pytest.raises(JsonRpcException) as err:
        await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="ngramd.prepareCompletion", arguments=[URI]))
    assert err.value.code == types.ErrorCodes.InvalidParams and "takes [uri, position, version?]" in err.value.message


@pytest.mark.parametrize("command, place, method", [
    ("ngramd.prepareCompletion", {"line": 1, "character": 2}, "prepareComplete"),
    ("ngramd.prepareRewrite", {"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 5}},
     "prepareEdit")])
async def test_a_prepare_refused_as_out_of_sync_resends_the_text_and_is_asked_again(
        fake, sock, lsp_client, command, place, method):
    """Another editor sent its own unsaved text of the file: the daemon refuses this editor's
    versioned prepare (ContentModified, daemon/service/documents.py) until it sends its text again. The
    LSP re-sends the whole text and asks once more, as for a completion; the answer is the
    prepare's."""
    client = await lsp_client(sock)
    open_doc(client, URI, "s = 1\nt = 2\n")
    await until(lambda: URI in fake.docs)
    fake.docs[URI]["text"] = "s = 1\n# the other editor's\nt = 2\n"
    fake.out_of_sync.add(URI)
    prepared = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command=command, arguments=[URI, place, 1]))
    assert prepared is not None and prepared["tokens"] > 0
    assert len(fake.methods(method)) == 2  # refused, then asked again
    assert fake.docs[URI] == {"text": "s = 1\nt = 2\n", "version": 1}  # this editor's text re-sent
    assert [m for m, _ in fake.calls].count("open") == 2


async def test_where_the_cursor_rested_is_prepared_when_a_daemon_comes(fake, sock, lsp_client):
    """A prepare asked while no daemon runs (the one the server started still loading, or
    one stopped) does nothing, and it is sent once a daemon connects, after the document's
    open; again to a daemon started again. Not once the document changed since (the
    keystroke asks its own completion), nor after it closed."""
    from lsp_fake_daemon import FakeDaemon

    async def poll():
        assert (await poll_status(client, lambda s: s["connected"]))["connected"], "no daemon connected"

    async def stop(daemon):  # as `ngramd stop` does (told, the link does not back off as after a crash)
        await daemon.stop(announce=True)
        assert not (await poll_status(client, lambda s: not s["connected"]))["connected"], "loss not seen"

    client = await lsp_client(sock)
    open_doc(client, URI, f"s = '{EMOJI}'\nt = 2\n")
    await until(lambda: URI in fake.docs)
    assert fake.methods("prepareComplete") == []  # nothing rested yet: nothing sent on connection
    await stop(fake)
    assert await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="ngramd.prepareCompletion", arguments=[URI, {"line": 0, "character": 7}, 1])) is None

    want = {"uri": URI, "offset": 6, "version": 1}  # after the emoji (two UTF-16 units)
    for _ in range(2):  # a daemon that comes, then one started again
        daemon = await FakeDaemon(sock).start()
        try:
            await poll()
            await until(lambda: daemon.methods("prepareComplete"), what="the prepare on connection")
            assert daemon.methods("prepareComplete") == [want]
            calls = [m for m, _ in daemon.calls]
            assert calls.index("open") < calls.index("prepareComplete")
        finally:
            await stop(daemon)

    change(client, URI, 2, (rng(1, 4, 1, 5), "3"))  # typed since: the rest is stale
    daemon = await FakeDaemon(sock).start()
    try:
        await poll()
        await until(lambda: daemon.docs.get(URI, {}).get("version") == 2, what="the open")
        client.text_document_did_close(types.DidCloseTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=URI)))
        await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="ngramd.status", arguments=[{"spawn": False}]))
        assert daemon.methods("prepareComplete") == []
    finally:
        await stop(daemon)
    open_doc(client, URI, f"s = '{EMOJI}'\nt = 2\n")  # reopened at version 1: closing forgot the rest
    daemon = await FakeDaemon(sock).start()
    try:
        await poll()
        await until(lambda: URI in daemon.docs, what="the open")
        await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="ngramd.status", arguments=[{"spawn": False}]))
        assert daemon.methods("prepareComplete") == []
    finally:
        await stop(daemon)

    # the editor's setting turned off (sent as the server's prepareCompletions): nothing is prepared,
    # neither the place kept from before nor one asked now
    assert await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="ngramd.prepareCompletion", arguments=[URI, {"line": 0, "character": 7}, 1])) is None
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"ngramd": {"prepareCompletions": False}}))
    daemon = await FakeDaemon(sock).start()
    try:
        await poll()
        await until(lambda: URI in daemon.docs, what="the open")
        assert await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="ngramd.prepareCompletion", arguments=[URI, {"line": 0, "character": 7}, 1])) is None
        assert daemon.methods("prepareComplete") == []  # neither the kept place nor the one asked
    finally:
        await daemon.stop()


async def test_a_rewrite_cut_off_before_its_end_is_refused_not_applied(fake, sock, lsp_client):
    """An answer that stopped at its token limit lacks the selection's tail: applied, it
    would delete it. The editor gets an error that says so, and no edit."""
    client = await lsp_client(sock)
    applied = _record_apply_edit(client)
    open_doc(client, URI, "x = 1\ny = 2\n")
    fake.edit_stop_reason = "max_tokens"
    with pytest.raises(JsonRpcException) as err:
        await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="ngramd.rewriteSelection", arguments=[URI, {"start": {"line": 0, "character": 0},
                                                                "end": {"line": 1, "character": 5}}]))
    assert err.value.code == types.LSPErrorCodes.RequestFailed
    assert "did not finish" in err.value.message and "select less" in err.value.message
    assert applied == [] and len(fake.methods("edit")) == 1

    from lsp_helpers import client_capabilities

    fake.edit_stop_reason = "repetition"  # the daemon's loop guard ended it
    with pytest.raises(JsonRpcException) as err:
        await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="ngramd.rewriteSelection", arguments=[URI, {"start": {"line": 0, "character": 0},
                                                                "end": {"line": 1, "character": 5}}]))
    assert "did not finish" in err.value.message and "loop" in err.value.message
    assert "reword the instruction" in err.value.message and applied == []

    resolving = await lsp_client(sock, capabilities=client_capabilities(resolve_edit=True))
    open_doc(resolving, URI, "x = 1\ny = 2\n")
    actions = await resolving.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=URI), range=rng(0, 0, 1, 5),
        context=types.CodeActionContext(diagnostics=[])))
    with pytest.raises(JsonRpcException, match="did not finish"):
        await resolving.code_action_resolve_async(actions[0])


async def test_rewrite_of_a_document_the_daemon_lost_resends_it_once(fake, sock, lsp_client):
    """A daemon restarted meanwhile has no copy: the rewrite re-sends the text and goes on."""
    client = await lsp_client(sock)
    _record_apply_edit(client)
    open_doc(client, URI, "x = 1\n")
    await until(lambda: URI in fake.docs)
    fake.docs.pop(URI)
    await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="ngramd.rewriteSelection", arguments=[URI, {"start": {"line": 0, "character": 0},
                                                            "end": {"line": 0, "character": 5}}, "upper"]))
    assert fake.docs[URI]["text"] == "x = 1\n" and len(fake.methods("edit")) == 2


async def test_toggle_status_and_configuration(fake, sock, lsp_client):
    client = await lsp_client(sock)
    open_doc(client, URI, "a = \n")
    off = await client.workspace_execute_command_async(types.ExecuteCommandParams(command="ngramd.toggle"))
    assert off == {"enabled": False}
    assert await client.text_document_inline_completion_async(inline_params(URI, 0, 4)) is None
    assert fake.methods("complete") == []
    on = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="ngramd.toggle", arguments=[True]))
    assert on == {"enabled": True}

    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"ngramd": {"maxTokens": 7, "temperature": 0.5, "unknownKey": 1}}))
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"ngramd": {"maxTokens": "many"}}))  # refused, with a message
    await until(lambda: client.messages, what="error message")
    assert "maxTokens" in client.messages[-1].message
    await client.text_document_inline_completion_async(inline_params(URI, 0, 4))
    call = fake.methods("complete")[-1]
    assert call["maxTokens"] == 7 and call["temperature"] == 0.5
    status = await client.workspace_execute_command_async(types.ExecuteCommandParams(command="ngramd.status"))
    assert status["settings"]["maxTokens"] == 7 and status["counters"]["completions"] == 1
    assert status["daemon"]["daemon"]["server"] == "fake"
    assert status["torchLoaded"] is False  # the running LSP never imported torch

    # pull model: null settings make the server ask for its "ngramd" section
    client.set_configuration({"maxTokens": 5, "multiline": False}, section="ngramd")
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))

    async def max_tokens() -> int:
        s = await client.workspace_execute_command_async(types.ExecuteCommandParams(command="ngramd.status"))
        return s["settings"]["maxTokens"]

    for _ in range(100):
        if await max_tokens() == 5:
            break
        await asyncio.sleep(0.02)
    await client.text_document_inline_completion_async(inline_params(URI, 0, 4))
    call = fake.methods("complete")[-1]
    assert call["maxTokens"] == 5 and call["multiline"] is False

    # a new model is not forced on the shared daemon: the user is told how to switch
    shown = len(client.messages)
    assert shown == 1, "only the bad maxTokens was reported; other settings changes say nothing"
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"ngramd": {"model": "/models/other"}}))
    await until(lambda: len(client.messages) > shown, what="model notice")
    notice = client.messages[-1]
    assert notice.type == types.MessageType.Info
    assert "ngramd stop --socket" in notice.message and "/models/other" in notice.message
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"ngramd": {"model": None}}))  # cleared: back to the default model
    await until(lambda: len(client.messages) > shown + 1, what="second model notice")
    assert "model default" in client.messages[-1].message
    status = await client.workspace_execute_command_async(types.ExecuteCommandParams(command="ngramd.status"))
    assert status["settings"].get("model") is None


async def test_a_refused_setting_is_reported_and_the_others_apply(fake, sock, lsp_client):
    client = await lsp_client(sock, options={"temperature": 5e-5, "maxTokens": 9})
    await until(lambda: client.messages, what="the refusal")
    assert "'temperature'" in client.messages[-1].message
    assert client.messages[-1].type == types.MessageType.Error
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"ngramd": {"enable": False, "temperature": 1e-9, "timeoutMs": 900}}))
    await until(lambda: len(client.messages) == 2, what="the second refusal")
    status = await client.workspace_execute_command_async(types.ExecuteCommandParams(command="ngramd.status"))
    settings = status["settings"]
    assert (settings["maxTokens"], settings["enabled"], settings["timeoutMs"], settings["temperature"]) == (
        9, False, 900, 0.0)


async def test_workspace_folders_forwarded(fake, sock, lsp_client, tmp_path):
    client = await lsp_client(sock)
    await until(lambda: fake.methods("initialize"), what="initialize")
    client.workspace_did_change_workspace_folders(types.DidChangeWorkspaceFoldersParams(
        event=types.WorkspaceFoldersChangeEvent(
            added=[types.WorkspaceFolder(uri=tmp_path.as_uri(), name="t")], removed=[])))
    await until(lambda: fake.methods("workspaceFolders"), what="workspaceFolders")
    assert fake.methods("workspaceFolders")[-1] == {"added": [str(tmp_path)], "removed": []}


async def test_malformed_requests_get_errors_and_server_lives(fake, sock, lsp_client):
    client = await lsp_client(sock)
    open_doc(client, URI, "a = \n")
    async def raw(msg: dict):
        return await raw_request(client, msg["method"], msg["params"], msg["id"])

    # params missing a required field
    err = await raw({"jsonrpc": "2.0", "id": "bad-1", "method": "textDocument/inlineCompletion",
                     "params": {"textDocument": {"uri": URI}}})
    assert isinstance(err, JsonRpcException) and err.code == types.ErrorCodes.InvalidParams
    assert "position" in err.message
    # wrong types
    err = await raw({"jsonrpc": "2.0", "id": "bad-2", "method": "textDocument/completion",
                     "params": {"textDocument": {"uri": URI}, "position": {"line": "x", "character": 0}}})
    assert isinstance(err, JsonRpcException) and err.code == types.ErrorCodes.InvalidParams
    # a document the editor never opened
    with pytest.raises(JsonRpcException) as exc:
        await client.text_document_inline_completion_async(inline_params("file:///nope.py", 0, 0))
    assert exc.value.code == types.ErrorCodes.InvalidParams and "not open" in exc.value.message
    # an unknown method
    err = await raw({"jsonrpc": "2.0", "id": "bad-3", "method": "ngramd/nothing", "params": {}})
    assert isinstance(err, JsonRpcException) and err.code == types.ErrorCodes.MethodNotFound
    # bytes that are not JSON: a parse error reply, and the stream goes on
    body = b"{not json"
    client._server.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    # a position far out of range is clamped, not an error
    result = await client.text_document_inline_completion_async(inline_params(URI, 99, 99))
    assert result.items[0].range == rng(1, 0, 1, 0)
    assert fake.methods("complete")[-1]["offset"] == len("a = \n")


async def test_daemon_death_then_recovery(fake, sock, lsp_client):
    """The daemon goes away: at most one request fails (empty), and once a daemon is
    back every open buffer is re-sent and completion works again."""
    from lsp_fake_daemon import FakeDaemon

    client = await lsp_client(sock, options={"timeoutMs": 1000})
    open_doc(client, URI, "a = \n")
    other = URI.replace("a.py", "b.py")
    open_doc(client, other, "b = 2\n")
    first = await client.text_document_inline_completion_async(inline_params(URI, 0, 4))
    assert first.items
    await fake.stop()
    change(client, URI, 2, (rng(0, 4, 0, 4), "1"))  # while no daemon: dropped, re-sent later
    failed = await client.text_document_inline_completion_async(inline_params(URI, 0, 5))
    assert failed is None
    reborn = await FakeDaemon(sock, proposal=" + 2").start()
    try:
        again = await client.text_document_inline_completion_async(inline_params(URI, 0, 5))
        assert again.items[0].insert_text == " + 2"
        assert reborn.docs[URI] == {"text": "a = 1\n", "version": 2}
        assert reborn.docs[other]["text"] == "b = 2\n"
    finally:
        await reborn.stop()


async def test_no_torch_in_the_lsp_process(fake, sock):
    """``ngramd lsp`` must start without torch/transformers: check in a subprocess that
    imports the entry point and builds the server."""
    import subprocess
    import sys

    code = ("import sys, ngramd.lsp.main; ngramd.lsp.main.build_server('/tmp/x.sock'); "
            "import ngramd.daemon.cli.main; "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'transformers', 'numpy', 'gguf', 'accelerate'))))")
    out = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True,
                         text=True, timeout=60, cwd=str(Path(__file__).resolve().parents[2]))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


async def test_daemon_copy_out_of_sync_is_repaired(fake, sock, lsp_client):
    """A refused change, or a complete on a stale version, makes the LSP re-send the
    document from pygls' text; the completion still answers."""
    client = await lsp_client(sock)
    open_doc(client, URI, "a = 1\n")
    await until(lambda: fake.docs.get(URI), what="open")
    fake.docs.pop(URI)  # the daemon lost the document: the next change is refused
    change(client, URI, 2, (rng(0, 4, 0, 5), "2"))
    await until(lambda: fake.docs.get(URI, {}).get("text") == "a = 2\n", what="re-sent document")
    assert fake.docs[URI]["version"] == 2
    fake.docs[URI]["version"] = 99  # the daemon's copy claims another version
    result = await client.text_document_inline_completion_async(inline_params(URI, 0, 5))
    assert result.items[0].insert_text == fake.proposal
    assert [c["version"] for c in fake.methods("complete")] == [2, 2]  # refused, then retried
    assert fake.docs[URI] == {"text": "a = 2\n", "version": 2}


def _rewrite_params(line: int, end_character: int, *extra) -> types.ExecuteCommandParams:
    return types.ExecuteCommandParams(command="ngramd.rewriteSelection", arguments=[
        URI, {"start": {"line": line, "character": 0}, "end": {"line": line, "character": end_character}}, *extra])


@pytest.mark.parametrize("how", ["change", "close"])
async def test_rewrite_of_a_document_changed_meanwhile_is_refused_at_once(fake, sock, lsp_client, how):
    """The daemon rewrites the text of version 1; typing meanwhile makes it version 2.
    Applying that answer at version 2 would replace the wrong text (data loss): refused, and
    at once: the rewrite is cancelled in the daemon (which runs one request at a time), not
    waited for (the fake's would take 30 s, past the 10 s allowed here)."""
    client = await lsp_client(sock)
    applied = _record_apply_edit(client)
    text = "keep_me = 1\nrewrite_me = 2\n"
    open_doc(client, URI, text, version=1)
    await until(lambda: fake.docs.get(URI), what="open")
    fake.edit_delay = 30
    task = asyncio.ensure_future(client.workspace_execute_command_async(_rewrite_params(1, 14)))
    await until(lambda: fake.methods("edit"), what="edit sent")
    if how == "change":
        change(client, URI, 2, (rng(0, 0, 0, 0), "# header\n"))
    else:
        client.text_document_did_close(types.DidCloseTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=URI)))
    with pytest.raises(JsonRpcException) as err:
        await asyncio.wait_for(task, 10)
    said = "changed while ngramd rewrote it (version 1, now 2)" if how == "change" else "was closed while"
    assert err.value.code == types.LSPErrorCodes.ContentModified and said in err.value.message
    rid = fake.methods("edit")[-1]["requestId"]
    await until(lambda: rid in fake.cancelled, what="daemon-side cancel of the rewrite")
    assert applied == []


async def test_code_action_carries_its_version_and_no_instruction(fake, sock, lsp_client):
    """The action's arguments name the version its range belongs to (a later version is
    refused) and no instruction (a client may ask the user; the server has a default)."""
    from lsp_helpers import client_capabilities

    client = await lsp_client(sock, capabilities=client_capabilities(resolve_edit=True))
    _record_apply_edit(client)
    open_doc(client, URI, "x = 1\ny = 2\n", version=3)
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=URI), range=rng(0, 0, 0, 5),
        context=types.CodeActionContext(diagnostics=[])))
    assert actions[0].data["version"] == 3 and actions[0].data["instruction"] is None
    change(client, URI, 4, (rng(0, 0, 0, 0), "z = 0\n"))
    await until(lambda: fake.docs.get(URI, {}).get("version") == 4, what="change")
    with pytest.raises(JsonRpcException) as err:
        await client.code_action_resolve_async(actions[0])
    assert err.value.code == types.LSPErrorCodes.ContentModified and "version 3, now 4" in err.value.message
    assert fake.methods("edit") == []
    # the same with the command's arguments; the current version runs, with the default instruction
    with pytest.raises(JsonRpcException) as err:
        await client.workspace_execute_command_async(_rewrite_params(0, 5, None, 3))
    assert err.value.code == types.LSPErrorCodes.ContentModified
    await client.workspace_execute_command_async(_rewrite_params(0, 5, None, 4))
    assert fake.methods("edit")[-1]["instruction"] == "Rewrite this code."
    with pytest.raises(JsonRpcException) as err:
        await client.workspace_execute_command_async(_rewrite_params(0, 5, None, "4"))
    assert err.value.code == types.ErrorCodes.InvalidParams and "version" in err.value.message


async def test_code_action_only_filter_matches_whole_kinds(fake, sock, lsp_client):
    client = await lsp_client(sock)
    open_doc(client, URI, "x = 1\n")

    async def offered(only: list[str]) -> bool:
        return bool(await client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=URI), range=rng(0, 0, 0, 5),
            context=types.CodeActionContext(diagnostics=[], only=only))))

    assert await offered(["refactor"]) and await offered(["refactor.rewrite"])
    assert not await offered(["refactor.re"]) and not await offered(["quickfix"])


async def test_abandoned_rewrite_is_cancelled_in_the_daemon(fake, sock, lsp_client):
    """The daemon runs one request at a time: a rewrite the editor gave up on must stop there."""
    client = await lsp_client(sock)
    _record_apply_edit(client)
    open_doc(client, URI, "abc\n")
    await until(lambda: fake.docs.get(URI), what="open")
    fake.edit_delay = 30
    fut = asyncio.wrap_future(client.protocol.send_request(
        types.WORKSPACE_EXECUTE_COMMAND, _rewrite_params(0, 3), msg_id="rewrite-1"))
    await until(lambda: fake.methods("edit"), what="edit sent")
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="rewrite-1"))
    with pytest.raises(JsonRpcException):
        await asyncio.wait_for(fut, 10)
    rid = fake.methods("edit")[-1]["requestId"]
    await until(lambda: rid in fake.cancelled, what="daemon-side cancel of the rewrite")


async def test_completion_past_its_timeout_is_cancelled_in_the_daemon(fake, sock, lsp_client):
    client = await lsp_client(sock, options={"timeoutMs": 300})
    fake.delay = 20
    open_doc(client, URI, "a = \n")
    assert await asyncio.wait_for(client.text_document_inline_completion_async(inline_params(URI, 0, 4)), 10) is None
    rid = fake.methods("complete")[-1]["requestId"]
    await until(lambda: rid in fake.cancelled, what="daemon-side cancel after the timeout")


async def test_close_and_reopen_during_the_debounce_makes_the_request_stale(fake, sock, lsp_client):
    """Reopened at the same version with other text (a file reloaded): the request that
    waited in the debounce must not ask the daemon with the old cursor offset."""
    client = await lsp_client(sock, options={"debounceMs": 300})
    open_doc(client, URI, "x = 1234567890\n", version=1)
    await until(lambda: fake.docs.get(URI), what="open")
    fut = asyncio.ensure_future(client.text_document_inline_completion_async(inline_params(URI, 0, 14)))
    await asyncio.sleep(0.05)
    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=URI)))
    open_doc(client, URI, "y\n", version=1)
    assert await asyncio.wait_for(fut, 10) is None
    assert fake.methods("complete") == []


async def test_status_with_spawn_false_after_the_daemon_stops(fake, sock, lsp_client):
    """An editor's status poll ({spawn: false}) reports the stopped daemon and asks for
    nothing; a plain status still tries to reach the daemon; a poll finds a daemon
    started again."""
    client = await lsp_client(sock)
    await client.workspace_execute_command_async(types.ExecuteCommandParams(command="ngramd.status"))
    status = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="ngramd.status", arguments=[{"spawn": False}]))
    assert status["connected"] is True and status["daemon"]["daemon"]["server"] == "fake"
    await fake.stop(announce=True)  # `ngramd stop`
    status = await poll_status(client, lambda s: s["daemon"] == {"state": "stopped"})  # the loss seen
    assert status["connected"] is False and status["daemon"] == {"state": "stopped"}
    assert status["daemonsStarted"] == 0
    plain = await client.workspace_execute_command_async(types.ExecuteCommandParams(command="ngramd.status"))
    assert "cannot connect" in plain["daemon"]["error"]
    await fake.start()  # a daemon started by another editor: the poll finds it
    status = await poll_status(client, lambda s: s["connected"], tries=100)
    assert status["connected"] is True and status["daemon"]["daemon"]["server"] == "fake"


async def test_a_refused_completion_is_reported_once_and_not_resynced(fake, sock, lsp_client):
    """An INVALID_PARAMS that is not about the document (here a refused setting) is no
    reason to re-send the buffer and retry: each request is sent once, and the user is
    told once, not per keystroke. "document not open" still re-sends and retries."""
    client = await lsp_client(sock)
    open_doc(client, URI, "a = \n")
    await until(lambda: fake.docs.get(URI), what="open")
    fake.complete_error = (rpc.INVALID_PARAMS, "'temperature' must be >= 0, got 5e-05")
    for _ in range(3):
        assert await client.text_document_inline_completion_async(inline_params(URI, 0, 4)) is None
    assert len(fake.methods("complete")) == 3 and len(fake.methods("open")) == 1
    await until(lambda: client.messages, what="error message")
    status = await client.workspace_execute_command_async(types.ExecuteCommandParams(command="ngramd.status"))
    assert status["counters"]["failed"] == 3 and status["counters"]["resyncs"] == 0
    assert [m.message for m in client.messages] == [
        "ngramd: the daemon refused the completion: 'temperature' must be >= 0, got 5e-05"]

    fake.complete_error = None
    fake.docs.pop(URI)  # the daemon lost the document: "document not open", re-sent, retried
    result = await client.text_document_inline_completion_async(inline_params(URI, 0, 4))
    assert result.items[0].insert_text == fake.proposal
    assert len(fake.methods("complete")) == 5 and len(fake.methods("open")) == 2


async def test_only_refusals_of_the_users_settings_pop_up_each_once(fake, sock, lsp_client):
    """A window message only for what the user can fix (a refused setting, an unknown
    method), once per distinct refusal; a retry still stale (the user typed while the
    document was re-sent) counts as stale and "busy" is only logged, though both
    messages carry numbers that change per request."""
    client = await lsp_client(sock)
    open_doc(client, URI, "a = \n")
    await until(lambda: fake.docs.get(URI), what="open")

    async def complete_refused(code: int, message: str) -> None:
        fake.complete_error = (code, message)
        assert await client.text_document_inline_completion_async(inline_params(URI, 0, 4)) is None

    for n in range(3):  # each request is re-sent once after CONTENT_MODIFIED, then given up
        await complete_refused(rpc.CONTENT_MODIFIED, f"version {n} is not the document's ({n + 1})")
    for n in range(2):
        await complete_refused(rpc.INTERNAL_ERROR, f"busy: {n + 3} requests queued")
    setting = "'temperature' must be >= 0, got 5e-05"
    for _ in range(3):
        await complete_refused(rpc.INVALID_PARAMS, setting)
    await complete_refused(rpc.METHOD_NOT_FOUND, "unknown method 'complete'")
    await complete_refused(rpc.INVALID_PARAMS, setting)  # shown before: not again
    await complete_refused(rpc.METHOD_NOT_FOUND, "unknown method 'complete'")
    await until(lambda: len(client.messages) >= 2, what="two messages")
    status = await client.workspace_execute_command_async(types.ExecuteCommandParams(command="ngramd.status"))
    # messages arrive in order: one for a stale or busy refusal would come first
    assert [m.message for m in client.messages] == [
        f"ngramd: the daemon refused the completion: {setting}",
        "ngramd: the daemon refused the completion: unknown method 'complete'"]
    assert all(m.type == types.MessageType.Error for m in client.messages)
    assert len(fake.methods("complete")) == 6 + 2 + 6
    assert status["counters"]["stale"] == 3 and status["counters"]["failed"] == 2 + 6


async def test_requests_with_another_uri_spelling_reach_the_daemons_document(fake, sock, lsp_client):
    """pygls finds `a b.py` under `a%20b.py` too; the daemon knows only the didOpen
    spelling, which every message to it must use (change, complete, edit, close)."""
    opened = "file:///tmp/ngl-doc/a%20b.py"
    other = "file:///tmp/ngl-doc/a b.py"
    client = await lsp_client(sock)
    _record_apply_edit(client)
    open_doc(client, opened, "a = \n")
    change(client, other, 2, (rng(0, 4, 0, 4), "1"))
    await until(lambda: fake.docs.get(opened, {}).get("version") == 2, what="change")
    result = await client.text_document_inline_completion_async(inline_params(other, 0, 5))
    assert result.items[0].insert_text == fake.proposal
    assert [c["uri"] for c in fake.methods("complete")] == [opened]
    edit = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="ngramd.rewriteSelection", arguments=[
            other, {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 5}}, None, 2]))
    assert edit is not None and [c["uri"] for c in fake.methods("edit")] == [opened]
    assert len(fake.methods("open")) == 1  # nothing re-sent: the daemon's copy was right
    client.text_document_did_close(types.DidCloseTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=other)))
    await until(lambda: fake.methods("close"), what="close")
    assert fake.methods("close") == [{"uri": opened}] and opened not in fake.docs


async def test_a_document_longer_than_the_daemon_reads_is_not_sent(sock, lsp_client):
    """The daemon closes a connection that sends a message over its limit (initialize says it):
    the LSP never sends one, so its other documents keep their connection and completions."""
    from lsp_fake_daemon import FakeDaemon

    fake = FakeDaemon(str(sock))
    fake.max_message_bytes = 8192
    await fake.start()
    try:
        client = await lsp_client(sock)
        small, big = "file:///tmp/small.py", "file:///tmp/big.py"
        open_doc(client, small, "def f():\n    ")
        await until(lambda: small in fake.docs, what="the small document")
        open_doc(client, big, "x = 1\n" * 5000)
        open_doc(client, "file:///tmp/after.py", "y = 2\n")
        await until(lambda: "file:///tmp/after.py" in fake.docs, what="the document after the big one")
        result = await client.text_document_inline_completion_async(inline_params(small, 1, 4))
        assert result is not None and result.items, result
        big_result = await client.text_document_inline_completion_async(inline_params(big, 1, 0))
        assert big_result is None or not big_result.items
        assert big not in fake.docs and fake.connections == 1  # never sent, never reconnected
    finally:
        await fake.stop()


async def test_a_document_too_large_for_the_daemon_is_skipped_told_once_and_resumed(sock, lsp_client):
    """A buffer over the daemon's limit is not sent at all while it stays so: its keystrokes
    send nothing (no change refused as "not open", no re-packed open), its completions answer
    nothing at once (no error popping up per keystroke), a rewrite of it says why it fails,
    and the user is told once. Shrunk under the limit, it is sent whole and served again."""
    from lsp_fake_daemon import FakeDaemon

    fake = FakeDaemon(str(sock))
    fake.max_message_bytes = 8192
    await fake.start()
    try:
        client = await lsp_client(sock)
        _record_apply_edit(client)
        small, big = "file:///tmp/small.py", "file:///tmp/big.py"
        big_text = "x = 1\n" * 2000
        open_doc(client, small, "def f():\n    ")
        await until(lambda: small in fake.docs, what="the connection")  # its limit is known from here
        open_doc(client, big, big_text)
        for version in range(2, 6):  # keystrokes, each followed by a completion, plain and after a menu selection
            change(client, big, version, (rng(0, 0, 0, 0), "é"))
            assert await client.text_document_inline_completion_async(inline_params(big, 1, 0)) is None
            selected = types.SelectedCompletionInfo(range=rng(1, 0, 1, 1), text="y" * version)
            assert await client.text_document_inline_completion_async(
                inline_params(big, 1, 1, selected=selected)) is None
            completion = await client.text_document_completion_async(types.CompletionParams(
                text_document=types.TextDocumentIdentifier(uri=big), position=pos(1, 1)))
            assert not completion.items
        with pytest.raises(JsonRpcException) as err:
            await client.workspace_execute_command_async(types.ExecuteCommandParams(
                command="ngramd.rewriteSelection", arguments=[big, {"start": {"line": 1, "character": 0},
                                                                    "end": {"line": 1, "character": 5}}]))
        assert "longer than the daemon reads" in err.value.message, err.value.message
        assert "--max-message-bytes" in err.value.message
        actions = await client.text_document_code_action_async(types.CodeActionParams(  # nor offered
            text_document=types.TextDocumentIdentifier(uri=big), range=rng(1, 0, 1, 5),
            context=types.CodeActionContext(diagnostics=[])))
        assert not actions
        change(client, small, 2, (rng(1, 4, 1, 4), "r"))  # after the big one's: a barrier
        await until(lambda: fake.docs.get(small, {}).get("version") == 2, what="the small document's change")
        result = await client.text_document_inline_completion_async(inline_params(small, 1, 5))
        assert result is not None and result.items, result
        assert not [p for m, p in fake.calls if isinstance(p, dict) and p.get("uri") == big]
        await until(lambda: client.messages, what="the notice")
        assert [(m.type, m.message) for m in client.messages] == [(types.MessageType.Warning, (
            f"ngramd: {big} is {len(big_text.encode()):,} bytes, longer than the daemon reads in one "
            "message (8,192 bytes), so it gets no completions or rewrites; a daemon started with a "
            "larger `ngramd serve --max-message-bytes` takes it"))]
        status = await client.workspace_execute_command_async(types.ExecuteCommandParams(command="ngramd.status"))
        assert status["counters"]["resyncs"] == 0 and status["counters"]["failed"] == 0

        change(client, big, 6, (rng(100, 0, 2000, 0), ""))  # shrunk under the limit: sent whole
        expected = "éééé" + "x = 1\n" * 100
        await until(lambda: fake.docs.get(big, {}).get("text") == expected, what="the big document, whole")
        assert fake.docs[big]["version"] == 6 and not fake.methods("change")[1:]
        change(client, big, 7, (rng(0, 0, 0, 0), "z"))  # then keystrokes as usual
        await until(lambda: fake.docs[big]["version"] == 7, what="a change")
        assert fake.docs[big]["text"] == "z" + expected
        actions = await client.text_document_code_action_async(types.CodeActionParams(  # offered again
            text_document=types.TextDocumentIdentifier(uri=big), range=rng(1, 0, 1, 5),
            context=types.CodeActionContext(diagnostics=[])))
        assert actions and actions[0].title
        # at the line's end: mid-line, the fake's plain prompt would rightly offer nothing (lsp/items.py)
        result = await client.text_document_inline_completion_async(inline_params(big, 1, 5))
        assert result is not None and result.items, result

        change(client, big, 8, (rng(0, 0, 0, 0), "x = 1\n" * 2000))  # too large again: dropped there
        await until(lambda: big not in fake.docs, what="the daemon's copy closed")
        assert await client.text_document_inline_completion_async(inline_params(big, 1, 0)) is None
        assert len(client.messages) == 1 and fake.connections == 1  # told once per document
    finally:
        await fake.stop()


@pytest.mark.parametrize("unit", ["a", "é", "漢", EMOJI, "\ud800"])
def test_message_fits_counts_utf8_bytes_without_packing_far_from_the_limit(unit):
    """message_fits never lets through a message the daemon cannot read, and refuses one that
    fits only within PACKING_SLACK of the limit (lone surrogates are sent as U+FFFD)."""
    from ngramd.lsp.daemon_client import replace_lone_surrogates
    from ngramd.lsp.daemon_limits import PACKING_SLACK, message_fits

    for n in (10, 100, 1000):
        params = {"uri": "file:///tmp/a.py", "text": unit * n, "version": 3, "languageId": "python"}
        size = len(rpc.pack_request(2**40, "open", replace_lone_surrogates(params)))
        for limit in range(size - 2 * PACKING_SLACK, size + 2 * PACKING_SLACK):
            fits = message_fits("open", params, "text", limit)
            assert size <= limit if fits else size > limit - PACKING_SLACK, (n, limit)
        assert message_fits("open", params, "text", size + PACKING_SLACK)
        assert not message_fits("open", params, "text", size - 1)


async def test_a_document_over_the_daemons_character_limit_is_skipped_and_resumed_in_step(sock, lsp_client):
    """The daemon keeps documents up to maxDocumentChars (initialize says it). A buffer that
    grows past it is dropped there and not sent; shrunk back, it is sent whole: the daemon's
    copy never falls behind the editor's under the same version."""
    from lsp_fake_daemon import FakeDaemon

    fake = FakeDaemon(str(sock))
    fake.max_document_chars = 2000
    await fake.start()
    try:
        client = await lsp_client(sock)
        uri = "file:///tmp/grows.py"
        text = "x = 1\n" * 300  # 1,800 characters
        open_doc(client, uri, text)
        await until(lambda: uri in fake.docs, what="the document")
        change(client, uri, 2, (rng(0, 0, 0, 0), "y = 2\n" * 50))  # 2,100: over the limit
        await until(lambda: uri not in fake.docs, what="the daemon's copy dropped")
        assert await client.text_document_inline_completion_async(inline_params(uri, 1, 0)) is None
        change(client, uri, 3, (rng(0, 0, 40, 0), ""))  # 1,860: under it again
        await until(lambda: fake.docs.get(uri, {}).get("version") == 3, what="the document, whole")
        assert fake.docs[uri]["text"] == "y = 2\n" * 10 + text
        await until(lambda: client.messages, what="the notice")
        assert "more than the daemon keeps in a document (2,000)" in client.messages[0].message
    finally:
        await fake.stop()


async def test_a_change_refused_with_its_resync_is_followed_by_a_whole_document(fake, sock, lsp_client):
    """The daemon refused a change and the re-sync after it (its copy is older): the next change
    goes as an `open` of the whole text, never as an edit of the copy the daemon kept."""
    client = await lsp_client(sock)
    uri = "file:///tmp/refused.py"
    open_doc(client, uri, "a = 1\nb = 2\n")
    await until(lambda: uri in fake.docs, what="the document")
    fake.refuse_text = "REFUSE"
    change(client, uri, 2, (rng(1, 0, 1, 0), "REFUSE\n"))
    await until(lambda: len(fake.methods("open")) == 2, what="the re-sync")
    await asyncio.sleep(0.2)  # its refusal comes back
    assert fake.docs[uri] == {"text": "a = 1\nb = 2\n", "version": 1}  # the daemon kept its copy
    fake.refuse_text = None
    change(client, uri, 3, (rng(1, 0, 2, 0), "c = 3\n"))  # replaces the REFUSE line
    await until(lambda: fake.docs[uri]["version"] == 3, what="the next change")
    assert fake.docs[uri]["text"] == "a = 1\nc = 3\nb = 2\n"
    change(client, uri, 4, (rng(0, 0, 0, 0), "#"))  # in step again: edits as usual
    await until(lambda: fake.docs[uri]["version"] == 4, what="an edit")
    assert fake.docs[uri]["text"] == "#a = 1\nc = 3\nb = 2\n" and fake.methods("change")[-1]["version"] == 4
