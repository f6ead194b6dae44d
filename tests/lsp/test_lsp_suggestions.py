"""What a suggestion holds (lsp/items.py): the text after the cursor on its line (*rest*),
a proposal cut at its length limit, fill-in-the-middle prompts; pure, then through
``ngramd lsp`` with the fake daemon.

The examples are the real model's proposals a review found inserted wrongly (``|`` is the
cursor).
"""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types

from ngramd.lsp import items, positions
from lsp_helpers import apply_lsp_edit, client_capabilities, inline_params, open_doc, pos, rng, until

URI = "file:///tmp/ngl-doc/s.py"
FIM_PROMPT = "<fim_prefix>def f():\n    <fim_suffix>\n<fim_middle>"


def accepted(line: str, proposal: str, *, fim: bool = False, stop_reason: str = "", invoked: bool = False,
             encoding: str = positions.UTF16) -> list[str]:
    """``line`` (one ``|`` for the cursor) as it reads after accepting each suggestion."""
    text = line.replace("|", "")
    offset = line.index("|")
    cursor = types.Position(*positions.position_at(text, offset, encoding))
    found = items.inline_items(proposal, cursor, invoked=invoked, multiline=True,
                               rest=positions.line_rest(text, offset), fim=fim, stop_reason=stop_reason,
                               encoding=encoding)
    assert all(i.range.start == cursor for i in found)
    return [apply_lsp_edit(text, i.range, i.insert_text) if encoding == positions.UTF16
            else _apply(text, i.range, i.insert_text, encoding) for i in found]


def _apply(text: str, r: types.Range, new: str, encoding: str) -> str:
    start, end = positions.range_offsets(text, (r.start.line, r.start.character),
                                         (r.end.line, r.end.character), encoding)
    return text[:start] + new + text[end:]


@pytest.mark.parametrize("line, proposal, after", [
    ("fired.append(|)", '(text.index("\\n", at) + 1, 0, "stop_string"))',
     'fired.append((text.index("\\n", at) + 1, 0, "stop_string"))'),
    ('self.reason = "e|"', 'os_ids"', 'self.reason = "eos_ids"'),
    ('raise ValueError("invalid |")', 'width")', 'raise ValueError("invalid width")'),
    ("ESCAPE.sub(replace, |) + '\"'", "s) + '\"'", "ESCAPE.sub(replace, s) + '\"'"),
    ('"""|"""', 'Docstring."""', '"""Docstring."""'),
    ("call(f(|));", "x));", "call(f(x));"),
    ("call(f(|));", "x)", "call(f(x));"),  # the closer it writes replaced, the rest kept
    ("items = [|]  ", "1, 2]", "items = [1, 2]  "),  # trailing whitespace is not part of the overlap
])
def test_a_proposal_that_ends_with_what_follows_the_cursor_replaces_it(line, proposal, after):
    assert accepted(line, proposal) == [after]
    assert accepted(line, proposal, fim=True) == [after]


@pytest.mark.parametrize("line, proposal", [
    ("print(|)", "len(items)"),  # its ")" closes its own "(": the cursor's call still needs one
    ('f("|")', 'a", "b'),
    ("for x in |:", "range(3)"),
])
def test_closers_a_proposal_leaves_matched_are_its_own_and_stay_after_it(line, proposal):
    want = line.replace("|", proposal)
    assert accepted(line, proposal) == [want]
    assert accepted(line, proposal, fim=True) == [want]


def test_no_partial_overlap_with_a_word():
    # rest "self.cfg.eos_ids:" and a proposal ending in "s": that "s" is not the rest's
    assert items.replaced_rest("tokens", "self.cfg.eos_ids:", fim=True) == 0
    assert accepted("if token in |self.cfg.eos_ids:", "tokens", fim=True) == [
        "if token in tokensself.cfg.eos_ids:"]


@pytest.mark.parametrize("line, proposal", [
    ("if token in |self.cfg.eos_ids:", "self._fences["),
    ("if token in |self.cfg.eos_ids:", "tokens"),
    ('label = "x" + |greet(name).upper()', "name\n    return greet(name)"),
    ("ESCAPE.sub(replace, |) + '\"'", "s)"),  # only the start of rest: the model did not know the rest
])
def test_nothing_is_offered_mid_line_where_the_model_never_saw_the_rest(line, proposal):
    assert accepted(line, proposal) == []
    assert accepted(line, proposal, invoked=True) == []


