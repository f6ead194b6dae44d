"""The daemon's RPC methods (docs/rpc.md): validation, documents, index, model worker.

Vocabulary:
- *connection id* (``conn``): one client socket; documents remember which
  connections hold them, jobs which connection asked for them.
- *handler*: ``async def _m_<method>(conn, params)``; it validates ``params``
  fully (types and ranges) and raises ``RpcError`` for anything wrong, which the
  server turns into an error reply.

Ordering: every handler does its bookkeeping (documents, index submission,
worker submission) *synchronously before its first await*, and the server starts
handlers in arrival order, so pipelined ``open``/``change``/``complete`` on one
connection see each other in order. The index is updated on threads of its own
(``_index_exec``: each document's updates in order, one at a time, so that a big one
being tokenized holds up no other's) and the model on the worker's thread; the event
loop only validates, enqueues and awaits, so it always stays responsive.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import ctypes
import functools
import logging
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable
from urllib.parse import unquote, urlparse

from ngramd.daemon import package_version
from ngramd.daemon.service.documents import DocumentStore, parse_changes
from ngramd.daemon.service.keyed_executor import KeyedExecutor
from ngramd.daemon.service.model_port import ModelPort
from ngramd.daemon.protocol.requests import (
    CompletionRequest, EditRequest, GenerationStats, SamplingParams, check_instruction, check_sampling,
)
from ngramd.daemon.protocol.paths import UNRESOLVABLE
from ngramd.daemon.protocol.rpc import DEFAULT_MAX_MESSAGE_BYTES, INVALID_PARAMS, METHOD_NOT_FOUND, REQUEST_CANCELLED, RpcError
from ngramd.daemon.workspace.watcher import WorkspaceWatcher
from ngramd.daemon.service.worker import PREFETCH, PREPARE_COMPLETE, PREPARE_EDIT, Job, Worker

log = logging.getLogger("ngramd.service")

SERVER_NAME = "ngramd"
MAX_TOKENS_LIMIT = 4096
MAX_URI_CHARS = 4096
# A change with more range edits than this reaches the index as one open_buffer of the final
# text, so the document's index updates (which its clients' next open/change waits on) are one,
# not hundreds ("Replace All"). A judgement, not a measured optimum: one run with the tiny model's
# tokenizer on a 900K-character buffer gave 8 ms per edit and 3.1 s per open (the switch pays
# from ~400 edits there, sooner on smaller buffers, where an open costs less).
MAX_MIRRORED_EDITS = 256
# threads that mirror documents into the index (one document's updates run one at a time):
# this many big documents being tokenized at once hold up the others
INDEX_THREADS = 3
UNKNOWN_METHOD = "<unknown>"  # the key of requests.by_method that counts unknown methods
COMMAND_LINE = -1  # the owner of `ngramd serve --workspace` folders (connections count from 1)
# a folder whose editors all disconnected stays watched this long (an editor restart finds it
# indexed), then goes at the next connection: every watched directory holds an inotify watch
ORPHAN_GRACE_S = 600.0


class Service:
    """Method handlers over shared state. ``completer`` has ``complete(req, cancel)``
    (and optionally ``edit``); ``index`` is an NgramIndex or None."""

    def __init__(self, completer: ModelPort, index: Any, *, model_name: str = "", device: str = "",
                 dtype: str = "", socket_path: str = "", max_message_bytes: int = 0, prefetch: bool = True) -> None:
        self.completer = completer
        self.prefetch = prefetch  # decode the next suggestion in idle time after each answer
        self.index = index
        self.info = {"model": model_name, "device": device, "dtype": dtype,
                     "socket": socket_path, "max_message_bytes": max_message_bytes}
        self.docs = DocumentStore()
        self.worker = Worker(on_out_of_memory=getattr(completer, "release_memory", None))
        self._index_exec = KeyedExecutor(INDEX_THREADS, thread_name_prefix="ngramd-index")
        self._misc_exec = ThreadPoolExecutor(1, thread_name_prefix="ngramd-misc")  # may wait on the engine
        self._trim_exec = ThreadPoolExecutor(1, thread_name_prefix="ngramd-trim")  # ``_give_back_memory``
        self.watcher = WorkspaceWatcher(index, self._path_is_open) if index is not None else None
        self.started = time.time()
        self.clients: dict[int, str] = {}  # conn -> client name ("" until initialize)
        # workspace folder -> the connections that asked for it (COMMAND_LINE: `serve --workspace`)
        self._folder_owners: dict[Path, set[int]] = {}
        self._orphaned: dict[Path, float] = {}  # folder -> when its last owner disconnected (monotonic)
        self.orphan_grace_s = ORPHAN_GRACE_S
        self.requests = collections.Counter()  # method -> count (requests and notifications)
        self.errors = collections.Counter()  # error code -> count
        self.totals = GenerationStats()
        self.index_errors = 0
        self.shutdown_requested: asyncio.Event | None = None  # set by the server's loop
        self._open_paths: dict[Path, int] = {}  # file path -> number of open uris naming it
        self._uri_paths: dict[str, Path] = {}  # open uri -> the file path counted for it at its open
        self._trim_queued = False  # a release of freed memory is queued (``_give_back_memory``)
        self._edit_bound: Any = self._length_bound()  # ngramd.daemon.edit.editor.LengthBound of the model (False: none)
        self._handlers: dict[str, Callable[..., Any]] = {
            name[3:]: getattr(self, name) for name in dir(self) if name.startswith("_m_")
        }

    @property
    def methods(self) -> list[str]:
        return sorted(self._handlers)

    # -- entry points for the server ----------------------------------------------------

    async def dispatch(self, conn: int, method: str, params: Any) -> Any:
        handler = self._handlers.get(method)
        # made-up names share one counter: each one kept would grow every status reply
        self.requests[method if handler is not None else UNKNOWN_METHOD] += 1
        if handler is None:
            raise RpcError(METHOD_NOT_FOUND, f"unknown method {method[:100]!r}; "
                                             f"methods: {', '.join(self.methods)}")
        if params is None or params == []:
            params = {}  # msgpack-RPC clients often send an empty array for "no params"
        if not isinstance(params, dict):
            raise RpcError(INVALID_PARAMS, f"params of {method} must be a map, "
                                           f"not {type(params).__name__}")
        return await handler(conn, params)

    def client_connected(self, conn: int) -> None:
        self.clients[conn] = ""
        self._drop_orphans()

    def client_gone(self, conn: int) -> None:
        """A connection closed: cancel its jobs, release its documents.

        Its workspace folders stay watched (an editor that restarts finds them
        indexed); one that no other connection holds goes when any client removes
        it, or at a connection after ``orphan_grace_s``."""
        self.clients.pop(conn, None)
        now = time.monotonic()
        for root, owners in self._folder_owners.items():
            if conn in owners:
                owners.discard(conn)
                if not owners:
                    self._orphaned[root] = now
        self.worker.cancel(lambda j: j.conn == conn, "client disconnected")
        self.worker.forget_client(conn)
        for uri in self.docs.release_all(conn):
            self._after_close(uri)

    def cancel_all(self, reason: str) -> int:
        """Cancel every queued and running request (each gets its REQUEST_CANCELLED answer)."""
        return self.worker.cancel(lambda job: True, reason)

    def close(self) -> None:
        self.worker.stop()
        if self.watcher is not None:
            self.watcher.stop()
        self._index_exec.shutdown()
        self._misc_exec.shutdown(wait=False, cancel_futures=True)
        self._trim_exec.shutdown(wait=False, cancel_futures=True)

    # -- methods ------------------------------------------------------------------------

    async def _m_initialize(self, conn: int, p: dict) -> Any:
        client = _opt(p, "client", str, "")
        folders = _opt(p, "workspaceFolders", list, [])
        roots = [_folder_path(f, i) for i, f in enumerate(folders)]
        self.clients[conn] = client[:200]
        for root in roots:
            self.add_workspace(root, conn)
        return {"server": SERVER_NAME, "version": package_version(), "model": self.info["model"],
                "device": self.info["device"], "pid": os.getpid(),
                "maxMessageBytes": self.info["max_message_bytes"] or DEFAULT_MAX_MESSAGE_BYTES,
                "maxDocumentChars": self.docs.max_document_chars}

    async def _m_workspaceFolders(self, conn: int, p: dict) -> Any:
        added = [_folder_path(f, i) for i, f in enumerate(_opt(p, "added", list, []))]
        removed = [_folder_path(f, i, must_exist=False) for i, f in enumerate(_opt(p, "removed", list, []))]
        for root in added:
            self.add_workspace(root, conn)
        for root in removed:
            self.remove_workspace(root, conn)
        return None

    async def _m_open(self, conn: int, p: dict) -> Any:
        uri = _uri(p)
        text = _req(p, "text", str)
        version = _req_int(p, "version")
        language_id = _opt(p, "languageId", str, "")
        path = _local_path(uri, "'uri'")  # before the open: a refused uri leaves no document behind
        was_open = uri in self.docs
        self.docs.open(conn, uri, text, version, language_id[:100])
        if not was_open:
            self._track_open(uri, path)
        await self._index_call("open_buffer", uri, text)
        return None

    async def _m_change(self, conn: int, p: dict) -> Any:
        uri = _uri(p)
        version = _req_int(p, "version")
        changes = parse_changes(p.get("changes"))
        edits = self.docs.change(uri, version, changes, conn)
        if len(edits) > MAX_MIRRORED_EDITS or any(edit.full for edit in edits):
            # one re-sync with the final text (see MAX_MIRRORED_EDITS)
            await self._index_call("open_buffer", uri, self.docs.get(uri).text)
            return None
        futures = []
        for edit in edits:
            futures.append(self._index_submit("edit_buffer", uri, edit.start, edit.end, edit.text, edit.result))
        ok = True
        for fut in futures:
            if fut is not None:
                ok = await self._await_index(fut) and ok
        if not ok and uri in self.docs:  # the index's copy may have drifted: give it the whole text again
            await self._index_call("open_buffer", uri, self.docs.get(uri).text)
        return None

    async def _m_close(self, conn: int, p: dict) -> Any:
        uri = _uri(p)
        if self.docs.close(conn, uri):
            self._after_close(uri)
        return None

    async def _m_complete(self, conn: int, p: dict) -> Any:
        uri = _uri(p)
        text = self._document_text(uri, p, conn)
        offset = _req_int(p, "offset", 0, len(text))
        sampling = _sampling(p)
        stop = _opt(p, "stop", list, [])
        if not all(isinstance(s, str) and s for s in stop) or len(stop) > 16:
            raise RpcError(INVALID_PARAMS, "'stop' must be up to 16 non-empty strings")
        req = CompletionRequest(
            uri=uri, text=text, offset=offset,
            max_tokens=_opt_int(p, "maxTokens", 64, 1, MAX_TOKENS_LIMIT),
            multiline=_opt(p, "multiline", bool, True),
            sampling=sampling,
            speculate=_opt(p, "speculate", bool, True),
            stop=tuple(stop),
        )
        answer = await self._run_job("complete", conn, p, lambda cancel: self.completer.complete(req, cancel),
                                     as_dict=False)
        self._prefetch_after(conn, req, answer)
        return answer.to_dict() if hasattr(answer, "to_dict") else answer

    def _prefetch_after(self, conn: int, req: CompletionRequest, answer: Any) -> None:
        """Queue the next suggestion's decoding, as if ``answer`` were accepted, at the lowest
        priority: any request preempts it (daemon/service/worker.py ``DEFERENCE``)."""
        prefetch = getattr(self.completer, "prefetch_after", None)
        if not self.prefetch or not callable(prefetch) or not getattr(answer, "text", ""):
            return
        loop = asyncio.get_running_loop()
        job = Job(kind=PREFETCH, uri=req.uri, fn=lambda cancel: prefetch(req, answer, cancel),
                  future=loop.create_future(), loop=loop, conn=conn)
        job.future.add_done_callback(_log_prefetch_failure)
        self.worker.submit(job)

    async def _m_prepareComplete(self, conn: int, p: dict) -> Any:
        """Prefill the completion prompt at ``offset`` while the cursor rests there; the job gives
        way to any request and to a rewrite's prepare (daemon/service/worker.py, "preempted")."""
        uri = _uri(p)
        text = self._document_text(uri, p, conn)
        offset = _req_int(p, "offset", 0, len(text))
        prepare = getattr(self.completer, "prepare_complete", None)
        if not callable(prepare):
            raise RpcError(METHOD_NOT_FOUND, "this engine does not support 'prepareComplete'")
        return await self._run_job(PREPARE_COMPLETE, conn, p, lambda cancel: prepare(uri, text, offset, cancel))

    def _edit_range(self, p: dict, conn: int) -> tuple[str, str, int, int]:
        """An edit's (or prepareEdit's) document: its uri, text, and the range's start and end."""
        uri = _uri(p)
        text = self._document_text(uri, p, conn)
        start = _req_int(p, "start", 0, len(text))
        return uri, text, start, _req_int(p, "end", start, len(text))

    async def _m_edit(self, conn: int, p: dict) -> Any:
        uri, text, start, end = self._edit_range(p, conn)
        instruction = _req(p, "instruction", str)
        max_tokens = _opt_int(p, "maxTokens", None, 1, MAX_TOKENS_LIMIT)  # None: the engine's default
        if not callable(getattr(self.completer, "edit", None)):
            raise RpcError(METHOD_NOT_FOUND, "this engine does not support 'edit'")
        for name in ("stop", "multiline"):  # completion options: an edit ends with its rewritten selection
            if name in p:
                raise RpcError(INVALID_PARAMS, f"'edit' does not take {name!r}: an edit stops at the end "
                                               f"of the rewritten selection")
        req = EditRequest(uri=uri, text=text, start=start, end=end, instruction=instruction,
                          max_tokens=max_tokens, sampling=_sampling(p),
                          speculate=_opt(p, "speculate", bool, True), stop_loops=_opt(p, "stopLoops", bool, True))
        try:  # here, before queueing: a bad request must not supersede or wait behind good ones
            check_instruction(instruction)
            self._check_edit_length(text, start, end, instruction)
        except ValueError as exc:
            raise RpcError(INVALID_PARAMS, str(exc)) from None
        return await self._run_job("edit", conn, p, lambda cancel: self.completer.edit(req, cancel))

    async def _m_prepareEdit(self, conn: int, p: dict) -> Any:
        """Prefill an edit's prompt up to its instruction, or through the ``instruction`` typed so
        far, while the user types it; the job gives way to any other request (daemon/service/worker.py,
        "preempted")."""
        uri, text, start, end = self._edit_range(p, conn)
        instruction = _opt(p, "instruction", str, None)
        prepare = getattr(self.completer, "prepare_edit", None)
        if not callable(prepare):
            raise RpcError(METHOD_NOT_FOUND, "this engine does not support 'prepareEdit'")
        typed = instruction is not None and instruction.strip() != ""
        try:  # an edit of this range could never run: say so now, not when the edit is asked
            if typed:
                check_instruction(instruction)
            self._check_edit_length(text, start, end, instruction if typed else "")
        except ValueError as exc:
            raise RpcError(INVALID_PARAMS, str(exc)) from None
        typed_so_far = instruction if typed else None  # None: the prompt up to the instruction
        return await self._run_job(PREPARE_EDIT, conn, p,
                                   lambda cancel: prepare(uri, text, start, end, cancel, typed_so_far))

    def _check_edit_length(self, text: str, start: int, end: int, instruction: str) -> None:
        """ValueError for an edit too long for the model, judged from characters (nothing is
        tokenized here); one found too long only once tokenized is refused by its job."""
        if self._edit_bound is None:  # a runtime set after the service was built
            self._edit_bound = self._length_bound()
        if self._edit_bound:
            self._edit_bound.check(text, start, end, instruction)

    def _length_bound(self) -> Any:
        """The model's edit length bound; False when the model does not tell its positions, None
        when there is no model yet. Found when the service is built, before its event loop runs:
        it reads every token's bytes (~0.15 s for a 49k vocabulary), which would stall the loop."""
        bound = getattr(self.completer, "edit_length_bound", None)
        return bound() if callable(bound) else None

    async def _m_cancel(self, conn: int, p: dict) -> Any:
        uri = p.get("uri")
        request_id = p.get("requestId")
        if uri is None and request_id is None:
            raise RpcError(INVALID_PARAMS, "cancel needs 'uri' or 'requestId'")
        if uri is not None:
            uri = _uri(p)
        if request_id is not None:
            _check_request_id(request_id)

        # A requestId is chosen by its client, so two clients may use the same one: it names
        # only the caller's own requests. A uri alone reaches every client's requests for that
        # document (its close does too; a newer request supersedes only its own client's).
        def match(job: Job) -> bool:
            return ((uri is None or job.uri == uri)
                    and (request_id is None or (job.request_id == request_id and job.conn == conn)))
        return {"cancelled": self.worker.cancel(match, "cancelled")}

    async def _m_status(self, conn: int, p: dict) -> Any:
        return self.status()

    async def _m_shutdown(self, conn: int, p: dict) -> Any:
        if self.shutdown_requested is not None:
            # after this reply is written: the server checks the event once it has sent it
            asyncio.get_running_loop().call_soon(self.shutdown_requested.set)
        return None

    # -- helpers --------------------------------------------------------------------------

    def add_workspace(self, root: Path, owner: int = COMMAND_LINE) -> None:
        """Index and watch ``root`` for ``owner`` (a connection, or the command line)."""
        self._folder_owners.setdefault(root, set()).add(owner)
        self._orphaned.pop(root, None)
        if self.watcher is not None:
            self.watcher.add_folder(root)

    def remove_workspace(self, root: Path, owner: int) -> None:
        """``owner`` closed ``root``: stop watching it and drop its files once nobody has it open.

        The daemon serves every editor of the user: one editor closing a folder
        must not take it from another, nor from ``serve --workspace``."""
        owners = self._folder_owners.get(root)
        if owners is None:
            return
        owners.discard(owner)
        if not owners:
            self._drop_folder(root)

    def _drop_folder(self, root: Path) -> None:
        self._folder_owners.pop(root, None)
        self._orphaned.pop(root, None)
        if self.watcher is not None:
            self.watcher.remove_folder(root)

    def _drop_orphans(self) -> None:
        """Folders no connection has held for ``orphan_grace_s`` stop being watched and indexed."""
        now = time.monotonic()
        for root, since in list(self._orphaned.items()):
            if now - since >= self.orphan_grace_s:
                self._drop_folder(root)

    def status(self) -> dict[str, Any]:
        index_stats: Any = None
        if self.index is not None:
            try:
                index_stats = self.index.stats()
            except Exception as exc:
                index_stats = {"error": f"{type(exc).__name__}: {exc}"}
        docs = self.docs.summary()
        return {
            "daemon": {"server": SERVER_NAME, "version": package_version(), "pid": os.getpid(),
                       "uptime_s": round(time.time() - self.started, 1), "ready": True,
                       "socket": self.info["socket"],
                       "max_message_bytes": self.info["max_message_bytes"],
                       "clients": [{"conn": c, "client": n, "queue": self.worker.client_waits(c)}
                                   for c, n in self.clients.items()]},
            "model": {"name": self.info["model"], "device": self.info["device"],
                      "dtype": self.info["dtype"], "packed_weights_bytes": self._packed_bytes()},
            "memory": memory_figures(),
            "index": index_stats,
            "workspace": self.watcher.status() if self.watcher is not None else None,
            "documents": {"open": len(docs), "list": docs[:100]},
            "requests": {"by_method": dict(self.requests),
                         "errors": {str(k): v for k, v in self.errors.items()},
                         "index_errors": self.index_errors,
                         **self.worker.snapshot()},
            "generation": self.totals.to_dict(),
            "engine": self._engine_stats(),
        }

    def _packed_bytes(self) -> int | None:
        """Memory of the CPU's packed weight copies (daemon/runtime/fast_linear.py); None without a model."""
        figures = getattr(self.completer, "memory_figures", None)
        return figures().get("packed_weights_bytes") if callable(figures) else None

    def _engine_stats(self) -> Any:
        stats = getattr(self.completer, "stats", None)
        if not callable(stats):
            return None
        try:
            return stats()
        except Exception as exc:  # figures only; never fail status over them
            return {"error": f"{type(exc).__name__}: {exc}"}

    def _document_text(self, uri: str, p: dict, conn: int) -> str:
        """The text to complete: ``text`` if given (stateless use), else the open document's."""
        if "text" in p:  # stateless: a ``version`` names no document here, so it is not checked
            text = _req(p, "text", str)
            self.docs.check_size(text)
            return text
        version = _req_int(p, "version") if "version" in p else None
        return self.docs.text_at(uri, version, conn)

    async def _run_job(self, kind: str, conn: int, p: dict, fn: Callable[[Any], Any], as_dict: bool = True) -> Any:
        request_id = p.get("requestId")
        if request_id is not None:
            _check_request_id(request_id)
        if self.shutdown_requested is not None and self.shutdown_requested.is_set():
            # the server waits out the work it cancelled at shutdown; new work would run on the
            # model meanwhile, for a client about to lose its connection
            raise RpcError(REQUEST_CANCELLED, "the daemon is shutting down")
        loop = asyncio.get_running_loop()
        job = Job(kind=kind, uri=p["uri"], fn=fn, future=loop.create_future(), loop=loop,
                  conn=conn, request_id=request_id)
        was_open = job.uri in self.docs
        self.worker.submit(job)
        try:
            result = await job.future
        finally:
            if kind == "edit" and was_open and job.uri not in self.docs:
                # its document closed while it waited or ran (a rewrite runs on): the cache it
                # built after the close dropped the document's goes too
                self._drop_caches(job.uri)
        stats = getattr(result, "stats", None)
        if isinstance(stats, GenerationStats):
            self.totals.merge(stats)
        return result.to_dict() if as_dict and hasattr(result, "to_dict") else result

    def _index_submit(self, name: str, uri: str, *args: Any) -> Any:
        """``index.<name>(uri, *args)`` after the updates of ``uri`` submitted before; None without an index."""
        if self.index is None:
            return None
        return self._index_exec.submit(uri, getattr(self.index, name), uri, *args)

    async def _await_index(self, fut: Any) -> bool:
        """False (logged and counted) when the index update failed."""
        try:
            await asyncio.wrap_future(fut)
            return True
        except Exception:  # the document is updated; the index is only an aid to drafting
            self.index_errors += 1
            log.exception("index update failed")
            return False

    async def _index_call(self, name: str, uri: str, *args: Any) -> None:
        fut = self._index_submit(name, uri, *args)
        if fut is not None:
            await self._await_index(fut)

    def _after_close(self, uri: str) -> None:
        # its prepares and completions first (nobody will read them): one queued behind the cache's
        # drop would build the cache again. A rewrite runs on: the editor may still apply it.
        self.worker.cancel(lambda job: job.uri == uri and job.kind != "edit", "cancelled")
        fut = self._index_submit("close_buffer", uri)
        if fut is not None:
            fut.add_done_callback(_log_failure)
        dropped = self._drop_caches(uri)
        self._give_back_memory([f for f in (fut, dropped) if f is not None])
        path = self._track_close(uri)
        if path is not None and self.watcher is not None:
            self.watcher.reindex_from_disk(path)  # the disk counts again

    def _give_back_memory(self, drops: list[Any]) -> None:
        """Once a closed document's index copy and caches are dropped (``drops``, their futures),
        hand the freed heap back to the system (``release_freed_memory``): a closed 6 Mi-character
        document kept ~0.4-1 GB resident, all of it free to malloc, none held. On a thread of
        its own (a cache's drop must not wait behind it); closes meanwhile share one."""
        if self._trim_queued:
            return
        self._trim_queued = True

        def trim() -> None:
            self._trim_queued = False
            concurrent.futures.wait(drops)
            try:
                release_freed_memory()
            except Exception:
                log.exception("giving freed memory back failed")
        self._trim_exec.submit(trim)

    def _drop_caches(self, uri: str) -> Any:
        """Have the engine forget ``uri``'s KV caches (it waits for the engine's lock: off the
        loop); the drop's future, None without caches."""
        forget = getattr(self.completer, "forget", None)
        if callable(forget):
            # noted at once, so that no request after this close finds them (engine_lock.py);
            # freed once the work running now lets go of the model
            forget(uri)
            fut = self._misc_exec.submit(self.completer.release_forgotten)
            fut.add_done_callback(_log_failure)
            return fut
        drop = getattr(self.completer, "drop_cache", None)
        if callable(drop):
            fut = self._misc_exec.submit(drop, uri)
            fut.add_done_callback(_log_failure)
            return fut
        return None

    def _track_open(self, uri: str, path: Path | None) -> None:
        """Count ``uri``'s file (``path``, None for no local file) as open, by the path it
        resolves to now, remembered for the close (a symlink on the way may be changed or
        removed while it is open)."""
        if path is None:
            return
        try:
            path = path.resolve()  # the watcher reports resolved paths
        except UNRESOLVABLE:  # a NUL byte, a symlink loop
            return
        self._uri_paths[uri] = path
        self._open_paths[path] = self._open_paths.get(path, 0) + 1

    def _track_close(self, uri: str) -> Path | None:
        """Undo ``_track_open``; the path counted, if any."""
        path = self._uri_paths.pop(uri, None)
        if path is None:
            return None
        n = self._open_paths.get(path, 0) - 1
        if n > 0:
            self._open_paths[path] = n
        else:
            self._open_paths.pop(path, None)
        return path

    def _path_is_open(self, path: Path) -> bool:
        return path in self._open_paths  # read from the watcher thread: a dict lookup is atomic


