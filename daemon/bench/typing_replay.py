"""The typing replay: real files written again by a seeded model of a user, against an engine.

What a user feels is the wait between a keystroke and the ghost text, over a whole session of
typing. The replay keeps a virtual clock; the engine's work takes its real time on it:

- the user types the file's true next character, at ``UserModel``'s pace (jittered, with a
  pause at each line's end);
- the editor asks for a completion ``debounce_ms`` after the last keystroke;
- the engine serves one request at a time. A request still running when a newer one is asked
  is cancelled then (the daemon supersedes it); its work counts, its answer is never shown;
- a suggestion shown before the next keystroke that matches the true text from the cursor on
  is accepted with Tab, whole, or up to its line's end where only its first line matches:
  the user stops typing, and presses Tab ``accept_ms`` after it shows;
- in the idle time after an answer, the engine may decode ahead (``Engine.idle``), cancelled
  when the next request comes.

Per request it records the latency from keystroke to suggestion ready, the forward passes, and
whether the answer took none. The design and its limits: docs/design/typing-replay.md.
"""

from __future__ import annotations

import math
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence


@dataclass(frozen=True)
class UserModel:
    ms_per_char: float = 160.0  # ~75 words a minute
    jitter: float = 0.5  # each interval is ms_per_char * uniform(1 - jitter, 1 + jitter)
    line_end_pause_ms: tuple[float, float] = (400.0, 1200.0)  # thinking at a line's end
    debounce_ms: float = 75.0  # the editor's wait after a keystroke before it asks
    accept_ms: float = 250.0  # from a matching suggestion shown to Tab


@dataclass
class Answer:
    text: str
    forward_passes: int
    answered_from: str = ""  # "" decoded; otherwise with no pass
    cancelled: bool = False


class Engine(Protocol):
    """One configuration under test: ``complete`` answers at (text, offset); ``idle`` decodes
    ahead after an answer (or does nothing) until ``cancel`` is set; both return passes run."""

    name: str

    def complete(self, uri: str, text: str, offset: int, cancel: threading.Event) -> Answer: ...

    def idle(self, uri: str, text: str, offset: int, answer: Answer, cancel: threading.Event) -> int: ...


@dataclass
class RequestRecord:
    keystroke_ms: float
    ready_ms: float | None  # None: superseded before it was ready
    forward_passes: int
    zero_pass: bool
    offset: int
    text_before: str  # the buffer when asked (for re-running a sample cold)
    answer: str


@dataclass
class ReplayResult:
    engine: str
    file: str
    requests: list[RequestRecord] = field(default_factory=list)
    typed_chars: int = 0
    accepted_chars: int = 0
    tabs: int = 0  # suggestions accepted
    idle_passes: int = 0


def _cancel_after(seconds: float) -> tuple[threading.Event, threading.Timer]:
    """An Event set after ``seconds`` of real time: the virtual moment a newer request comes."""
    cancel = threading.Event()
    timer = threading.Timer(max(0.0, seconds), cancel.set)
    timer.daemon = True
    timer.start()
    return cancel, timer


