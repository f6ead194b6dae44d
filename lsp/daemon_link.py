"""The LSP's handle on the daemon: connect, start one when none answers, reconnect.

States::

    disconnected --connect()--> connecting --on_connect done--> ready
         ^                      (may spawn `ngramd serve`          |
         |                       and wait for its socket)          |
         +------------------- connection lost ---------------------+

- ``call`` waits for ``ready`` (bounded by its timeout, while connecting goes on in
  the background) and then for the answer. When the connection is lost, only the
  requests in flight on it fail and a reconnect starts at once. A daemon that died
  (no notice) is started again at once when none answers; one that announced its
  exit (``exiting``: ``ngramd stop``, SIGTERM) is not: the reconnect only connects,
  and a daemon is started by the next request (``call``) or ``start`` (the editor's
  ``initialized``), so ``ngramd stop`` sticks until the user asks for a completion. ``probe`` (an editor's status poll) only
  connects too, so a daemon another editor started is found.
- ``send`` is fire-and-forget for document sync: on a ready connection it writes
  now (so sync messages keep their order); otherwise it drops the message, because
  ``on_connect`` re-sends the whole state (every open buffer) on the next connection.
- Spawning is single-flight: while a daemon this link started for the current socket is
  alive (loading, or dying after it served), no second one is started there; after a
  daemon exits without ever answering, or cannot be started at all (e.g. its socket's
  folder cannot be created), spawning backs off for ``SPAWN_BACKOFF_S`` and calls fail
  with that reason meanwhile. The reason (for a daemon that exited, with its last lines in
  its log: a model that cannot be loaded, say) goes to ``on_start_failed``, once per failed
  start, so that the editor can show it. A daemon that served (a connect made while it
  ran, or a session whose initialize gave its pid) and then exited is no failed start, nor
  is one that exits with ``EXIT_ALREADY_RUNNING`` (another editor's daemon is starting):
  its socket is waited for while that daemon holds the lock.
- A connection the daemon refused (its ``fatal`` error notice, e.g. a document over its
  ``--max-message-bytes``, which ``on_connect`` would send again) or that closed soon
  after it was made ready, twice running, is not reconnected at once: connecting backs
  off (``RECONNECT_BACKOFF_S``, doubling) and calls fail with that reason meanwhile; the
  first call after it reconnects.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

from ngramd.daemon.protocol.paths import EXIT_ALREADY_RUNNING, lock_holder
from ngramd.daemon.protocol.peer import ForeignPeer
from ngramd.lsp.daemon_client import DaemonError, DaemonUnavailable, RpcConnection
from ngramd.lsp.spawn import log_path, log_size, log_tail, spawn_daemon

log = logging.getLogger(__name__)

SPAWN_BACKOFF_S = 10.0
POLL_S = 0.1
# A connection lost sooner than this after it was made ready, without an `exiting` notice,
# is an early drop; the second in a row (or any fatal notice) delays the next connect by
# RECONNECT_BACKOFF_S, doubled from the third on, up to RECONNECT_BACKOFF_MAX_S.
STABLE_S = 10.0
RECONNECT_BACKOFF_S = 1.0
RECONNECT_BACKOFF_MAX_S = 60.0
# A session (on_connect) whose connection is lost (closed) before the daemon answered anything
# is tried again this many times, at once: the connect landed in a killed daemon's backlog.
# One that timed out is not: that daemon accepts but does not answer, and would again.
SESSION_RETRIES = 2


class DaemonLink:
    def __init__(self, socket_path: str, *, model: str | None = None, device: str = "auto",
                 exact_kernels: bool = False,
                 on_connect: Callable[[RpcConnection], Awaitable[None]] | None = None,
                 on_start_failed: Callable[[str], None] | None = None,
                 spawn: bool = True, start_timeout: float = 180.0) -> None:
        self.socket_path = socket_path
        self.model = model
        self.device = device
        self.exact_kernels = exact_kernels
        self.spawn = spawn
        self.start_timeout = start_timeout
        self._on_connect = on_connect
        self._on_start_failed = on_start_failed
        self._conn: RpcConnection | None = None
        self._connecting: asyncio.Task[RpcConnection] | None = None
        self._connect_spawns = True  # whether the attempt in _connecting may start a daemon
        self._procs: list[tuple[str, subprocess.Popen]] = []  # (socket it was started for, process)
        self._no_spawn_until = 0.0
        self._no_spawn_reason = ""
        self._ready_since = 0.0  # when the connection in _conn was made ready
        self._early_drops = 0  # connections lost early in a row (see STABLE_S)
        self._no_connect_until = 0.0
        self._no_connect_reason = ""
        self._closing = False
        self.connects = 0  # connections made ready (a reconnect counts)
        self.spawned = 0  # daemons this link started
        self._answered: set[int] = set()  # pids of started daemons that answered once
        self._log_starts: dict[int, int] = {}  # pid of a started daemon -> its output's offset in the log
        self.last_error: str = ""

    @property
    def ready(self) -> bool:
        return self._conn is not None and not self._conn.closed

    @property
    def connecting(self) -> bool:
        """A connect attempt (which may be starting a daemon) is in flight."""
        return self._connecting is not None and not self._connecting.done()

    @property
    def starting(self) -> bool:
        """The attempt in flight may start a daemon (not a reconnect that only connects)."""
        return self.connecting and self._connect_spawns and self.spawn

    # -- public ---------------------------------------------------------------------

    def start(self) -> None:
        """Begin connecting in the background (no-op when ready or connecting)."""
        if not self.ready and not self._closing:
            self._ensure_task()

    async def probe(self, timeout: float) -> bool:
        """Whether a daemon is connected, after connecting to one that already runs (one
        another editor started), never starting one: with nothing in flight, a
        connect-only attempt starts; a connect-only attempt is awaited up to ``timeout``,
        one that may spawn is not (it can take minutes)."""
        if self.ready or self._closing:
            return self.ready
        task = self._ensure_task(spawn=False)  # the attempt in flight, if any, as it is
        if not self._connect_spawns:
            await asyncio.wait({task}, timeout=timeout)  # its failure is the answer: not ready
        return self.ready

    async def connection(self, timeout: float) -> RpcConnection:
        """The ready connection, connecting (and starting a daemon if none answers) first."""
        if self.ready:
            assert self._conn is not None
            return self._conn
        if self._closing:
            raise DaemonUnavailable("the LSP is shutting down")
        deadline = time.monotonic() + timeout
        task = self._ensure_task()
        if self._connect_spawns:
            return await self._wait_connect(task, timeout)
        try:  # a reconnect that only connects is in flight: if it finds no daemon, start one
            return await self._wait_connect(task, timeout)
        except DaemonUnavailable:
            if not task.done() or self._closing:
                raise
        return await self._wait_connect(self._ensure_task(), max(0.01, deadline - time.monotonic()))

    async def _wait_connect(self, task: asyncio.Task[RpcConnection], timeout: float) -> RpcConnection:
        try:
            return await asyncio.wait_for(asyncio.shield(task), timeout)
        except asyncio.TimeoutError as exc:
            raise DaemonUnavailable(f"the daemon on {self.socket_path} is not ready "
                                    f"within {timeout:.1f} s") from exc
        except asyncio.CancelledError:
            me = asyncio.current_task()
            caller_cancelled = bool(me is not None and getattr(me, "cancelling", lambda: 0)())
            if task.cancelled() and not caller_cancelled:  # (cancelling(): Python >= 3.11)
                # the connect attempt was dropped (reconfigure), not our caller
                raise DaemonUnavailable("the connection attempt was abandoned") from None
            raise

    async def call(self, method: str, params: Any = None, timeout: float = 10.0) -> Any:
        """Request and wait; raises DaemonUnavailable (incl. timeout) or DaemonError."""
        deadline = time.monotonic() + timeout
        conn = await self.connection(timeout)
        return await conn.request(method, params, max(0.01, deadline - time.monotonic()))

    def send(self, method: str, params: Any = None) -> asyncio.Future[Any] | None:
        """Fire-and-forget on a ready connection; None (dropped) otherwise."""
        if not self.ready:
            return None
        assert self._conn is not None
        fut = self._conn.send(method, params)
        fut.add_done_callback(_retrieve)
        return fut

    def reconfigure(self, socket_path: str, model: str | None, device: str, exact_kernels: bool = False) -> None:
        """A new socket drops the connection (and the next call connects there); the model
        (None: the default), device and kernels apply to the next daemon this link starts."""
        self.model = model
        self.device = device
        self.exact_kernels = exact_kernels
        if socket_path and socket_path != self.socket_path:
            self.socket_path = socket_path
            # another daemon: a clean slate (a failed start on the old socket says nothing here)
            self._early_drops, self._no_connect_until, self._no_spawn_until = 0, 0.0, 0.0
            conn, self._conn = self._conn, None
            if self._connecting is not None:
                self._connecting.cancel()
                self._connecting = None
            if conn is not None:
                conn.close()

    async def close(self) -> None:
        self._closing = True
        if self._connecting is not None:
            self._connecting.cancel()
        if self._conn is not None:
            self._conn.close()
        self._reap()

    # -- internals --------------------------------------------------------------------

    def _ensure_task(self, spawn: bool = True) -> asyncio.Task[RpcConnection]:
        """The connect attempt in flight, or a new one; ``spawn=False``: connect only
        (``connection`` follows a failed connect-only attempt with one that may spawn)."""
        if self._connecting is None or self._connecting.done():
            self._connect_spawns = spawn
            self._connecting = asyncio.get_running_loop().create_task(self._connect(spawn))
            self._connecting.add_done_callback(_retrieve)
        return self._connecting

    async def _connect(self, spawn: bool = True) -> RpcConnection:
        try:
            if time.monotonic() < self._no_connect_until:
                raise DaemonUnavailable(self._no_connect_reason)
            for attempt in range(SESSION_RETRIES + 1):
                conn = await self._open_or_spawn(spawn)
                try:
                    if self._on_connect is not None:
                        await self._on_connect(conn)
                    break
                except (DaemonUnavailable, DaemonError) as exc:
                    # closed by the daemon unanswered, not timed out: read before close()
                    lost_unanswered = conn.closed and not conn.answered
                    conn.close()
                    if isinstance(exc, DaemonError) or not lost_unanswered or attempt == SESSION_RETRIES:
                        raise DaemonUnavailable(f"the daemon refused the session: {exc}") from exc
                    # Lost before any answer: the connection was taken into a killed daemon's
                    # backlog as it went. Connect again (starting a daemon if none answers).
                    log.info("connection lost before the daemon answered (%s); connecting again", exc)
                    await asyncio.sleep(POLL_S)
                except BaseException:  # cancelled (reconfigure, close): the half-made session goes too
                    conn.close()
                    raise
            self._note_served(conn)
            # No await between on_connect's last (synchronous) write and this line, so
            # no sync message can slip between the re-sent state and "ready".
            self._conn = conn
            self._ready_since = time.monotonic()
            self.connects += 1
            self.last_error = ""
            return conn
        except DaemonUnavailable as exc:
            if spawn or not self.last_error:  # a connect-only attempt (a status poll) finding no
                self.last_error = str(exc)  # daemon keeps the reason the last start failed
            log.warning("%s", exc)
            raise

    async def _open_or_spawn(self, spawn: bool = True) -> RpcConnection:
        try:
            return await RpcConnection.open(self.socket_path, on_close=self._lost)
        except ForeignPeer as exc:  # another user listens at the path: no daemon of ours can start
            raise self._back_off(str(exc)) from exc
        except DaemonUnavailable:
            if not (self.spawn and spawn):
                raise
        while True:
            proc = self._live_proc()  # one this link started that still runs: never a second
            if proc is None:
                if time.monotonic() < self._no_spawn_until:
                    raise DaemonUnavailable(f"no daemon on {self.socket_path}; {self._no_spawn_reason}")
                log.info("starting a daemon on %s (model %s)", self.socket_path, self.model or "default")
                log_start = log_size(self.socket_path)
                try:
                    proc = spawn_daemon(self.socket_path, self.model, self.device,
                                        exact_kernels=self.exact_kernels)  # folders: via initialize
                except OSError as exc:  # e.g. the socket's folder cannot be created, the log not opened
                    raise self._back_off(f"cannot start a daemon on {self.socket_path}: {exc}") from exc
                self._procs.append((self.socket_path, proc))
                self._log_starts[proc.pid] = log_start
                self.spawned += 1
            conn = await self._wait_for(proc)
            if conn is not None:
                return conn
            # proc is gone without failing to start: start the next one

    async def _wait_for(self, proc: subprocess.Popen) -> RpcConnection | None:
        """Poll the socket until a daemon answers, ``proc`` exits, or start_timeout passes.

        None when ``proc`` exited and that was no failed start: it had served (it was
        dying: its process may outlive its socket, e.g. while threads are joined), or it
        found another daemon starting (EXIT_ALREADY_RUNNING) that went away unanswered.
        """
        deadline = time.monotonic() + self.start_timeout
        served = proc.pid in self._answered  # read now: _reap forgets the pid once it exits
        log_start = self._log_starts.get(proc.pid)
        while True:
            try:
                conn = await RpcConnection.open(self.socket_path, on_close=self._lost)
                self._answered.add(proc.pid)
                return conn
            except DaemonUnavailable:
                pass
            code = proc.poll()
            if code is not None:
                # It may have lost a race against another editor's daemon: try once more.
                try:
                    return await RpcConnection.open(self.socket_path, on_close=self._lost)
                except DaemonUnavailable:
                    pass
                if served:
                    return None
                if code == EXIT_ALREADY_RUNNING:
                    return await self._wait_for_other(code, deadline)
                raise self._back_off(self._exit_reason(code, log_start))
            if time.monotonic() > deadline:
                raise DaemonUnavailable(f"the daemon started on {self.socket_path} did not answer "
                                        f"within {self.start_timeout:.0f} s")
            await asyncio.sleep(POLL_S)

    async def _wait_for_other(self, code: int, deadline: float) -> RpcConnection | None:
        """Our daemon exited with ``code`` (EXIT_ALREADY_RUNNING) as it found another one
        running or starting (after a crash, every editor's LSP starts one at once): wait for
        that one's socket while it holds the lock. None once the lock is let go and still
        nobody answers (that start failed: the caller starts one); a failed start when
        nobody held it to begin with."""
        seen_holder = False
        while True:
            try:
                return await RpcConnection.open(self.socket_path, on_close=self._lost)
            except DaemonUnavailable:
                pass
            try:
                holder = lock_holder(Path(self.socket_path))
            except OSError:  # the lock cannot be read: nothing to wait for
                holder = None
            if holder is None:
                try:  # it may have answered just before letting go
                    return await RpcConnection.open(self.socket_path, on_close=self._lost)
                except DaemonUnavailable:
                    if seen_holder:
                        return None
                    raise self._back_off(f"`ngramd serve` exited with code {code} before answering "
                                         f"and no daemon holds {self.socket_path}.lock; see "
                                         f"{self.socket_path}.log") from None
            seen_holder = True
            if time.monotonic() > deadline:
                raise DaemonUnavailable(f"the daemon another client started on {self.socket_path} "
                                        f"(pid {holder or 'unknown'}) did not answer within "
                                        f"{self.start_timeout:.0f} s")
            await asyncio.sleep(POLL_S)

    def _exit_reason(self, code: int, log_start: int | None) -> str:
        """Why a daemon this link started exited unanswered: its code, and its last lines in the
        log (written from ``log_start`` on; None: unknown, none quoted) that say why."""
        said = log_tail(self.socket_path, log_start) if log_start is not None else ""
        return (f"`ngramd serve` exited with code {code} before answering{f' ({said})' if said else ''}; "
                f"see {log_path(self.socket_path)}")

    def _back_off(self, reason: str) -> DaemonUnavailable:
        """No spawn for SPAWN_BACKOFF_S after a failed start, which ``on_start_failed`` is told
        of (once: the calls meanwhile fail without starting one); the error to raise now."""
        self._no_spawn_until = time.monotonic() + SPAWN_BACKOFF_S
        self._no_spawn_reason = f"the last start failed: {reason}"
        if self._on_start_failed is not None:
            try:
                self._on_start_failed(reason)
            except Exception:  # (telling the editor at exit, say): the caller still needs the reason
                log.exception("on_start_failed failed for: %s", reason)
        return DaemonUnavailable(reason)

    def _live_proc(self) -> subprocess.Popen | None:
        """The running daemon this link started for the current socket, if any (one started
        for an earlier ``socket`` setting never answers on this one: it is not waited for)."""
        self._reap()
        mine = [p for path, p in self._procs if path == self.socket_path]
        return mine[-1] if mine else None

    def _note_served(self, conn: RpcConnection) -> None:
        """The daemon behind a session is marked served when this link started it, however it
        was reached: a start that outlived start_timeout is found by the next call's plain
        connect, and its exit, when it comes, is no failed start."""
        if conn.daemon_pid is not None and any(p.pid == conn.daemon_pid for _, p in self._procs):
            self._answered.add(conn.daemon_pid)

    def _reap(self) -> None:
        """Forget (and wait for) daemons this link started that have exited: no zombies."""
        self._procs = [(path, p) for path, p in self._procs if p.poll() is None]
        live = {p.pid for _, p in self._procs}
        self._answered &= live  # a pid may be reused
        self._log_starts = {pid: start for pid, start in self._log_starts.items() if pid in live}

    def _lost(self, conn: RpcConnection) -> None:
        if conn is not self._conn:
            return
        self._conn = None
        self._reap()
        if self._closing or conn.cancelled:  # (cancelled: the editor closed our stdin, the loop ends)
            return
        if conn.exit_announced:  # stopped on request (`ngramd stop`): it stays stopped
            log.warning("the daemon was stopped; reconnecting (the next request starts a daemon "
                        "if none answers)")
            self._ensure_task(spawn=False)
        elif self._backs_off_after(conn):
            log.warning("%s", self._no_connect_reason)
            self.last_error = self._no_connect_reason
        else:  # it died: start one again now, so that it is loading before the next request
            log.warning("connection to the daemon lost; reconnecting (starting a daemon if none answers)")
            self._ensure_task(spawn=True)

    def _backs_off_after(self, conn: RpcConnection) -> bool:
        """Whether the loss of ``conn`` (no exiting notice) delays the next connect: the
        daemon refused what this link sent (on_connect would send it again), or closed the
        connection soon after it was made ready for the second time in a row (reconnecting
        at once would loop). One early loss is a crash like any other: restart at once."""
        lived = time.monotonic() - self._ready_since
        if conn.fatal_error is None and lived >= STABLE_S:
            self._early_drops = 0
            return False
        if conn.fatal_error is None and not conn.answered:
            return False  # never served: e.g. taken into a killed daemon's backlog as it went
        self._early_drops += 1
        if conn.fatal_error is None and self._early_drops < 2:
            return False
        delay = min(RECONNECT_BACKOFF_MAX_S, RECONNECT_BACKOFF_S * 2 ** max(0, self._early_drops - 2))
        why = (f"refused what this editor sent: {conn.fatal_error}" if conn.fatal_error is not None
               else f"{lived:.1f} s after connecting, {self._early_drops} times in a row")
        self._no_connect_until = time.monotonic() + delay
        self._no_connect_reason = (f"the daemon on {self.socket_path} closed the connection ({why}); "
                                   f"the next request after {delay:.0f} s reconnects")
        return True


def _retrieve(fut: asyncio.Future[Any]) -> None:
    """Mark a fire-and-forget future's exception as seen (the caller logs what matters)."""
    if not fut.cancelled():
        fut.exception()