# -- parameter validation ---------------------------------------------------------------

_TYPE_NAMES = {str: "a string", int: "an integer", bool: "a boolean", list: "an array",
               dict: "a map", float: "a number"}


def _type_ok(value: Any, typ: type) -> bool:
    if typ is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if typ is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, typ)


def _req(p: dict, key: str, typ: type) -> Any:
    if key not in p:
        raise RpcError(INVALID_PARAMS, f"missing parameter '{key}'")
    value = p[key]
    if not _type_ok(value, typ):
        raise RpcError(INVALID_PARAMS, f"'{key}' must be {_TYPE_NAMES[typ]}, not {type(value).__name__}")
    return value


def _opt(p: dict, key: str, typ: type, default: Any) -> Any:
    if p.get(key) is None:
        return default
    return _req(p, key, typ)


def _req_int(p: dict, key: str, lo: int | None = None, hi: int | None = None) -> int:
    value = _req(p, key, int)
    return _check_range(key, value, lo, hi)


def _opt_int(p: dict, key: str, default: int | None, lo: int, hi: int) -> int | None:
    if p.get(key) is None:
        return default
    return _check_range(key, _req(p, key, int), lo, hi)


def _check_range(key: str, value: Any, lo: Any, hi: Any) -> Any:
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise RpcError(INVALID_PARAMS, f"'{key}'={value} out of range [{lo}, {hi}]")
    return value


