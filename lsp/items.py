"""Pure conversions from the daemon's proposal text to LSP result types.

Vocabulary: the *proposal* is the text the daemon would insert at the cursor (its
``CompletionResult.text``); a *variant* is a form of it offered to the editor (the
whole proposal, or only its first line); a *suggestion* is a variant as offered: its
text and how many characters after the cursor it *replaces*. *rest* is the text after
the cursor on its line (up to the line break), which the editor keeps after the
suggestion unless the suggestion's range replaces part of it.

What a suggestion holds (lsp/README.md, "Suggestions"):

- a proposal that stopped at ``max_tokens`` over several lines loses its last line (cut
  short: mid-word, an unclosed string or bracket); any multi-line variant loses its
  trailing whitespace (blank last lines would break the indentation of the code below);
- with a non-blank rest, only the first line is offered (the server asks the daemon for
  one line there: a block typed before the rest of a line is junk), and its range
  replaces the start of rest that it ends with (``replaced_rest``): the whole of rest,
  or closers that it leaves unmatched, so that nothing is written twice;
- a rest with more than closers that the line does not end with: nothing is offered
  when the model never saw rest (a prompt without fill-in-the-middle tokens); with a
  FIM prompt the model wrote what goes before it, inserted at the cursor.

Worked example: ``fired.append(|)`` (``|`` the cursor), rest ``)``, proposal ``(a, 0))``:
the proposal closes the call itself, so the suggestion replaces the ``)`` after the
cursor (range: cursor to cursor + 1) and the line becomes ``fired.append((a, 0))``.
With the proposal ``len(a)`` (balanced: its ``)`` is its own) nothing is replaced.
"""

from __future__ import annotations

import re

from lsprotocol import types

from ngramd.daemon.protocol.lines import LINE_BREAK
from ngramd.lsp import positions

_WORD_TAIL = re.compile(r"\w*\Z")

