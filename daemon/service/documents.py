"""Open documents, keyed by uri and shared by every client of the daemon.

Vocabulary:
- *document*: the text an editor holds for one uri, with the editor's *version*
  (an int that grows with every change).
- *holder*: a client connection that has the document open. Two editors on the
  same file share one document; it is dropped when its last holder closes it
  (or disconnects). Each holder's versions are its own sequence: the store keeps
  the last version each holder sent, so an ``open`` from a holder below that
  version with another text (a stale re-open) is refused, while another editor's ``open``, whose
  numbering is unrelated, re-syncs the document whatever its version.
- *in sync*: a holder whose own text the document holds (it sent it, by ``open`` or
  ``change``, or opened the same text). Only a holder in sync may change the document or
  ask for work on a version of it, numbered its own way: another's edits and versions are
  of its own text, which this is not (two editors with different unsaved changes to one
  file). It gets ``CONTENT_MODIFIED`` and sends its whole text, which puts it in sync
  (and the other out). A connection that does not hold the document has no text of it
  here at all: it is told the document is not open (``DOCUMENT_NOT_OPEN``), and opens it.
- *change*: either a full replacement (``{"text"}``) or a range edit
  ``{"start", "end", "text"}`` in characters (code points) of the text as it is
  before that change. Changes in one ``change`` call apply in order.

Invariant: ``doc.text`` is always the result of applying every accepted change
in order; a change from a holder out of sync or with a version not newer than its
last, or an open from a holder with a version older than the last one it sent, is
rejected whole (``CONTENT_MODIFIED``) and leaves the document untouched; so is a
change from a connection that does not hold it (``DOCUMENT_NOT_OPEN``).

Pure bookkeeping: no index, no model; the service mirrors each accepted edit
into the n-gram index (``Edit`` records say what to mirror).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ngramd.daemon.protocol.rpc import CONTENT_MODIFIED, DEFAULT_MAX_DOCUMENT_CHARS, DOCUMENT_NOT_OPEN, INVALID_PARAMS, RpcError


@dataclass
class Document:
    uri: str
    text: str
    version: int
    language_id: str = ""
    # connection id -> the last version that connection sent (by open or change) and was accepted
    holders: dict[int, int] = field(default_factory=dict)
    in_sync: set[int] = field(default_factory=set)  # the holders whose own text ``text`` is


@dataclass(frozen=True)
class Edit:
    """One applied change: ``old_text[start:end]`` became ``text`` (full: start=0, end=len).

    ``result`` is the whole text after it, on the last edit of a change only: the
    index keeps that very string instead of splicing a copy of its own.
    """

    start: int
    end: int
    text: str
    full: bool
    result: str | None = None


def parse_changes(changes: Any) -> list[tuple[int | None, int | None, str]]:
    """Validate the wire form of ``changes``; ranges are checked later against the text."""
    if not isinstance(changes, list) or not changes:
        raise RpcError(INVALID_PARAMS, "'changes' must be a non-empty array")
    out: list[tuple[int | None, int | None, str]] = []
    for i, ch in enumerate(changes):
        if not isinstance(ch, dict):
            raise RpcError(INVALID_PARAMS, f"changes[{i}] must be a map")
        text = ch.get("text")
        if not isinstance(text, str):
            raise RpcError(INVALID_PARAMS, f"changes[{i}].text must be a string")
        has_start, has_end = "start" in ch, "end" in ch
        if has_start != has_end:
            raise RpcError(INVALID_PARAMS, f"changes[{i}] needs both 'start' and 'end' or neither")
        if not has_start:
            out.append((None, None, text))
            continue
        start, end = ch["start"], ch["end"]
        for name, value in (("start", start), ("end", end)):
            if not _is_int(value):
                raise RpcError(INVALID_PARAMS, f"changes[{i}].{name} must be an integer")
        out.append((start, end, text))
    return out


def apply_change(text: str, start: int | None, end: int | None, new: str) -> tuple[str, Edit]:
    """Apply one change to ``text``; raises INVALID_PARAMS for a range outside it."""
    if start is None:
        return new, Edit(0, len(text), new, full=True)
    assert end is not None
    _check_range(start, end, len(text))
    return text[:start] + new + text[end:], Edit(start, end, new, full=False)


def _check_range(start: int, end: int, length: int) -> None:
    if not 0 <= start <= end <= length:
        raise RpcError(INVALID_PARAMS, f"range [{start}, {end}) outside the document (length {length})")


# Characters the one-by-one path may copy for one ``change`` (each edit copies the whole text,
# ~5G characters a second here): past it a change is refused, as it would hold the event loop
# for seconds; an editor sends such a change as one edit or in order, both one pass.
MAX_COPIED_CHARS = 2_000_000_000


def apply_changes(text: str, changes: list[tuple[int | None, int | None, str]]) -> tuple[str, list[Edit]]:
    """Apply ``changes`` in order (as ``apply_change`` one by one); returns the text and the edits.

    Range edits that do not overlap are spliced in one pass rather than copying the whole
    text once per edit, whether they run back to front (each ends at or before the previous
    one's start, as an editor's "Replace All" sends them: all name offsets of the original
    text) or front to back (each starts at or after the end of the previous one's new text).
    Other orders go one by one, within ``MAX_COPIED_CHARS``. What comes before a full
    replacement is only checked (its ranges) and recorded, not applied: the text is replaced.
    """
    edits: list[Edit] = []
    last_full = max((i for i, (start, _, _) in enumerate(changes) if start is None), default=None)
    if last_full is not None:
        length = len(text)
        for start, end, new in changes[:last_full]:
            if start is None or end is None:
                edits.append(Edit(0, length, new, full=True))
                length = len(new)
            else:
                _check_range(start, end, length)
                edits.append(Edit(start, end, new, full=False))
                length += len(new) - (end - start)
        text = changes[last_full][2]
        edits.append(Edit(0, length, text, full=True))
        changes = changes[last_full + 1:]
    if not changes:
        return text, edits
    ranges: list[Span] = changes  # type: ignore[assignment]  (none is a full replacement now)
    spans = _back_to_front(ranges, len(text)) or _front_to_back(ranges, len(text))
    if spans is not None:
        pieces, pos = [], 0
        for start, end, new in spans:
            pieces += (text[pos:start], new)
            pos = end
        pieces.append(text[pos:])
        return "".join(pieces), edits + [Edit(start, end, new, full=False) for start, end, new in changes]
    size, copied = len(text), 0
    for start, end, new in changes:
        copied += len(text) + len(new)
        if copied > MAX_COPIED_CHARS:
            raise RpcError(INVALID_PARAMS, f"{len(changes)} range edits in one change of a {size}-character "
                                           f"document, neither front to back nor back to front: send them "
                                           f"in order or the whole text")
        text, edit = apply_change(text, start, end, new)
        edits.append(edit)
    return text, edits


Span = tuple[int, int, str]  # (start, end, new text) in the original text's offsets


# Both take range edits only: apply_changes takes full replacements off first.

def _back_to_front(changes: list[Span], length: int) -> list[Span] | None:
    """The changes as spans of the original text, in its order, when each ends at or before the
    previous one's start (their offsets are the original's); else None."""
    bound = length
    for start, end, _ in changes:
        if not 0 <= start <= end <= bound:
            return None  # an overlap or a bad range: another path
        bound = start
    return list(reversed(changes))


def _front_to_back(changes: list[Span], length: int) -> list[Span] | None:
    """The changes as spans of the original text when each starts at or after the end of the
    previous one's new text (its offsets are the original's shifted by the edits before it); else None."""
    spans: list[Span] = []
    shift, settled = 0, 0  # how far the text so far moved; where the previous new text ends
    for start, end, new in changes:
        if not settled <= start <= end <= length + shift:
            return None
        spans.append((start - shift, end - shift, new))
        shift += len(new) - (end - start)
        settled = start + len(new)
    return spans




class DocumentStore:
    """The open documents. Used from the event loop thread only (no lock needed)."""

    def __init__(self, max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS) -> None:
        self._docs: dict[str, Document] = {}
        self.max_document_chars = max_document_chars

    def __len__(self) -> int:
        return len(self._docs)

    def __contains__(self, uri: str) -> bool:
        return uri in self._docs

    def get(self, uri: str) -> Document:
        doc = self._docs.get(uri)
        if doc is None:
            raise RpcError(INVALID_PARAMS, f"{DOCUMENT_NOT_OPEN}{uri[:200]}")
        return doc

    def open(self, conn: int, uri: str, text: str, version: int, language_id: str = "") -> Document:
        """Open (or re-sync) a document; a second holder shares it and its text wins.

        A holder re-opening with a version below the last one it sent is stale (its
        newer text is already here): refused with CONTENT_MODIFIED, as a stale change is,
        unless it sends the text the document holds. The same version is accepted (a
        client re-sending its current state)."""
        self.check_size(text)
        doc = self._docs.get(uri)
        if doc is None:
            doc = self._docs[uri] = Document(uri, text, version, language_id)
        else:
            last = doc.holders.get(conn)
            # the same text again is no stale copy whatever its version (Neovim 0.8/0.9 open a
            # renamed buffer at version 0 at its write): that version is the holder's from now on
            if last is not None and version < last and text != doc.text:
                raise RpcError(CONTENT_MODIFIED, f"stale open of {uri[:200]}: version {version} is "
                                                 f"older than {last}, which this client sent before")
            if text != doc.text:
                doc.in_sync.clear()
            doc.text, doc.version = text, version
            doc.language_id = language_id or doc.language_id
        doc.holders[conn] = version
        doc.in_sync.add(conn)
        return doc

    def text_at(self, uri: str, version: int | None, conn: int) -> str:
        """The text of ``uri``, which must be at ``version`` as ``conn`` numbers it (when given):
        CONTENT_MODIFIED if it is at another, or holds another client's text; DOCUMENT_NOT_OPEN
        if ``conn`` does not hold it (a version of no text of its own here)."""
        doc = self.get(uri)
        if version is not None:
            now = self._own_version(doc, conn)
            if version != now:
                raise RpcError(CONTENT_MODIFIED, f"version {version} is not the document's ({now})")
        return doc.text

    def change(self, uri: str, version: int, changes: list[tuple[int | None, int | None, str]],
               conn: int) -> list[Edit]:
        """Apply ``changes`` from ``conn``, a holder in sync, in order, all or nothing; returns
        the edits applied."""
        doc = self.get(uri)
        last = self._own_version(doc, conn)
        if version <= last:
            raise RpcError(CONTENT_MODIFIED,
                           f"stale version {version} for {uri[:200]} (document is at {last})")
        text, edits = apply_changes(doc.text, changes)
        self.check_size(text)
        doc.text, doc.version = text, version
        doc.in_sync.clear()  # the other holders' texts have not had this change
        doc.holders[conn] = version
        doc.in_sync.add(conn)
        if not edits[-1].full:
            edits[-1] = replace(edits[-1], result=text)
        return edits

    @staticmethod
    def _own_version(doc: Document, conn: int) -> int:
        """The last version ``conn`` sent of ``doc``, whose text must be its own: DOCUMENT_NOT_OPEN
        for a connection that does not hold it (its edits and versions are of a text not here:
        it opens it, as the LSP does on this error), CONTENT_MODIFIED for a holder out of sync."""
        last = doc.holders.get(conn)
        if last is None:
            raise RpcError(INVALID_PARAMS, f"{DOCUMENT_NOT_OPEN}{doc.uri[:200]}")
        if conn not in doc.in_sync:
            raise RpcError(CONTENT_MODIFIED, f"{doc.uri[:200]} holds another client's text since this one "
                                             f"last sent it: send the whole text again")
        return last

    def close(self, conn: int, uri: str) -> bool:
        """Release ``conn``'s hold; True when the document is gone (no holder left)."""
        doc = self.get(uri)
        doc.holders.pop(conn, None)
        doc.in_sync.discard(conn)
        if doc.holders:
            return False
        del self._docs[uri]
        return True

    def release_all(self, conn: int) -> list[str]:
        """Drop ``conn``'s holds (it disconnected); returns the uris now closed."""
        closed = []
        for uri, doc in list(self._docs.items()):
            if conn in doc.holders:
                del doc.holders[conn]
                doc.in_sync.discard(conn)
                if not doc.holders:
                    del self._docs[uri]
                    closed.append(uri)
        return closed

    def summary(self) -> list[dict[str, Any]]:
        return [{"uri": d.uri, "version": d.version, "chars": len(d.text), "holders": len(d.holders)}
                for d in self._docs.values()]

    def check_size(self, text: str) -> None:
        """RpcError(INVALID_PARAMS) for a text longer than a document may be (also the
        ``text`` of a stateless request: the same limit, whatever the way in)."""
        if len(text) > self.max_document_chars:
            raise RpcError(INVALID_PARAMS,
                           f"document of {len(text)} characters exceeds {self.max_document_chars}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