def test_a_fim_proposal_mid_line_goes_before_the_rest_one_line_only():
    assert accepted('label = "x" + |greet(name).upper()', "name\n    return greet(name)",
                    fim=True, invoked=True) == ['label = "x" + namegreet(name).upper()']
    assert accepted("if token in |self.cfg.eos_ids:", "self._fences[", fim=True) == [
        "if token in self._fences[self.cfg.eos_ids:"]


def test_a_blank_rest_changes_nothing():
    assert accepted("x = |   ", "f(\n    1)") == ["x = f(\n    1)   "]
    assert accepted("x = |", "f(\n    1)", invoked=True) == ["x = f(\n    1)", "x = f("]


@pytest.mark.parametrize("proposal, offered", [
    ("lines = []\n        self._fence_", "lines = []"),  # cut mid-name
    ('\n    """Return the', ""),  # an unclosed docstring, and nothing before it
    ("config = {\n    'a': 1,\n    'b'", "config = {\n    'a': 1,"),  # unclosed "{" line dropped
    ("x = 1\n       ", "x = 1"),  # a whitespace-only last line
    ("self._fence_", "self._fence_"),  # one line: where the user types on
])
def test_a_multi_line_proposal_cut_at_max_tokens_ends_at_its_last_line_break(proposal, offered):
    found = items.suggestions(proposal, invoked=False, multiline=True, stop_reason="max_tokens")
    assert found == ([(offered, 0)] if offered else [])


def test_a_multi_line_proposal_loses_its_trailing_whitespace_whatever_stopped_it():
    assert items.suggestions("if x:\n    y()\n\n    ", invoked=False, multiline=True,
                             stop_reason="eos") == [("if x:\n    y()", 0)]
    assert items.suggestions("\n   \n", invoked=True, multiline=True, stop_reason="eos") == []
    # one line keeps its end (the user typed "x =" and the proposal is " 1 ")
    assert items.suggestions(" 1 ", invoked=False, multiline=True, stop_reason="eos") == [(" 1 ", 0)]


@pytest.mark.parametrize("encoding, replaced_units", [
    (positions.UTF16, 5), (positions.UTF8, 7), (positions.UTF32, 4)])
def test_the_replaced_range_counts_code_units_of_the_negotiated_encoding(encoding, replaced_units):
    line = 's = f("é😀", |"😀")'
    proposal = 'x", "😀")'
    (after,) = accepted(line, proposal, encoding=encoding)
    assert after == 's = f("é😀", x", "😀")'
    text, offset = line.replace("|", ""), line.index("|")
    cursor = types.Position(*positions.position_at(text, offset, encoding))
    (item,) = items.inline_items(proposal, cursor, invoked=False, multiline=True,
                                 rest=positions.line_rest(text, offset), encoding=encoding)
    assert item.range.end == types.Position(line=0, character=cursor.character + replaced_units)


def test_a_selection_extended_replaces_the_closers_after_it():
    # "os.pa|th)" with the menu's "path" selected over "pa"; the proposal closes the call
    sel = types.SelectedCompletionInfo(range=rng(0, 6, 0, 8), text="path")
    (item,) = items.selected_items(".sep)", sel, invoked=False, multiline=True, rest=")")
    assert item.insert_text == "path.sep)" and item.range == rng(0, 6, 0, 9)
    assert items.selected_items(".sep", sel, invoked=False, multiline=True, rest=" + x") == []


@pytest.mark.parametrize("line, proposal, after", [
    ("fired.append(|)", "(a, 0))", "fired.append((a, 0))"),  # its ")" closes the cursor's call
    ("print(le|)", "n(items))", "print(len(items))"),  # the typed word kept, the ")" replaced
    ("print(|)", "len(items)", "print(len(items))"),  # its ")" is its own: nothing replaced
    ('s = f("é😀", |"😀")', 'x", "😀")', 's = f("é😀", x", "😀")'),  # the whole rest, in UTF-16 units
])
def test_the_completion_menu_item_replaces_the_closers_it_writes_again(line, proposal, after):
    """The completion-menu fallback replaces what ``replaced_rest`` says, as the inline items do:
    before, its edit ended at the cursor and ``fired.append((a, 0)))`` was written."""
    text, offset = line.replace("|", ""), line.index("|")
    word = items.word_before(text[:offset])
    word_range = types.Range(start=types.Position(*positions.position_at(text, offset - len(word))),
                             end=types.Position(*positions.position_at(text, offset)))
    item = items.completion_item(proposal, word, word_range, rest=positions.line_rest(text, offset))
    assert item.label == word + proposal and item.text_edit.range.start == word_range.start
    assert apply_lsp_edit(text, item.text_edit.range, item.text_edit.new_text) == after


