"""``ngramd lsp`` end to end with the real daemon (``ngramd serve --model tiny``).

The LSP's answers are checked against the daemon's direct answer for the same text
(greedy decoding is deterministic): inline completion (range and text), the
completion fallback, a rewrite, cancellation, recovery after the daemon is killed,
and Debian's neovim as a real LSP client.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from ngramd.daemon.protocol.client import Client, wait_ready
from ngramd.daemon.protocol.requests import FINISHED_EDIT_STOPS
from lsp_helpers import change, client_capabilities, inline_params, open_doc, rng, until

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]
SOURCE = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    ret"
MAX_TOKENS = 12


def direct(sock: str, text: str, offset: int, uri: str, **params) -> dict:
    """The daemon's own answer for ``text`` (stateless ``complete`` with ``text``).

    Same ``uri`` as the LSP's document: the daemon's state for that document (its
    buffer in the index, its KV cache) is what the LSP's request sees too, and the
    edit prompt names the file, so another uri is another prompt."""
    with Client(sock, timeout=120) as c:
        return c.call("complete", {"uri": uri, "text": text, "offset": offset,
                                   "maxTokens": MAX_TOKENS, **params})


def shutdown_daemon(sock: str) -> None:
    try:
        with Client(sock, timeout=10) as c:
            c.call("shutdown")
    except Exception:
        pass


@pytest.fixture(scope="module")
def daemon_sock():
    d = tempfile.mkdtemp(prefix="ngr-", dir="/tmp")
    sock = os.path.join(d, "d.sock")
    log = open(os.path.join(d, "serve.log"), "w")
    proc = subprocess.Popen([sys.executable, "-m", "ngramd.daemon.cli", "serve", "--model", "tiny",
                             "--device", "cpu", "--socket", sock],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(REPO))
    try:
        wait_ready(sock, timeout=180, proc=proc)
    except Exception:
        proc.kill()
        log.close()
        pytest.fail("the tiny daemon did not start:\n" + Path(d, "serve.log").read_text()[-3000:])
    yield sock
    shutdown_daemon(sock)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()
    shutil.rmtree(d, ignore_errors=True)


URI = "file:///tmp/ngr-doc/m.py"


async def test_inline_completion_matches_daemon(daemon_sock, lsp_client):
    client = await lsp_client(daemon_sock, options={"maxTokens": MAX_TOKENS})
    text = SOURCE.replace("def sub", "def sub\u00e9")  # a non-ASCII name: é is 1 unit
    open_doc(client, URI, "x = '\U0001F600'\n" + text)  # a leading emoji line (2 units)
    # edit incrementally: delete the emoji line, then type "urn" after "ret"
    change(client, URI, 2, (rng(0, 0, 1, 0), ""))
    last = text.split("\n")[-1]
    change(client, URI, 3, (rng(5, len(last), 5, len(last)), "urn"))
    text += "urn"
    result = await client.text_document_inline_completion_async(inline_params(URI, 5, len(last) + 3))
    want = await asyncio.to_thread(direct, daemon_sock, text, len(text), URI, multiline=True)
    assert want["text"].strip(), "the tiny model proposes something"
    assert [i.insert_text for i in result.items] == [want["text"]]
    cursor = types.Position(line=5, character=len(last) + 3)
    assert result.items[0].range == types.Range(start=cursor, end=cursor)

    # the daemon holds exactly the editor's text: a stateful complete (no text) agrees
    with Client(daemon_sock, timeout=120) as c:
        stateful = c.call("complete", {"uri": URI, "offset": len(text), "maxTokens": MAX_TOKENS,
                                       "multiline": True})
    assert stateful["text"] == want["text"] and stateful["prompt"] == want["prompt"]


async def test_two_editors_with_different_unsaved_texts_of_one_file_each_complete_their_own(
        daemon_sock, lsp_client):
    """The daemon holds one text per file and each editor numbers its versions its own way.
    Editor A types; editor B asks (its copy is refused as stale, so it sends its text again);
    A types on: the daemon must not apply A's edit to B's text, and A's suggestion is the
    daemon's answer for A's text."""
    uri = "file:///tmp/ngr-doc/two-editors.py"
    a = await lsp_client(daemon_sock, options={"maxTokens": MAX_TOKENS})
    b = await lsp_client(daemon_sock, options={"maxTokens": MAX_TOKENS})
    open_doc(a, uri, SOURCE)
    open_doc(b, uri, SOURCE)
    last = SOURCE.split("\n")[-1]
    change(a, uri, 2, (rng(0, 0, 0, 0), "# A\n"))
    await b.text_document_inline_completion_async(inline_params(uri, 5, len(last)))
    change(a, uri, 3, (rng(1, 0, 1, 0), "#"))
    a_text = "# A\n#" + SOURCE
    result = await a.text_document_inline_completion_async(inline_params(uri, 6, len(last)))
    want = await asyncio.to_thread(direct, daemon_sock, a_text, len(a_text), uri, multiline=True)
    assert [i.insert_text for i in result.items] == [want["text"]]
    with Client(daemon_sock, timeout=120) as c:
        (doc,) = [d for d in c.call("status")["documents"]["list"] if d["uri"] == uri]
    assert doc["chars"] == len(a_text)


async def test_a_prepare_from_an_editor_whose_text_the_daemon_no_longer_holds_is_resynced(
        daemon_sock, lsp_client):
    """Editor A types into a file B has open too: the daemon holds A's text and refuses B's
    versioned prepares as out of sync. B's cursor rests: the LSP re-sends B's text and asks
    again, so the daemon prepares B's own text."""
    uri = "file:///tmp/ngr-doc/two-editors-prepare.py"
    a = await lsp_client(daemon_sock, options={"maxTokens": MAX_TOKENS})
    b = await lsp_client(daemon_sock, options={"maxTokens": MAX_TOKENS})
    for client in (a, b):  # connected first: a prepare only waits 1 s for a connection (PROBE_S)
        await client.workspace_execute_command_async(types.ExecuteCommandParams(command="ngramd.status"))
    open_doc(a, uri, SOURCE)
    open_doc(b, uri, SOURCE)
    # the two editors' connections are not ordered with each other: B's open landing after A's
    # change would put B's text back, and A's change would never show
    await until(lambda: _document_holders(daemon_sock, uri) == 2, what="both editors' opens")
    change(a, uri, 2, (rng(0, 0, 0, 0), "# A\n"))
    await until(lambda: _document_chars(daemon_sock, uri) == len(SOURCE) + 4, what="A's change")
    last = SOURCE.split("\n")[-1]
    prepared = await b.workspace_execute_command_async(types.ExecuteCommandParams(
        command="ngramd.prepareCompletion", arguments=[uri, {"line": 5, "character": len(last)}, 1]))
    assert prepared is not None and prepared["tokens"] > 10
    assert _document_chars(daemon_sock, uri) == len(SOURCE)  # B's text, re-sent


