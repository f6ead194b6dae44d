"""``ngramd serve``, ``ngramd status``, ``ngramd stop``.

``serve`` order, so that a client never connects to a half-started daemon:
1. claim the socket (flock ``<socket>.lock``; refuse if another daemon holds it
   or answers on the socket; remove a stale socket file) — cheap, before the model;
2. load the model and build the index and engine;
3. bind the socket (0600), print ``ngramd: ready on <socket> (pid N)`` on stdout;
4. index and watch ``--workspace`` folders in the background (progress in status);
5. bind the socket again if its file is removed (daemon/service/server.py), or exit.

Exit codes of ``serve``: 0 clean stop, 1 error (the socket; a model load that fails unforeseen),
2 bad input on the command line (``--workspace``, ``--max-message-bytes``, ``--max-indexed-tokens``,
a ``--model`` or ``--device`` that cannot be loaded: ``ModelLoadError``, as ``complete``, ``edit``
and ``bench`` have it), 3 another daemon already serves that socket. ``status`` and ``stop``: 0,
or 1 when no daemon answers as one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from ngramd.daemon.protocol.paths import (EXIT_ALREADY_RUNNING, UNRESOLVABLE, AlreadyRunning, SocketLock, claim_socket,
                          resolve_socket_path, socket_is_live)
from ngramd.daemon.protocol.rpc import DEFAULT_MAX_MESSAGE_BYTES

# The least --max-message-bytes: a negative limit breaks msgpack's reader (every connection
# dies inside a daemon that looks ready), and a few hundred bytes refuse all but the smallest
# requests. 0 is refused too rather than meaning the default.
MIN_MAX_MESSAGE_BYTES = 4096
log = logging.getLogger("ngramd")


def _workspace(arg: str) -> Path:
    """``--workspace``'s folder, resolved; ValueError naming it when it is not one."""
    try:
        path = Path(arg).expanduser().resolve()
        if path.is_dir():
            return path
    except UNRESOLVABLE as exc:
        raise ValueError(f"workspace {arg}: {exc}") from None
    raise ValueError(f"workspace {path} is not a directory")


