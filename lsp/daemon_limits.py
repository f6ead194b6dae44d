"""What the connected daemon takes: the longest message it reads and the longest document
it keeps (its ``initialize`` answer: ``maxMessageBytes``, ``maxDocumentChars``).

A document over either is *too large*: the LSP sends nothing of it (lsp/server.py). The
checks are cheap enough for every keystroke: see ``message_fits``.

Torch-free: the LSP imports this.
"""

from __future__ import annotations

from typing import Any

from ngramd.daemon.protocol import rpc
from ngramd.daemon.protocol.rpc import DEFAULT_MAX_DOCUMENT_CHARS

# How much longer than its smallest a packed request can be for the same params: the msgid
# (msgpack int, up to 9 bytes) and the header of its long string (up to 5).
PACKING_SLACK = 16


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class DaemonLimits:
    """The limits of the daemon the LSP is connected to (its defaults until it says)."""

    def __init__(self) -> None:
        self.max_message_bytes = rpc.DEFAULT_MAX_MESSAGE_BYTES
        self.max_document_chars = DEFAULT_MAX_DOCUMENT_CHARS

    def update(self, info: dict[str, Any]) -> None:
        """From an ``initialize`` answer; an older daemon that does not say gets the defaults."""
        self.max_message_bytes = _positive_int(info.get("maxMessageBytes")) or rpc.DEFAULT_MAX_MESSAGE_BYTES
        self.max_document_chars = _positive_int(info.get("maxDocumentChars")) or DEFAULT_MAX_DOCUMENT_CHARS

    def document_fits(self, open_params: dict[str, Any]) -> bool:
        """Whether the daemon keeps the document of this ``open`` and reads the message."""
        return (len(open_params["text"]) <= self.max_document_chars
                and message_fits("open", open_params, "text", self.max_message_bytes))

    def too_large_reason(self, uri: str, text: str) -> str:
        """Why the document ``uri`` holding ``text`` does not fit (encodes it: call it once)."""
        if len(text) > self.max_document_chars:
            return (f"{uri} has {len(text):,} characters, more than the daemon keeps in a document "
                    f"({self.max_document_chars:,}), so it gets no completions or rewrites")
        size = len(text.encode("utf-8", "surrogatepass"))
        return (f"{uri} is {size:,} bytes, longer than the daemon reads in one message "
                f"({self.max_message_bytes:,} bytes), so it gets no completions or rewrites; "
                f"a daemon started with a larger `ngramd serve --max-message-bytes` takes it")


def message_fits(method: str, params: dict[str, Any], text_key: str, limit: int) -> bool:
    """Whether the request ``method(params)`` packs to at most ``limit`` bytes; one within
    ``PACKING_SLACK`` of the limit counts as too long (never send what may be refused).

    Counted without packing its one long string ``params[text_key]``: a code point is 1 to
    4 UTF-8 bytes (4 only past U+FFFF, two UTF-16 units: at most 3 bytes per unit), so the
    text is encoded to count its bytes only when its length puts it near the limit. Lone
    surrogates count 3 bytes, as the U+FFFD they are sent as (lsp/daemon_client.py)."""
    text = params[text_key]
    rest = len(rpc.pack_request(0, method, {**params, text_key: ""})) + PACKING_SLACK
    if text.isascii():  # O(1) in CPython: a byte per character
        return rest + len(text) <= limit
    if rest + len(text) > limit:
        return False
    if rest + 4 * len(text) <= limit:
        return True
    return rest + len(text.encode("utf-8", "surrogatepass")) <= limit