def _document_chars(sock: str, uri: str) -> int | None:
    """How long the daemon's copy of ``uri`` is (None: not open)."""
    return _document_field(sock, uri, "chars")


def _document_holders(sock: str, uri: str) -> int | None:
    """How many connections hold ``uri`` open in the daemon (None: not open)."""
    return _document_field(sock, uri, "holders")


def _document_field(sock: str, uri: str, field: str) -> int | None:
    with Client(sock, timeout=120) as c:
        docs = [d for d in c.call("status")["documents"]["list"] if d["uri"] == uri]
    return docs[0][field] if docs else None


async def test_completion_fallback_matches_daemon(daemon_sock, lsp_client):
    client = await lsp_client(daemon_sock, options={"maxTokens": MAX_TOKENS},
                              capabilities=client_capabilities(inline=False))
    open_doc(client, URI, SOURCE)
    result = await client.text_document_completion_async(types.CompletionParams(
        text_document=types.TextDocumentIdentifier(uri=URI), position=types.Position(line=5, character=7)))
    want = await asyncio.to_thread(direct, daemon_sock, SOURCE, len(SOURCE), URI, multiline=True)
    first = want["text"].split("\n")[0]
    assert first.strip(), "the tiny model proposes something on the cursor's line"
    assert [i.label for i in result.items] == ["ret" + first]
    assert result.items[0].documentation == "ret" + want["text"]  # a string: the editor named no format