def run_serve(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    sock = resolve_socket_path(args.socket)
    try:  # a bad folder or limit is reported now, not after the model's load
        workspaces = [_workspace(w) for w in (args.workspace or [])]
        _index_config(args)
        _max_message_bytes(args)
    except ValueError as exc:
        print(f"ngramd: {exc}", file=sys.stderr)
        return 2  # bad input, as for argparse's own refusals and `ngramd complete`/`edit`
    try:
        lock = claim_socket(sock)
    except AlreadyRunning as exc:
        print(f"ngramd: {exc}; not starting a second one", file=sys.stderr)
        return EXIT_ALREADY_RUNNING
    except OSError as exc:
        print(f"ngramd: cannot use socket {sock}: {exc}", file=sys.stderr)
        return 1
    log.info("starting on %s (pid %d)", sock, os.getpid())
    try:
        return _serve(args, sock, workspaces, lock)
    finally:
        lock.release()


def _serve(args: argparse.Namespace, sock: Path, workspaces: list[Path], lock: SocketLock) -> int:
    from ngramd.daemon.runtime.loading import ModelLoadError
    from ngramd.daemon.service.methods import Service
    from ngramd.daemon.service.server import Server

    try:  # a broken torch fails in here, on the torch path only (llama.cpp's never imports it)
        completer, index, rt = _build_engine(args)
    except ModelLoadError as exc:  # the --model or --device given: bad input, its message says what to do
        print(f"ngramd: cannot load the model: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        return _load_failed(exc)
    max_bytes = _max_message_bytes(args)
    service = Service(completer, index, model_name=str(rt.name), device=str(rt.device),
                      dtype=str(rt.dtype).replace("torch.", ""), socket_path=str(sock),
                      max_message_bytes=max_bytes)
    server = Server(service, sock, max_message_bytes=max_bytes, lock=lock)  # lock: taken again if removed

    def on_ready() -> None:
        print(f"ngramd: ready on {sock} (pid {os.getpid()}, model {rt.name}, device {rt.device})",
              flush=True)
        for w in workspaces:
            service.add_workspace(w)

    asyncio.run(server.run(on_ready))
    print("ngramd: stopped", file=sys.stderr, flush=True)
    return 0


def _load_failed(exc: Exception) -> int:
    """A load that failed unforeseen (not the --model or --device given): say why, exit 1."""
    print(f"ngramd: cannot load the model: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 1


def _build_engine(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    from ngramd.daemon.edit.session import EditingCompleter
    from ngramd.daemon.engine.loop import EngineConfig
    from ngramd.daemon.runtime.loading import load_runtime
    from ngramd.daemon.workspace.priority import lower_this_thread
    from ngramd.index.store import NgramIndex

    rt = load_runtime(args.model, args.device, getattr(args, "runtime", "auto"),
                      exact_kernels=getattr(args, "exact_kernels", False))
    # its restore thread is background work, as the scans are: the model's cores first
    index = NgramIndex(rt.tokenize_batch, _index_config(args), background_setup=lower_this_thread)
    # the service mirrors every open/change into the index itself (incrementally)
    return EditingCompleter(rt, index, EngineConfig(sync_buffers=False)), index, rt


def _index_config(args: argparse.Namespace) -> Any:
    from ngramd.index.store import IndexConfig

    # evicted files read back on a thread of their own, not on those that mirror documents (clients wait on those)
    limit = getattr(args, "max_indexed_tokens", None)
    if limit is None:
        return IndexConfig(restore_in_background=True)
    if limit < 1:
        raise ValueError(f"--max-indexed-tokens must be at least 1, got {limit}")
    return IndexConfig(max_indexed_tokens=limit, restore_in_background=True)


def _max_message_bytes(args: argparse.Namespace) -> int:
    limit = getattr(args, "max_message_bytes", None)
    if limit is None:
        return DEFAULT_MAX_MESSAGE_BYTES
    if limit < MIN_MAX_MESSAGE_BYTES:
        raise ValueError(f"--max-message-bytes must be at least {MIN_MAX_MESSAGE_BYTES}, got {limit}")
    return limit


# -- status / stop --------------------------------------------------------------------------

def run_status(args: argparse.Namespace) -> int:
    from ngramd.daemon.protocol.client import Client, DaemonUnavailable

    from ngramd.daemon.protocol.rpc import RpcError

    sock = resolve_socket_path(args.socket)
    try:
        with Client(sock, timeout=10.0) as c:
            status = c.call("status")
        if not isinstance(status, dict) or not isinstance(status.get("daemon"), dict):
            raise TypeError("its status has no daemon section")
        text = json.dumps(status, indent=2, default=str) if args.json else format_status(status)
    except (DaemonUnavailable, TimeoutError) as exc:
        return _unavailable(sock, exc, args.json)
    except (RpcError, KeyError, TypeError, AttributeError) as exc:  # an error, or a reply of another shape
        return _not_ngramd(sock, exc, args.json)
    print(text)
    return 0


def run_stop(args: argparse.Namespace) -> int:
    from ngramd.daemon.protocol.client import Client, DaemonUnavailable

    from ngramd.daemon.protocol.rpc import RpcError

    sock = resolve_socket_path(args.socket)
    try:
        with Client(sock, timeout=10.0) as c:
            pid = c.call("status")["daemon"]["pid"]
            if not isinstance(pid, int) or isinstance(pid, bool):
                raise TypeError(f"its pid is {pid!r}")
            c.call("shutdown")
    except (DaemonUnavailable, TimeoutError) as exc:
        return _unavailable(sock, exc, args.json)
    except (RpcError, KeyError, TypeError) as exc:
        return _not_ngramd(sock, exc, args.json)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (sock.exists() or _alive(pid)):
        time.sleep(0.05)
    if sock.exists() and socket_is_live(sock):
        _say(f"daemon {pid} did not stop in time", sock, args.json)
        return 1
    msg = {"stopped": True, "pid": pid}
    print(json.dumps(msg) if args.json else f"ngramd: stopped daemon {pid}")
    return 0


def _unavailable(sock: Path, exc: BaseException, as_json: bool) -> int:
    """No answer on ``sock``: say why in one line (or one JSON object), exit 1."""
    from ngramd.daemon.protocol.paths import is_socket, lock_holder, socket_path_problem

    holder = lock_holder(sock)
    starting = holder is not None and not is_socket(sock)  # the socket appears once the model is loaded
    if starting:
        who = f" (pid {holder})" if holder else ""
        message = (f"the daemon{who} on {sock} is starting (loading its model; the first start on a"
                   " machine also times its passes); try again in a moment")
    elif isinstance(exc, TimeoutError):
        message = f"the daemon on {sock} did not answer within 10 s"
    elif holder is not None:
        message = f"the daemon on {sock} did not answer: {exc}"
    else:
        problem = socket_path_problem(sock)
        message = f"no daemon is running on {sock}" + (f", nor can one: {problem}" if problem else "")
    _say(message, sock, as_json, starting)
    return 1


def _not_ngramd(sock: Path, exc: BaseException, as_json: bool) -> int:
    """``sock`` answered, but not as an ngramd daemon does (an error, a reply of another shape)."""
    _say(f"what answers on {sock} is not an ngramd daemon, or not one this ngramd understands "
         f"({type(exc).__name__}: {exc})", sock, as_json)
    return 1


def _say(message: str, sock: Path, as_json: bool, starting: bool = False) -> None:
    """An error of status or stop: one line on stderr, or one JSON object on stdout."""
    if as_json:
        print(json.dumps({"error": message, "socket": str(sock), "starting": starting}))
    else:
        print(f"ngramd: {message}", file=sys.stderr)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (our own child not yet reaped) counts as gone
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True


def _mib(n: Any) -> str:
    return f"{n / (1 << 20):.1f} MiB" if isinstance(n, (int, float)) else "?"


def format_status(s: dict[str, Any]) -> str:
    d, m, req, gen = s["daemon"], s["model"], s["requests"], s["generation"]
    lines = [
        f"ngramd {d['version']}  pid {d['pid']}  up {d['uptime_s']} s  socket {d['socket']}",
        f"model   {m['name']}  device {m['device']}  dtype {m['dtype']}",
        f"memory  rss {_mib(s['memory'].get('rss_bytes'))}"
        + (f"  in 2 MB pages {_mib(s['memory']['huge_page_bytes'])}" if s["memory"].get("huge_page_bytes") else "")
        + (f"  cuda {_mib(s['memory']['cuda_allocated_bytes'])}"
           if "cuda_allocated_bytes" in s["memory"] else "")
        + (f"  (packed weight copies {_mib(m['packed_weights_bytes'])})" if m.get("packed_weights_bytes") else ""),
        f"index   {json.dumps(s['index'], default=str)}",
    ]
    ws = s.get("workspace") or {}
    for f in ws.get("folders", []):
        progress = f.get("progress") or {}
        done = f"  {progress['done']}/{progress['total']} files" if "total" in progress else ""
        lines.append(f"folder  {f['path']}  {f['state']}{done}  "
                     f"{json.dumps(f.get('counts', {}), default=str)}")
    if ws:
        lines.append(f"events  {json.dumps(ws.get('events', {}))}  pending {ws.get('pending', 0)}")
    docs = s["documents"]
    lines.append(f"docs    {docs['open']} open" + "".join(
        f"\n        {x['uri']}  v{x['version']}  {x['chars']} chars" for x in docs["list"][:20]))
    lines.append(f"clients {len(d['clients'])}")
    for c in d["clients"][:20]:  # queue waits per client (daemon/service/worker.py, "turns")
        q = c.get("queue") or {}
        lines.append(f"        #{c['conn']} {c.get('client') or '?'}  queued {q.get('queued', 0)}  ran {q.get('ran', 0)}"
                     f"  waited mean {q.get('wait_mean_s', 0)} s  max {q.get('wait_max_s', 0)} s"
                     f"  last {q.get('wait_last_s', 0)} s")
    counts = {k: v for k, v in req.items() if k not in ("by_method", "running", "queued")}
    running = req["running"]
    running_text = (f"{running.get('kind', '?')} {running.get('uri', '')}".strip()
                    if isinstance(running, dict) else "none")
    lines.append(f"requests {json.dumps(req['by_method'])}  {json.dumps(counts)}  "
                 f"queued {len(req['queued'])}  running {running_text}")
    lines.append(f"generation  passes {gen['forward_passes']}  generated {gen['generated']}  "
                 f"drafted {gen['drafted']}  accepted {gen['accepted']}  "
                 f"acceptance {gen['acceptance']}  tokens/pass {gen['tokens_per_pass']}")
    prepared = (s.get("engine") or {}).get("prepared")
    if prepared:  # prompts prefilled ahead of requests (prepareEdit, prepareComplete)
        lines.append(f"prepared  {prepared['prepares']} prompts, {prepared['prefill_tokens']} tokens prefilled ahead")
    engine = s.get("engine") or {}
    answers = engine.get("answer_cache")
    if answers:  # typing through remembered answers, and the next suggestion decoded ahead
        lines.append(f"answers  {answers['hits']} served with no pass  prefetched {answers['prefetches']} "
                     f"({answers['prefetched_tokens']} tokens)  prefetch hits {answers['prefetch_hits']}  "
                     f"wasted {answers['wasted_tokens']} tokens")
    if engine.get("speculation", "on") != "on":
        lines.append(f"runtime  {engine.get('runtime')}  speculation {engine['speculation']}  "
                     f"({(engine.get('exactness') or {}).get('detail', '')})")
    return "\n".join(lines)
