"""``ngramd lsp`` end to end (against the fake daemon) on unusual input: lone surrogates,
positions past the text, out-of-range edits, documents closed mid-request, workspace
folder changes. Each test pins a defect that once made the server drop a document or a
request without saying so."""

from __future__ import annotations

import asyncio

from lsprotocol import types

from lsp_helpers import change, inline_params, open_doc, rng, until

URI = "file:///tmp/ngl-doc/odd.py"
LONE = "\ud800"  # a lone high surrogate: valid in a JSON string ("\ud800"), not in UTF-8


async def test_lone_surrogates_are_replaced_and_positions_stay_right(fake, sock, lsp_client):
    """A lone surrogate (one UTF-16 unit) reaches the daemon as U+FFFD (one UTF-16 unit,
    one code point), so every offset and position stays the same, and completions go on."""
    client = await lsp_client(sock)
    open_doc(client, URI, f"s = '{LONE}'\nx = \n")
    await until(lambda: fake.docs.get(URI), what="open of a document with a lone surrogate")
    assert fake.docs[URI]["text"] == "s = '\ufffd'\nx = \n"

    # typed after the surrogate, and a new surrogate typed: offsets as in the editor's text
    change(client, URI, 2, (rng(0, 6, 0, 6), "ab"), (rng(1, 4, 1, 4), f"{LONE}y"))
    await until(lambda: fake.docs[URI]["version"] == 2, what="change with a lone surrogate")
    assert fake.docs[URI]["text"] == "s = '\ufffdab'\nx = \ufffdy\n"

    result = await client.text_document_inline_completion_async(inline_params(URI, 1, 6))
    assert [i.insert_text for i in result.items] == [fake.proposal]
    assert result.items[0].range == rng(1, 6, 1, 6)
    assert fake.methods("complete")[-1]["offset"] == len("s = '\ufffdab'\nx = \ufffdy")


async def test_lone_surrogate_in_a_selected_completion_text(fake, sock, lsp_client):
    """The stateless ``text`` sent for a menu selection is encoded the same way."""
    client = await lsp_client(sock)
    open_doc(client, URI, "a = b\n")
    selected = types.SelectedCompletionInfo(range=rng(0, 4, 0, 5), text=f"b{LONE}")
    result = await client.text_document_inline_completion_async(inline_params(URI, 0, 5, selected=selected))
    assert [i.insert_text for i in result.items] == [f"b{LONE}" + fake.proposal]
    call = fake.methods("complete")[-1]
    assert call["text"] == "a = b\ufffd\n" and call["offset"] == len("a = b\ufffd")


async def test_folders_changed_while_connecting_reach_the_daemon(fake, sock, lsp_client, tmp_path):
    """A folder added (and one removed) while the daemon's ``initialize`` is in flight:
    the folder list went out before, and ``workspaceFolders`` was dropped (not ready),
    so the daemon never indexed the new folder."""
    answer = fake._handle

    async def slow_initialize(method, params):
        if method == "initialize":
            await asyncio.sleep(0.5)
        return await answer(method, params)

    fake._handle = slow_initialize
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    client = await lsp_client(sock, root=str(old))
    client.workspace_did_change_workspace_folders(types.DidChangeWorkspaceFoldersParams(
        event=types.WorkspaceFoldersChangeEvent(added=[types.WorkspaceFolder(uri=new.as_uri(), name="new")],
                                                removed=[types.WorkspaceFolder(uri=old.as_uri(), name="old")])))
    status = await client.workspace_execute_command_async(types.ExecuteCommandParams(command="ngramd.status"))
    assert status["connected"] is True
    known = set(fake.methods("initialize")[-1]["workspaceFolders"])
    for change_ in fake.methods("workspaceFolders"):
        known = (known | set(change_["added"])) - set(change_["removed"])
    assert known == {str(new)}