async def test_a_completion_where_the_cursor_rested_is_prepared_and_answers_as_the_daemon(daemon_sock, lsp_client):
    """ngramd.prepareCompletion where the cursor rests, then the user types: the suggestion is the
    daemon's own answer for the text, and its request prefilled only a few tokens (the typing)."""
    uri = "file:///tmp/ngr-doc/prepared.py"
    client = await lsp_client(daemon_sock, options={"maxTokens": MAX_TOKENS})
    open_doc(client, uri, SOURCE)  # a document no other test uses: its KV cache is cold
    last = SOURCE.split("\n")[-1]
    # connected first: a prepare never starts a connection, it waits for one 1 s at most (PROBE_S),
    # which a loaded machine may not meet
    await client.workspace_execute_command_async(types.ExecuteCommandParams(command="ngramd.status"))
    prepared = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="ngramd.prepareCompletion", arguments=[uri, {"line": 5, "character": len(last)}, 1]))
    assert prepared is not None and prepared["prefilled"] == prepared["tokens"] - 1 > 10
    change(client, uri, 2, (rng(5, len(last), 5, len(last)), "urn"))
    text = SOURCE + "urn"
    with Client(daemon_sock, timeout=120) as c:
        before = c.call("status")["generation"]["prefill_tokens"]
    result = await client.text_document_inline_completion_async(inline_params(uri, 5, len(last) + 3))
    with Client(daemon_sock, timeout=120) as c:
        prefilled = c.call("status")["generation"]["prefill_tokens"] - before
    assert prefilled <= 8  # "urn" and the back-off before it, not the document's tokens again
    want = await asyncio.to_thread(direct, daemon_sock, text, len(text), uri, multiline=True)
    assert [i.insert_text for i in result.items] == [want["text"]]


async def test_rewrite_uses_daemon_edit(daemon_sock, lsp_client):
    client = await lsp_client(daemon_sock)
    applied = []

    @client.feature(types.WORKSPACE_APPLY_EDIT)
    def apply_edit(params):
        applied.append(params)
        return types.ApplyWorkspaceEditResult(applied=True)

    open_doc(client, URI, SOURCE)
    selection = rng(0, 0, 1, 16)
    with Client(daemon_sock, timeout=120) as c:
        want = c.call("edit", {"uri": URI, "text": SOURCE, "start": 0,
                               "end": len("def add(a, b):\n    return a + b"),
                               "instruction": "Rename add to plus."})
    params = types.ExecuteCommandParams(command="ngramd.rewriteSelection", arguments=[
        URI, client.protocol._converter.unstructure(selection), "Rename add to plus."])
    if want["stop_reason"] in FINISHED_EDIT_STOPS:  # a model that finishes it: applied as the daemon wrote it
        result = await client.workspace_execute_command_async(params)
        edit = result["documentChanges"][0]["edits"][0]
        assert edit["newText"] == want["text"]
        assert applied and applied[0].edit.document_changes[0].edits[0].new_text == want["text"]
    else:  # the tiny model (random weights) never closes its answer: refused, never applied
        with pytest.raises(JsonRpcException) as err:
            await client.workspace_execute_command_async(params)
        assert want["stop_reason"] in ("max_tokens", "repetition") and "did not finish" in err.value.message
        assert f"after {len(want['token_ids'])} tokens" in err.value.message and not applied


async def test_cancel_reaches_daemon(daemon_sock, lsp_client):
    client = await lsp_client(daemon_sock, options={"maxTokens": 1024})
    open_doc(client, URI, SOURCE)
    with Client(daemon_sock) as c:
        before = c.call("status")["requests"]
    fut = asyncio.wrap_future(client.protocol.send_request(
        types.TEXT_DOCUMENT_INLINE_COMPLETION, inline_params(URI, 5, 7), msg_id="long-1"))
    await asyncio.sleep(0.5)
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="long-1"))
    with pytest.raises(JsonRpcException) as err:
        await asyncio.wait_for(fut, 30)
    assert err.value.code == types.LSPErrorCodes.RequestCancelled

    def counts() -> dict:
        with Client(daemon_sock) as c:
            return c.call("status")["requests"]

    # the daemon's worker ends the job as cancelled instead of running it to 1024 tokens
    await until(lambda: counts().get("cancelled", 0) > before.get("cancelled", 0),
                timeout=30, what="the daemon's cancelled count")
    assert counts().get("done", 0) == before.get("done", 0)


