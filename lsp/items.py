"""Pure conversions from the daemon's proposal text to LSP result types.

Vocabulary: the *proposal* is the text the daemon would insert at the cursor (its
``CompletionResult.text``); a *variant* is a form of it offered to the editor (the
whole proposal, or only its first line).
"""

from __future__ import annotations

import re

from lsprotocol import types

from daemon.lines import LINE_BREAK

_WORD_TAIL = re.compile(r"\w*\Z")


def first_line(text: str) -> str:
    return LINE_BREAK.split(text, 1)[0]


def word_before(line_prefix: str) -> str:
    """The identifier characters just before the cursor (what a completion menu filters on)."""
    return _WORD_TAIL.search(line_prefix).group(0)  # type: ignore[union-attr]


def inline_items(proposal: str, cursor: types.Position, *, invoked: bool,
                 multiline: bool) -> list[types.InlineCompletionItem]:
    """Items inserted at ``cursor`` (an empty range, so the editor replaces nothing).

    Automatic trigger: one item, the proposal (its first line when not ``multiline``).
    Invoked: also the single-line variant when it differs, so the user can cycle.
    """
    full = proposal if multiline else first_line(proposal)
    if not full.strip():
        return []
    at = types.Range(start=cursor, end=cursor)
    items = [types.InlineCompletionItem(insert_text=full, range=at)]
    line = first_line(proposal)
    if invoked and line != full and line.strip():
        items.append(types.InlineCompletionItem(insert_text=line, range=at))
    return items


def selected_items(proposal: str, selected: types.SelectedCompletionInfo, *, invoked: bool,
                   multiline: bool) -> list[types.InlineCompletionItem]:
    """Items that extend the completion-menu selection: over ``selected.range``, each
    starting with ``selected.text``. ``proposal`` continues the text *after* it."""
    items = inline_items(proposal, selected.range.end, invoked=invoked, multiline=multiline)
    return [types.InlineCompletionItem(insert_text=selected.text + item.insert_text,
                                       range=selected.range) for item in items]


def completion_item(proposal: str, word: str, replace: types.Range,
                    markup: bool = True) -> types.CompletionItem | None:
    """The completion-menu fallback: the proposal's first line, prefixed by the word
    being typed (``replace`` spans that word) so that the menu's filter keeps it.
    ``markup``: the editor takes plain-text MarkupContent documentation (else a string)."""
    line = first_line(proposal)
    if not line.strip():
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
        text_edit=types.TextEdit(range=replace, new_text=label),
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
