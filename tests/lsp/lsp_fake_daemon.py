"""A small fake daemon speaking docs/rpc.md on a unix socket, for the LSP's tests.

It keeps each document's text by applying ``change`` offsets exactly as the real
daemon must, so a test can compare its copy against the editor's text. ``complete``
answers ``proposal`` (after ``delay`` seconds, unless cancelled or superseded);
``edit`` answers ``edit_text(original)``. Every request is recorded in ``calls``.

Run standalone (``python tests/lsp/lsp_fake_daemon.py SOCKET [--linger S] [--claim
--load S]``) it serves until killed; on SIGUSR1 it dies slowly, as a killed process can:
the socket and connections go first, the process ``--linger`` seconds later. ``--claim``:
take the socket's lock first, as ``ngramd serve`` does (exit 3 when another daemon holds
it), then "load the model" for ``--load`` seconds before serving.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

from ngramd.daemon.protocol import rpc  # noqa: E402


class FakeDaemon:
    def __init__(self, path: str, proposal: str = "fake_completion()\n    return 1") -> None:
        self.path = path
        self.proposal = proposal
        self.delay = 0.0  # seconds a complete takes (cancellable)
        self.edit_delay = 0.0  # seconds an edit takes (cancellable)
        self.edit_error: tuple[int, str] | None = None
        self.prepare_error: tuple[int, str] | None = None  # the answer to prepareEdit/prepareComplete, if an error
        self.edit_stop_reason = "stop_string"  # "max_tokens", "repetition": a rewrite cut off before its end
        self.complete_error: tuple[int, str] | None = None  # (code, message) every complete fails with
        self.complete_stop_reason = "stop_string"  # "max_tokens": a completion cut at its length limit
        self.complete_prompt = ""  # the prompt a complete says the model saw (FIM tokens: lsp/items.py)
        self.docs: dict[str, dict[str, Any]] = {}
        # the longest message read, said in the initialize answer; a longer one closes the
        # connection, as the real daemon does
        self.max_message_bytes = rpc.DEFAULT_MAX_MESSAGE_BYTES
        self.connections = 0
        self.max_document_chars = 8 << 20  # a longer document is refused (open, change), as the daemon does
        self.refuse_text: str | None = None  # a document holding this text is refused (open, change)
        # uris whose copy holds another editor's text (daemon/service/documents.py, "in sync"): this
        # client's change and versioned requests of them are refused until it opens them again
        self.out_of_sync: set[str] = set()
        self.drop_connections = 0  # this many next connections are closed unanswered (a dying daemon's backlog)
        self.calls: list[tuple[str, Any]] = []
        self.cancelled: list[Any] = []
        # running request per (uri, method): (requestId, cancel event); a newer one supersedes it
        self._jobs: dict[tuple[str, str], tuple[Any, asyncio.Event]] = {}
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> "FakeDaemon":
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        self._server = await asyncio.start_unix_server(self._serve, self.path)
        return self

    async def stop(self, announce: bool = False) -> None:
        """Close the socket and every connection, like a daemon that died; ``announce``: like
        one that was stopped (``ngramd stop``), which first tells every client it is exiting."""
        if announce:
            for w in list(self._writers):
                w.write(rpc.pack_notification(rpc.EXITING, {"reason": "shutdown"}))
            for w in list(self._writers):
                try:
                    await w.drain()
                except ConnectionError:
                    pass
        if self._server is not None:
            self._server.close()
            self._server = None
        for w in list(self._writers):
            w.close()
        if os.path.exists(self.path):
            os.unlink(self.path)

    def methods(self, name: str) -> list[Any]:
        return [p for m, p in self.calls if m == name]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self.drop_connections > 0:
            self.drop_connections -= 1
            writer.close()
            return
        self._writers.add(writer)
        frames = rpc.FrameReader(self.max_message_bytes)
        try:
            while data := await reader.read(65536):
                for obj in frames.feed(data):
                    msg = rpc.decode(obj)
                    if isinstance(msg, rpc.Request):
                        asyncio.ensure_future(self._answer(writer, msg))
        except (ConnectionError, rpc.RpcError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, msg: rpc.Request) -> None:
        self.calls.append((msg.method, msg.params))
        try:
            result = await self._handle(msg.method, msg.params or {})
            data = rpc.pack_response(msg.msgid, None, result)
        except rpc.RpcError as exc:
            data = rpc.pack_response(msg.msgid, exc.to_wire(), None)
        if not writer.is_closing():
            writer.write(data)

    def _check_text(self, text: str) -> None:
        if len(text) > self.max_document_chars:
            raise rpc.RpcError(rpc.INVALID_PARAMS, f"document of {len(text)} characters exceeds "
                                                   f"{self.max_document_chars}")
        if self.refuse_text is not None and self.refuse_text in text:
            raise rpc.RpcError(rpc.INVALID_PARAMS, "refused text")

    async def _handle(self, method: str, p: dict) -> Any:
        if method == "initialize":
            return {"server": "fake", "version": "0", "model": "fake", "device": "cpu", "pid": os.getpid(),
                    "maxMessageBytes": self.max_message_bytes, "maxDocumentChars": self.max_document_chars}
        if method == "open":
            self._check_text(p["text"])
            self.docs[p["uri"]] = {"text": p["text"], "version": p["version"]}
            self.out_of_sync.discard(p["uri"])
            return None
        if method != "open" and "version" in p:
            self._check_in_sync(p["uri"])
        if method == "change":
            doc = self.docs.get(p["uri"])
            if doc is None:
                raise rpc.RpcError(rpc.INVALID_PARAMS, f"{rpc.DOCUMENT_NOT_OPEN}{p['uri']}")
            if p["version"] <= doc["version"]:
                raise rpc.RpcError(rpc.CONTENT_MODIFIED, "stale version")
            text = doc["text"]
            for ch in p["changes"]:
                if "start" in ch:
                    assert 0 <= ch["start"] <= ch["end"] <= len(text), (ch, len(text))
                    text = text[:ch["start"]] + ch["text"] + text[ch["end"]:]
                else:
                    text = ch["text"]
            self._check_text(text)
            doc.update(text=text, version=p["version"])
            return None
        if method == "close":
            self.docs.pop(p["uri"], None)
            return None
        if method == "workspaceFolders":
            return None
        if method == "complete":
            return await self._complete(p)
        if method == "edit":
            if self.edit_error is not None:
                raise rpc.RpcError(*self.edit_error)
            if p["uri"] not in self.docs:  # the daemon's refusal (daemon/service/documents.py)
                raise rpc.RpcError(rpc.INVALID_PARAMS, f"{rpc.DOCUMENT_NOT_OPEN}{p['uri']}")
            text = self.docs[p["uri"]]["text"]  # as the daemon: the text when the request arrives
            await self._run((p["uri"], method), p.get("requestId"), self.edit_delay)
            return {**_result(text[p["start"]:p["end"]].upper()), "stop_reason": self.edit_stop_reason}
        if method in ("prepareEdit", "prepareComplete"):
            if self.prepare_error is not None:
                raise rpc.RpcError(*self.prepare_error)
            if p["uri"] not in self.docs:
                raise rpc.RpcError(rpc.INVALID_PARAMS, f"{rpc.DOCUMENT_NOT_OPEN}{p['uri']}")
            end, start = (p["end"], p["start"]) if method == "prepareEdit" else (p["offset"], 0)
            return {"tokens": end - start + 1, "prefilled": end - start, "reused": 0}
        if method == "cancel":
            n = 0
            for (uri, _), (rid, event) in list(self._jobs.items()):
                if p.get("uri") in (None, uri) and p.get("requestId") in (None, rid):
                    event.set()
                    self.cancelled.append(rid)
                    n += 1
            return {"cancelled": n}
        if method == "status":
            return {"daemon": {"server": "fake"}, "documents": {"open": len(self.docs)}}
        if method == "shutdown":
            return None
        raise rpc.RpcError(rpc.METHOD_NOT_FOUND, f"unknown method {method!r}")

    def _check_in_sync(self, uri: str) -> None:
        if uri in self.out_of_sync:  # the daemon's refusal (daemon/service/documents.py)
            raise rpc.RpcError(rpc.CONTENT_MODIFIED, f"{uri} holds another client's text since this one "
                                                     f"last sent it: send the whole text again")

    async def _complete(self, p: dict) -> Any:
        uri = p["uri"]
        if self.complete_error is not None:
            raise rpc.RpcError(*self.complete_error)
        if "text" not in p:
            doc = self.docs.get(uri)
            if doc is None:
                raise rpc.RpcError(rpc.INVALID_PARAMS, f"{rpc.DOCUMENT_NOT_OPEN}{uri}")
            if "version" in p and p["version"] != doc["version"]:
                raise rpc.RpcError(rpc.CONTENT_MODIFIED, "stale version")
        await self._run((uri, "complete"), p.get("requestId"), self.delay)
        return {**_result(self.proposal), "prompt": self.complete_prompt, "stop_reason": self.complete_stop_reason}

    async def _run(self, key: tuple[str, str], request_id: Any, seconds: float) -> None:
        """Take ``seconds`` unless cancelled (REQUEST_CANCELLED); supersedes the same key's job."""
        old = self._jobs.get(key)
        if old is not None:
            old[1].set()
        event = asyncio.Event()
        self._jobs[key] = (request_id, event)
        try:
            if seconds:
                try:
                    await asyncio.wait_for(event.wait(), seconds)
                except asyncio.TimeoutError:
                    pass
            if event.is_set():
                raise rpc.RpcError(rpc.REQUEST_CANCELLED, "cancelled")
        finally:
            if self._jobs.get(key, (None, None))[1] is event:
                del self._jobs[key]


def _result(text: str) -> dict[str, Any]:
    """A finished answer (the closing fence seen), as a complete rewrite or completion ends."""
    return {"text": text, "token_ids": [], "prompt": "", "stats": {}, "cancelled": False,
            "stop_reason": "stop_string"}


async def _main(path: str, linger: float) -> None:
    daemon = await FakeDaemon(path).start()
    dying = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, dying.set)
    await dying.wait()
    await daemon.stop()
    await asyncio.sleep(linger)


if __name__ == "__main__":
    args = argparse.ArgumentParser()
    args.add_argument("socket")
    args.add_argument("--linger", type=float, default=1.0)
    args.add_argument("--claim", action="store_true")
    args.add_argument("--load", type=float, default=0.0)
    opts = args.parse_args()
    if opts.claim:
        import time
        from pathlib import Path

        from ngramd.daemon.protocol.paths import AlreadyRunning, claim_socket

        try:
            lock = claim_socket(Path(opts.socket))  # held until this process exits
        except AlreadyRunning:
            sys.exit(3)  # ngramd.daemon.protocol.paths.EXIT_ALREADY_RUNNING
        time.sleep(opts.load)
    asyncio.run(_main(opts.socket, opts.linger))
