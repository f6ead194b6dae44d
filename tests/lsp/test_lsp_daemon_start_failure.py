"""``ngramd lsp`` (pytest-lsp spawns it) whose daemon cannot start: the editor is told why.

The real ``ngramd serve`` is started by the LSP with a model path that names nothing: it
exits at once, saying why in its log (it imports torch first: a few seconds).
"""

from __future__ import annotations

from lsprotocol import types

from lsp_helpers import client_capabilities, open_doc, until

URI = "file:///tmp/ngl-doc/a.py"


async def test_a_daemon_that_cannot_start_is_shown_once_with_its_reason(sock, lsp_client):
    """A model path that does not exist: one error message with the daemon's own reason (its
    last words in the log), not one per keystroke; completions answer empty lists meanwhile and
    the server goes on serving."""
    missing = sock + ".no-such-model"
    client = await lsp_client(sock, spawn=True, model=missing, options={"timeoutMs": 120000},
                              capabilities=client_capabilities(inline=False))
    open_doc(client, URI, "def f():\n    ret")

    async def complete() -> types.CompletionList:
        return await client.text_document_completion_async(types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri=URI), position=types.Position(line=1, character=7)))

    assert not (await complete()).items
    errors = await until(lambda: [m for m in client.messages if m.type == types.MessageType.Error],
                         what="the error message")
    assert "did not start" in errors[0].message and sock + ".log" in errors[0].message
    assert missing in errors[0].message  # the daemon's own words, from its log
    for _ in range(3):  # keystrokes during the back-off: no daemon started, nothing shown again
        assert not (await complete()).items
    status = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="ngramd.status", arguments=[{"spawn": False}]))
    assert status["daemonsStarted"] == 1 and status["counters"]["failed"] == 4
    assert [m for m in client.messages if m.type == types.MessageType.Error] == errors[:1]