def _sampling(p: dict) -> SamplingParams:
    seed = _req(p, "seed", int) if p.get("seed") is not None else None
    sampling = SamplingParams(temperature=float(_opt(p, "temperature", float, 0.0)),
                              top_p=float(_opt(p, "topP", float, 1.0)), seed=seed)
    try:  # the rule the CLI and in-process callers share
        check_sampling(sampling, names=("'temperature'", "'topP'", "'seed'"))
    except ValueError as exc:
        raise RpcError(INVALID_PARAMS, str(exc)) from None
    return sampling


def _uri(p: dict) -> str:
    uri = _req(p, "uri", str)
    if not uri or len(uri) > MAX_URI_CHARS:
        raise RpcError(INVALID_PARAMS, f"'uri' must be 1..{MAX_URI_CHARS} characters")
    return uri


def _check_request_id(request_id: Any) -> None:
    if not (_type_ok(request_id, int) or (isinstance(request_id, str) and len(request_id) <= 200)):
        raise RpcError(INVALID_PARAMS, "'requestId' must be an integer or a short string")


def _folder_path(value: Any, i: int, must_exist: bool = True) -> Path:
    if not isinstance(value, str) or not value:
        raise RpcError(INVALID_PARAMS, f"workspace folder {i} must be a path or file:// uri")
    path = _local_path(value, "workspace folder") if value.startswith("file:") else Path(value)
    if path is None or not path.is_absolute():
        raise RpcError(INVALID_PARAMS, f"workspace folder {value[:200]!r} must be absolute")
    try:
        if must_exist and not path.is_dir():
            raise RpcError(INVALID_PARAMS, f"workspace folder {value[:200]!r} is not a directory")
        return path.resolve()
    except UNRESOLVABLE as exc:
        raise RpcError(INVALID_PARAMS, f"workspace folder {value[:200]!r}: {exc}") from exc