def test_no_completion_menu_item_mid_line_where_the_model_never_saw_the_rest():
    r = rng(0, 12, 0, 12)
    assert items.completion_item("self._fences[", "", r, rest="self.cfg.eos_ids:") is None
    item = items.completion_item("self._fences[", "", r, rest="self.cfg.eos_ids:", fim=True)
    assert item.text_edit.range == r  # with FIM: inserted before the rest


def test_line_rest():
    assert positions.line_rest("abcd\nef", 2) == "cd"
    assert positions.line_rest("ab\r\ncd", 1) == "b"
    assert positions.line_rest("ab\r\ncd", 2) == ""
    assert positions.line_rest("ab\rcd", 1) == "b"
    assert positions.line_rest("abc", 3) == ""


def test_fim_prompts_are_told_as_the_daemon_builds_them():
    """The LSP's FIM token families are daemon/engine/prompt.py's (which it cannot import: torch), and
    the daemon's own prompts for the test models are told apart."""
    from ngramd.daemon.engine import prompt
    from ngramd.daemon.runtime.loading import load_runtime

    assert items.FIM_FAMILIES == prompt._FIM_FAMILIES
    text = "def f(x):\n    return g(x)\n"
    for spec, fim in (("tiny", False), ("tiny-fim", True)):
        built = prompt.build_prompt(load_runtime(spec, "cpu"), text, text.index(" g("))
        assert built.fim is fim and items.is_fim_prompt(built.text) is fim
    assert items.is_fim_prompt("<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>")
    assert not items.is_fim_prompt("") and not items.is_fim_prompt("<fim_prefix> in a plain file")


async def test_a_completion_mid_line_is_single_line_and_replaces_the_closers(fake, sock, lsp_client):
    """multiline is on (the default) but the cursor has text after it: the daemon is asked for
    one line, and the item's range covers the ")" the proposal writes again."""
    client = await lsp_client(sock)
    text = "fired.append()\n"
    open_doc(client, URI, text)
    fake.proposal = "(at, 0))"
    result = await client.text_document_inline_completion_async(inline_params(URI, 0, 13))
    assert fake.methods("complete")[-1]["multiline"] is False
    assert [(i.insert_text, i.range) for i in result.items] == [("(at, 0))", rng(0, 13, 0, 14))]
    assert apply_lsp_edit(text, result.items[0].range, result.items[0].insert_text) == "fired.append((at, 0))\n"

    # at a line's end it stays multi-line; a proposal cut at max_tokens loses its cut line
    fake.proposal, fake.complete_stop_reason = "x\n    self._fen", "max_tokens"
    result = await client.text_document_inline_completion_async(inline_params(URI, 1, 0))
    assert fake.methods("complete")[-1]["multiline"] is True
    assert [(i.insert_text, i.range) for i in result.items] == [("x", rng(1, 0, 1, 0))]


async def test_mid_line_a_plain_prompt_offers_nothing_and_a_fim_prompt_inserts(fake, sock, lsp_client):
    """A model blind to the rest of the line: nothing offered mid-line, and once the daemon's
    prompts are known to be plain, not even asked there (a pass per keystroke for nothing);
    its prompts learnt to be FIM again (at a line's end), mid-line is asked and inserted."""
    client = await lsp_client(sock)
    open_doc(client, URI, "if token in self.cfg.eos_ids:\n\n")
    fake.proposal = "self._fences["
    result = await client.text_document_inline_completion_async(inline_params(URI, 0, 12))
    assert list(result.items) == [] and len(fake.methods("complete")) == 1
    result = await client.text_document_inline_completion_async(inline_params(URI, 0, 13))
    assert result is None and len(fake.methods("complete")) == 1  # not asked: no result
    status = await client.workspace_execute_command_async(types.ExecuteCommandParams(command="ngramd.status"))
    assert status["counters"]["mid_line"] == 1
    fake.complete_prompt = FIM_PROMPT
    await client.text_document_inline_completion_async(inline_params(URI, 1, 0))  # a line's end: asked
    assert len(fake.methods("complete")) == 2
    result = await client.text_document_inline_completion_async(inline_params(URI, 0, 12))
    assert [(i.insert_text, i.range) for i in result.items] == [("self._fences[", rng(0, 12, 0, 12))]