def replay(engine: Engine, uri: str, text: str, start: int, end: int, user: UserModel = UserModel(),
           seed: int = 0, clock: Callable[[], float] = time.perf_counter) -> ReplayResult:
    """Type ``text[start:end]`` back into the buffer (which holds ``text`` without it), asking
    ``engine`` as an editor does. The virtual timeline is in ms from the first keystroke."""
    rng = random.Random(seed)
    truth = text[start:end]
    before, after = text[:start], text[end:]
    typed = 0  # characters of ``truth`` in the buffer
    result = ReplayResult(engine.name, uri)
    engine_free = 0.0

    def buffer() -> str:
        return before + truth[:typed] + after

    def next_interval(pos: int) -> float:
        gap = user.ms_per_char * rng.uniform(1 - user.jitter, 1 + user.jitter)
        if pos > 0 and truth[pos - 1] == "\n":
            gap += rng.uniform(*user.line_end_pause_ms)
        return gap

    keystroke_at = 0.0
    while typed < len(truth):
        # a keystroke (or a Tab) just happened at ``keystroke_at``: the editor asks after the debounce
        ask_at = keystroke_at + user.debounce_ms
        next_key = keystroke_at + next_interval(typed)  # the user's next keystroke, unless a Tab comes first
        start_at = max(ask_at, engine_free)
        if next_key + user.debounce_ms <= start_at:
            # superseded while queued: the next request replaces it before it starts
            result.requests.append(RequestRecord(keystroke_at, None, 0, False, start + typed, "", ""))
            typed, keystroke_at = _type_one(result, typed, next_key)
            continue
        budget_ms = next_key + user.debounce_ms - start_at  # when the next request would cancel it
        cancel, timer = _cancel_after(budget_ms / 1000)
        t0 = clock()
        answer = engine.complete(uri, buffer(), start + typed, cancel)
        took = (clock() - t0) * 1000
        timer.cancel()
        ready = start_at + took
        shown = not answer.cancelled and ready <= next_key + user.debounce_ms
        engine_free = ready if shown else min(ready, start_at + budget_ms)
        result.requests.append(RequestRecord(keystroke_at, (ready - keystroke_at) if shown else None,
                                             answer.forward_passes, answer.forward_passes == 0 and shown,
                                             start + typed, buffer() if shown else "",
                                             answer.text if shown else ""))
        if shown:
            accepted = _accepted(answer.text, truth[typed:])
            tab_at = ready + user.accept_ms
            if accepted and ready <= next_key:  # seen before the next keystroke: the user stops and takes it
                # idle until the Tab: the engine may decode ahead meanwhile
                result.idle_passes += _idle(engine, uri, buffer(), start + typed, answer, tab_at - ready, clock)
                engine_free = max(engine_free, tab_at)
                typed += len(accepted)
                result.accepted_chars += len(accepted)
                result.tabs += 1
                keystroke_at = tab_at
                continue
            result.idle_passes += _idle(engine, uri, buffer(), start + typed, answer,
                                        next_key + user.debounce_ms - ready, clock)
        typed, keystroke_at = _type_one(result, typed, next_key)
    return result


def _type_one(result: ReplayResult, typed: int, at: float) -> tuple[int, float]:
    result.typed_chars += 1
    return typed + 1, at


def _idle(engine: Engine, uri: str, text: str, offset: int, answer: Answer, gap_ms: float,
          clock: Callable[[], float]) -> int:
    """Idle-time work until the gap ends (its real time is the gap's: it never delays a request)."""
    if gap_ms <= 0:
        return 0
    cancel, timer = _cancel_after(gap_ms / 1000)
    try:
        return engine.idle(uri, text, offset, answer, cancel)
    finally:
        timer.cancel()


def _accepted(suggestion: str, rest: str) -> str:
    """What the user takes with Tab: the whole suggestion where the true text goes on so, else
    its first line where that matches up to the line's end; "" otherwise."""
    if not suggestion:
        return ""
    if rest.startswith(suggestion):
        return suggestion
    line, newline, _ = suggestion.partition("\n")
    if newline and line and rest.startswith(line + "\n"):
        return line + "\n"
    return ""


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100), nearest rank; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def summarize(results: Sequence[ReplayResult]) -> dict[str, Any]:
    """The figures the benchmarks page reports, over ``results`` of one engine."""
    requests = [r for res in results for r in res.requests]
    ready = [r.ready_ms for r in requests if r.ready_ms is not None]
    keystrokes = sum(res.typed_chars + res.tabs for res in results)  # a Tab is a keystroke too
    passes = sum(r.forward_passes for r in requests) + sum(res.idle_passes for res in results)
    typed = sum(res.typed_chars for res in results)
    accepted = sum(res.accepted_chars for res in results)
    # the shown answers apart: served from the answer cache, and decoded (the tail: where fewer than
    # 95% of answers took no pass, the p95 is a decoded answer's latency)
    no_pass = [r.ready_ms for r in requests if r.ready_ms is not None and r.zero_pass]
    decoded = [r.ready_ms for r in requests if r.ready_ms is not None and not r.zero_pass]
    return {
        "requests": len(requests),
        "shown": len(ready),
        "superseded": len(requests) - len(ready),
        "latency_ms": {"p50": percentile(ready, 50), "p95": percentile(ready, 95), "p99": percentile(ready, 99)},
        "latency_ms_no_pass": {"n": len(no_pass), "p50": percentile(no_pass, 50), "p95": percentile(no_pass, 95)},
        "latency_ms_decoded": {"n": len(decoded), "p50": percentile(decoded, 50), "p95": percentile(decoded, 95)},
        "passes_per_keystroke": passes / max(1, keystrokes),
        "idle_passes": sum(res.idle_passes for res in results),
        "zero_pass_share": sum(r.zero_pass for r in requests) / max(1, len(ready)),  # of the answers shown
        "typed_chars": typed,
        "accepted_chars": accepted,
        "accepted_share": accepted / max(1, typed + accepted),  # of the characters that reached the buffer
    }