async def test_daemon_killed_and_restarted(lsp_client):
    """The LSP starts its own daemon, we kill it, and the LSP restarts it: the next
    completion works (at most one failed), with every open buffer re-sent."""
    d = tempfile.mkdtemp(prefix="ngk-", dir="/tmp")
    sock = os.path.join(d, "d.sock")
    try:
        client = await lsp_client(sock, spawn=True, model="tiny",
                                  options={"maxTokens": 8, "timeoutMs": 120000})
        open_doc(client, URI, SOURCE)
        other = URI.replace("m.py", "n.py")
        open_doc(client, other, "print('other')\n")
        first = await client.text_document_inline_completion_async(inline_params(URI, 5, 7))
        assert first is not None and first.items
        status = await client.workspace_execute_command_async(types.ExecuteCommandParams(command="ngramd.status"))
        pid = status["daemon"]["daemon"]["pid"]
        assert status["daemonsStarted"] == 1
        os.kill(pid, signal.SIGKILL)

        failures = 0
        for _ in range(3):
            again = await client.text_document_inline_completion_async(inline_params(URI, 5, 7))
            if again is not None and again.items:
                break
            failures += 1
        assert failures <= 1
        want = await asyncio.to_thread(direct, sock, SOURCE, len(SOURCE), URI, multiline=True, maxTokens=8)
        assert again.items[0].insert_text == want["text"]
        status = await client.workspace_execute_command_async(types.ExecuteCommandParams(command="ngramd.status"))
        assert status["daemonsStarted"] == 2 and status["daemon"]["daemon"]["pid"] != pid
        assert status["daemon"]["documents"]["open"] == 2  # both buffers re-sent
    finally:
        shutdown_daemon(sock)
        shutil.rmtree(d, ignore_errors=True)


NVIM_SCRIPT = r"""
local sock, out, file = os.getenv('NGL_SOCK'), os.getenv('NGL_OUT'), os.getenv('NGL_FILE')
vim.cmd('edit ' .. file)
local id = vim.lsp.start_client({
  name = 'ngramd',
  cmd = { os.getenv('NGL_PYTHON'), '-m', 'ngramd.daemon.cli.main', 'lsp', '--socket', sock },
  root_dir = vim.fn.fnamemodify(file, ':h'),
  init_options = { debounceMs = 0, maxTokens = 12 },
})
vim.lsp.buf_attach_client(0, id)
local ready = vim.wait(30000, function()
  local c = vim.lsp.get_client_by_id(id)
  return c ~= nil and c.initialized == true
end, 50)
local answer = { ready = ready }
if ready then
  local params = { textDocument = { uri = vim.uri_from_bufnr(0) },
                   position = { line = 5, character = 7 } }
  local res = vim.lsp.buf_request_sync(0, 'textDocument/completion', params, 60000)
  answer.response = res and res[id] or vim.NIL
end
local f = io.open(out, 'w')
f:write(vim.fn.json_encode(answer))
f:close()
vim.lsp.stop_client(id)
vim.cmd('qa!')
"""


def test_neovim_gets_completion(daemon_sock, tmp_path):
    nvim = shutil.which("nvim")
    if nvim is None:
        pytest.skip("neovim is not installed (`apt-get install -y neovim` failed or was not run)")
    src = tmp_path / "m.py"
    src.write_text(SOURCE)
    script = tmp_path / "attach.lua"
    script.write_text(NVIM_SCRIPT)
    out = tmp_path / "answer.json"
    env = dict(os.environ, NGL_SOCK=daemon_sock, NGL_OUT=str(out), NGL_FILE=str(src),
               NGL_PYTHON=sys.executable, NGRAMD_LSP_NO_SPAWN="1", HOME=str(tmp_path))
    proc = subprocess.run([nvim, "--headless", "--clean", "-n", "-c", f"luafile {script}"],
                          env=env, cwd=str(REPO), capture_output=True, text=True, timeout=150)
    assert out.exists(), f"nvim wrote no answer (rc {proc.returncode}): {proc.stderr[-2000:]}"
    answer = json.loads(out.read_text())
    assert answer["ready"] is True, "ngramd lsp did not initialize under neovim"
    result = answer["response"]["result"]
    want = direct(daemon_sock, SOURCE, len(SOURCE), src.as_uri(), multiline=True)
    first = want["text"].split("\n")[0]
    labels = [item["label"] for item in result["items"]]
    assert first.strip(), "the tiny model proposes something on the cursor's line"
    assert labels == ["ret" + first]
    assert result["items"][0]["textEdit"]["range"] == {
        "start": {"line": 5, "character": 4}, "end": {"line": 5, "character": 7}}