async def test_the_completion_menu_replaces_the_closers_after_the_cursor(fake, sock, lsp_client):
    """An editor without inline completion (Helix): its menu item's edit covers the ")" that the
    proposal writes again, counted in the negotiated encoding (UTF-8 here)."""
    client = await lsp_client(sock, capabilities=client_capabilities(inline=False, encodings=["utf-8"]))
    text = "é = fired.append()\n"
    open_doc(client, URI, text)
    fake.proposal = "(at, 0))"
    result = await client.text_document_completion_async(types.CompletionParams(
        text_document=types.TextDocumentIdentifier(uri=URI), position=pos(0, 18)))
    (item,) = result.items
    assert item.text_edit.new_text == "(at, 0))" and item.text_edit.range == rng(0, 18, 0, 19)


@pytest.mark.parametrize("encoding,start,end", [("utf-8", 18, 25), ("utf-16", 17, 23)])
async def test_the_completion_menu_counts_what_it_replaces_in_the_negotiated_encoding(
        fake, sock, lsp_client, encoding, start, end):
    """A FIM model's line that ends with the rest of the line replaces it, non-ASCII included:
    "naïve)" is 7 UTF-8 bytes, 6 UTF-16 units."""
    client = await lsp_client(sock, capabilities=client_capabilities(inline=False, encodings=[encoding]))
    open_doc(client, URI, "é = fired.append(naïve)\n")
    fake.complete_prompt = FIM_PROMPT
    fake.proposal = "naïve)"
    result = await client.text_document_completion_async(types.CompletionParams(
        text_document=types.TextDocumentIdentifier(uri=URI), position=pos(0, start)))
    (item,) = result.items
    assert item.text_edit.new_text == "naïve)" and item.text_edit.range == rng(0, start, 0, end)


async def test_the_completion_menu_offers_a_fim_models_line_before_the_rest(fake, sock, lsp_client):
    """A FIM model wrote what goes before the rest of the line: offered, replacing nothing after
    the cursor (a plain model's line that does not end with the rest is not offered)."""
    client = await lsp_client(sock, capabilities=client_capabilities(inline=False, encodings=["utf-8"]))
    open_doc(client, URI, "x = f(y)\n")
    fake.complete_prompt = FIM_PROMPT
    fake.proposal = "a, "
    result = await client.text_document_completion_async(types.CompletionParams(
        text_document=types.TextDocumentIdentifier(uri=URI), position=pos(0, 6)))
    (item,) = result.items
    assert item.text_edit.new_text == "a, " and item.text_edit.range == rng(0, 6, 0, 6)


async def test_a_request_mid_line_that_asks_nothing_still_cancels_the_one_in_flight(fake, sock, lsp_client):
    """The cursor moved (no keystroke) from a slow request to a place mid-line that a plain model
    is not asked about: the earlier request, now for nowhere, is cancelled in the daemon (not
    only at its timeout)."""
    client = await lsp_client(sock, options={"timeoutMs": 60000})
    open_doc(client, URI, "if token in self.cfg.eos_ids:\n\n")
    await client.text_document_inline_completion_async(inline_params(URI, 1, 0))  # its prompt: plain
    fake.delay = 30
    slow = asyncio.ensure_future(client.text_document_inline_completion_async(inline_params(URI, 1, 0)))
    await until(lambda: len(fake.methods("complete")) == 2, what="the slow complete sent")
    assert await client.text_document_inline_completion_async(inline_params(URI, 0, 12)) is None
    rid = fake.methods("complete")[-1]["requestId"]
    await until(lambda: rid in fake.cancelled, what="daemon-side cancel")
    assert await asyncio.wait_for(slow, 10) is None
    assert len(fake.methods("complete")) == 2