MAX_TOKENS = "max_tokens"  # the daemon's stop reason for an answer cut at its length limit
# Characters that end what the text before them opened (a call, a string, a statement): a
# proposal written without seeing rest ends with them too, and would write them twice.
CLOSERS = ")]}\"'`;,:"
_OPENER = {")": "(", "]": "[", "}": "{"}
_QUOTES = "\"'`"
# The fill-in-the-middle token families (daemon/engine/prompt.py ``_FIM_FAMILIES``, which imports torch:
# the LSP cannot import it; tests/lsp checks the two agree).
FIM_FAMILIES = (("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
                ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"))


def first_line(text: str) -> str:
    return LINE_BREAK.split(text, 1)[0]


def word_before(line_prefix: str) -> str:
    """The identifier characters just before the cursor (what a completion menu filters on)."""
    return _WORD_TAIL.search(line_prefix).group(0)  # type: ignore[union-attr]


def is_fim_prompt(prompt: str) -> bool:
    """Whether the daemon's ``prompt`` (the exact text the model saw) was fill-in-the-middle:
    ``<fim_prefix> before <fim_suffix> after <fim_middle>``, so the model saw the text after
    the cursor; a plain prompt is the text before the cursor alone."""
    return any(prompt.startswith(p) and s in prompt and prompt.endswith(m) for p, s, m in FIM_FAMILIES)


def finished(variant: str, stop_reason: str) -> str:
    """``variant`` as offered: a multi-line one cut back to its last line break when it
    stopped at ``max_tokens`` (that line is cut short), then without trailing whitespace; a
    single-line one as it is (its cut end is where the user goes on typing)."""
    breaks = list(LINE_BREAK.finditer(variant))
    if not breaks:
        return variant
    if stop_reason == MAX_TOKENS:
        variant = variant[:breaks[-1].start()]
    return variant.rstrip()


def replaced_rest(line: str, rest: str, *, fim: bool) -> int | None:
    """How many characters of ``rest`` a suggestion whose (first) line is ``line`` replaces;
    None when it must not be offered.

    - ``line`` ends with the whole of rest (its trailing whitespace kept): all of it;
    - rest is only closers (and whitespace): the longest start of it that ``line`` ends with
      and leaves unmatched (``_closes_before``: a ``)`` with no ``(`` for it in ``line``
      closes one opened before the cursor); never part of a word;
    - otherwise 0 with a FIM prompt (the model wrote what goes before rest), None without.
    """
    whole = rest.rstrip()
    if not whole:
        return 0
    if only_closers(whole):
        return next((k for k in range(len(whole), 0, -1)
                     if not whole[k - 1].isspace() and line.endswith(whole[:k])
                     and _closes_before(line, whole[:k])), 0)
    if line.endswith(whole):
        return len(whole)
    return 0 if fim else None


def only_closers(text: str) -> bool:
    """Whether ``text`` holds only closers and whitespace (what a line may end with and replace)."""
    return all(c in CLOSERS or c.isspace() for c in text)


def _closes_before(line: str, closers: str) -> bool:
    """Whether ``line`` leaves each of ``closers`` (the end of ``line``) unmatched: more
    ``)`` than ``(`` in it, a quote that pairs with none before it; separators (``;,:``)
    always. Counted plainly (a bracket in a string counts too)."""
    for c in {c for c in closers if not c.isspace()}:
        need = closers.count(c)
        if c in _OPENER and line.count(c) - line.count(_OPENER[c]) < need:
            return False
        if c in _QUOTES and (line.count(c) - need) % 2:
            return False
    return True


def suggestions(proposal: str, *, invoked: bool, multiline: bool, rest: str = "", fim: bool = False,
                stop_reason: str = "") -> list[tuple[str, int]]:
    """The suggestions for ``proposal``: ``(text, characters of rest replaced)`` each.

    Automatic trigger: one, the proposal (its first line when not ``multiline`` or when
    ``rest`` is not blank). Invoked: also the single-line variant when it differs, so the
    user can cycle. None blank; none when ``replaced_rest`` refuses.
    """
    multiline = multiline and not rest.strip()
    line = first_line(proposal)
    variants = [finished(proposal, stop_reason) if multiline else line]
    if invoked and line != variants[0]:
        variants.append(line)
    found = []
    for text in variants:
        replaced = replaced_rest(first_line(text), rest, fim=fim)
        if text.strip() and replaced is not None:
            found.append((text, replaced))
    return found


def inline_items(proposal: str, cursor: types.Position, *, invoked: bool, multiline: bool, rest: str = "",
                 fim: bool = False, stop_reason: str = "",
                 encoding: str = positions.UTF16) -> list[types.InlineCompletionItem]:
    """The ``suggestions`` as items at ``cursor``: each range starts there and ends after
    the characters of ``rest`` it replaces (in ``encoding``'s code units; empty when none)."""
    return [types.InlineCompletionItem(insert_text=text, range=_replacing(cursor, cursor, rest[:n], encoding))
            for text, n in suggestions(proposal, invoked=invoked, multiline=multiline, rest=rest, fim=fim,
                                       stop_reason=stop_reason)]


def selected_items(proposal: str, selected: types.SelectedCompletionInfo, *, invoked: bool, multiline: bool,
                   rest: str = "", fim: bool = False, stop_reason: str = "",
                   encoding: str = positions.UTF16) -> list[types.InlineCompletionItem]:
    """Items that extend the completion-menu selection: over ``selected.range`` (and the
    characters of ``rest``, after it, that they replace), each starting with ``selected.text``.
    ``proposal`` continues the text *after* it."""
    rng = selected.range
    return [types.InlineCompletionItem(insert_text=selected.text + text,
                                       range=_replacing(rng.start, rng.end, rest[:n], encoding))
            for text, n in suggestions(proposal, invoked=invoked, multiline=multiline, rest=rest, fim=fim,
                                       stop_reason=stop_reason)]


def _replacing(start: types.Position, end: types.Position, replaced: str, encoding: str) -> types.Range:
    """From ``start`` to ``end`` moved past ``replaced`` (text on ``end``'s line)."""
    return types.Range(start=start, end=types.Position(
        line=end.line, character=end.character + positions.units(replaced, encoding)))


def completion_item(proposal: str, word: str, replace: types.Range, markup: bool = True, *,
                    rest: str = "", fim: bool = False,
                    encoding: str = positions.UTF16) -> types.CompletionItem | None:
    """The completion-menu fallback: the proposal's first line, prefixed by the word
    being typed (``replace`` spans that word, up to the cursor) so that the menu's filter
    keeps it; its edit also replaces the characters of ``rest`` that ``replaced_rest`` says
    (in ``encoding``'s code units), and there is no item where that refuses.
    ``markup``: the editor takes plain-text MarkupContent documentation (else a string)."""
    line = first_line(proposal)
    replaced = replaced_rest(line, rest, fim=fim)
    if not line.strip() or replaced is None:
        return None
    label = word + line
    return types.CompletionItem(
        label=label,
        kind=types.CompletionItemKind.Text,
        detail="ngramd",
        documentation=(types.MarkupContent(kind=types.MarkupKind.PlainText, value=word + proposal)
                       if markup else word + proposal),
        filter_text=label,
        sort_text="0",
        insert_text_format=types.InsertTextFormat.PlainText,
        text_edit=types.TextEdit(range=_replacing(replace.start, replace.end, rest[:replaced], encoding),
                                 new_text=label),
    )


def workspace_edit(uri: str, version: int | None, replace: types.Range, new_text: str,
                   versioned: bool) -> types.WorkspaceEdit:
    """Replace ``replace`` in ``uri`` by ``new_text``; ``versioned`` (the client supports
    ``documentChanges``) lets the editor refuse the edit if the document moved on."""
    edit = types.TextEdit(range=replace, new_text=new_text)
    if versioned:
        return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
            text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version),
            edits=[edit])])
    return types.WorkspaceEdit(changes={uri: [edit]})