def _local_path(uri: str, what: str) -> Path | None:
    """``uri_to_path``, with INVALID_PARAMS for a ``file:`` uri that does not parse."""
    try:
        return uri_to_path(uri)
    except ValueError as exc:
        raise RpcError(INVALID_PARAMS, f"{what} {uri[:200]!r} is not a valid file uri ({exc})") from None


def uri_to_path(uri: str) -> Path | None:
    """The local path of a ``file://`` uri (None for other schemes, and for another host);
    ValueError for a ``file:`` uri that does not parse (a ``[`` or an NFKC-changed
    character in its host)."""
    if not uri.startswith("file:"):
        return None
    parsed = urlparse(uri)
    if parsed.netloc not in ("", "localhost"):
        return None
    path = Path(unquote(parsed.path))
    return path if path.is_absolute() else None


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Any:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


def release_freed_memory() -> bool:
    """Return the heap memory freed in this process to the system (glibc's ``malloc_trim``):
    glibc keeps it for later allocations, in every thread's arena, so the RSS stays at its
    peak; False where there is no glibc."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


_HUGE_PAGES_READ: list[Any] = [float("-inf"), None]  # (monotonic time, bytes) of the last read


def huge_page_bytes(max_age_s: float = 1.0) -> int | None:
    """This process's anonymous memory in 2 MB pages (``AnonHugePages``: the model's, where
    daemon/runtime/huge_pages.py got them), or None where unknown. Read at most once a
    ``max_age_s``: the kernel walks every mapping for it, and a client may poll status fast."""
    now = time.monotonic()
    if now - _HUGE_PAGES_READ[0] < max_age_s:
        return _HUGE_PAGES_READ[1]
    _HUGE_PAGES_READ[:] = [now, _read_huge_page_bytes()]
    return _HUGE_PAGES_READ[1]


def _read_huge_page_bytes() -> int | None:
    try:
        with open("/proc/self/smaps_rollup", encoding="ascii") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def memory_figures() -> dict[str, Any]:
    out: dict[str, Any] = {"rss_bytes": None}
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    out["rss_bytes"] = int(line.split()[1]) * 1024
    except OSError:
        try:
            import psutil
            out["rss_bytes"] = psutil.Process().memory_info().rss
        except Exception:
            pass
    out["huge_page_bytes"] = huge_page_bytes()
    torch = sys.modules.get("torch")  # only if the model already imported it
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda_allocated_bytes"] = int(torch.cuda.memory_allocated())
        out["cuda_reserved_bytes"] = int(torch.cuda.memory_reserved())
    return out


def _log_prefetch_failure(fut: asyncio.Future) -> None:
    """A prefetch preempted or failed costs nothing but its work: logged, never raised."""
    if fut.cancelled():
        return
    exc = fut.exception()
    if exc is not None and not (isinstance(exc, RpcError) and exc.code == REQUEST_CANCELLED):
        log.warning("prefetch failed: %s", exc)


def _log_failure(fut: Any) -> None:
    exc = fut.exception()
    if exc is not None:
        log.error("index update failed: %s", exc)
