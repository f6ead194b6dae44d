"""Answers remembered per document, so that typing through a suggestion costs no forward pass.

A completion's prompt is its base tokens plus a *forced prefix*: the characters of the last,
unfinished word, which the output must begin with (daemon/engine/prompt.py). While the user
types the characters of the suggestion on screen, the base stays put and only the forced
prefix grows. The remembered token stream is then exactly what decoding would produce again:

- every remembered token satisfies the longer forced prefix (the stream begins with it), and
  the tokens a longer prefix allows are a subset of those a shorter one allowed, so each
  remembered token is still the argmax (or the seeded Gumbel-max draw) among them;
- the stop rules are pure functions of the token stream: a new stop checker, built for the
  new request (its forced prefix, its line), is replayed over the stream, and says where the
  new answer ends. Where the stream runs out before it stops, the request is decoded for real.

So an answer served from here is token-identical to a cold request: tests/engine/
test_answer_cache.py checks it character by character, across token boundaries and inside
multi-byte characters. The long argument is in docs/design/answer-cache.md.

Prefetched answers (the next suggestion, computed in idle time for the buffer as it would be
once the shown suggestion is accepted) are stored here too, and counted apart.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Callable, Hashable, Sequence

from ngramd.daemon.engine.stops import StopChecker

ANSWERS_PER_DOCUMENT = 4  # the last answers and a prefetched one; older ones are rarely typed through


@dataclass
class RememberedAnswer:
    prompt_ids: tuple[int, ...]  # the prompt's base tokens
    forced: bytes  # its forced prefix, UTF-8
    params: Hashable  # everything else the token stream depends on (AnswerParams)
    stream: list[int]  # every generated token, with the stopping eos where there was one
    stream_bytes: bytes  # the bytes of ``stream`` (the eos adds none)
    prefetched: bool = False
    finished: bool = True  # False: cancelled before its stop (a prefix of the stream; it can be resumed)
    hits: int = 0


@dataclass(frozen=True)
class AnswerParams:
    """What a token stream depends on besides the prompt; ``of`` gives None for a request whose
    stream is not reproducible (sampling without a seed: each request draws afresh)."""

    max_tokens: int
    stop: tuple[str, ...]
    multiline: bool
    temperature: float
    top_p: float
    seed: int | None

    @classmethod
    def of(cls, max_tokens: int, stop: Sequence[str], multiline: bool, temperature: float, top_p: float,
           seed: int | None) -> AnswerParams | None:
        greedy = temperature == 0.0
        if not greedy and seed is None:
            return None
        return cls(max_tokens, tuple(stop), multiline, temperature, 1.0 if greedy else top_p,
                   None if greedy else seed)


@dataclass
class ServedAnswer:
    tokens: list[int]  # the new answer's tokens (no eos)
    text: str
    stop_reason: str
    prefetched: bool  # the answer came from a prefetch


@dataclass
class AnswerCacheStats:
    hits: int = 0  # requests answered with no forward pass
    prefetches: int = 0  # prefetched answers stored
    prefetched_tokens: int = 0  # tokens decoded ahead, in idle time
    prefetch_hits: int = 0  # requests answered from a prefetched answer
    wasted_tokens: int = 0  # prefetched tokens forgotten without serving a request

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class AnswerCache:
    token_bytes: Callable[[int], bytes]
    is_special: Callable[[int], bool]
    per_document: int = ANSWERS_PER_DOCUMENT
    stats: AnswerCacheStats = field(default_factory=AnswerCacheStats)
    _answers: dict[str, collections.deque[RememberedAnswer]] = field(default_factory=dict)

    def remember(self, uri: str, prompt_ids: Sequence[int], forced: bytes, params: AnswerParams,
                 stream: Sequence[int], eos: int | None, prefetched: bool = False, finished: bool = True) -> None:
        """Keep the stream a request produced; ``eos``: the token it stopped on, if it stopped on
        one (the stream's tokens leave it out). ``finished`` False: it was cancelled first, and
        its tokens are the first of the stream (each one exact: a cancel falls between passes)."""
        tokens = [int(t) for t in stream] + ([int(eos)] if eos is not None else [])
        entry = RememberedAnswer(tuple(int(t) for t in prompt_ids), bytes(forced), params, tokens,
                                 b"".join(self.token_bytes(t) for t in stream), prefetched, finished=finished)
        answers = self._answers.setdefault(uri, collections.deque())
        for old in [a for a in answers if a.prompt_ids == entry.prompt_ids and a.params == params]:
            answers.remove(old)  # the newer stream replaces one for the same prompt
            self._forgotten(old)
        answers.append(entry)
        while len(answers) > self.per_document:
            self._forgotten(answers.popleft())
        if prefetched:
            self.stats.prefetches += 1
            self.stats.prefetched_tokens += len(stream)

    def serve(self, uri: str, prompt_ids: Sequence[int], forced: bytes, params: AnswerParams,
              new_stopper: Callable[[], StopChecker]) -> ServedAnswer | None:
        """The answer a fresh request would get, from a remembered stream; None when no stream
        is known to be it (then the request is decoded)."""
        ids = tuple(int(t) for t in prompt_ids)
        for entry in reversed(self._answers.get(uri, ())):
            if entry.prompt_ids != ids or entry.params != params:
                continue
            if not (self._consistent(entry, forced) and entry.stream_bytes.startswith(forced)):
                continue  # the stream must cover the forced prefix: before it, an eos is never allowed
            stopper = new_stopper()
            used = stopper.push_many(entry.stream)
            if not stopper.reason:
                continue  # the stream ends before the new request would stop: decode it
            tokens = entry.stream[:used]
            if stopper.reason == "eos":
                tokens = tokens[:-1]
            entry.hits += 1
            self.stats.hits += 1
            if entry.prefetched:
                self.stats.prefetch_hits += 1
            return ServedAnswer(tokens, stopper.text, stopper.reason, entry.prefetched)
        return None

    def resumable(self, uri: str, prompt_ids: Sequence[int], forced: bytes,
                  params: AnswerParams) -> list[int] | None:
        """The longest remembered output a greedy request can go on from: tokens that decoding
        would produce first again (``serve``'s argument), which did not reach the request's stop.
        None where there is none."""
        if params.temperature != 0.0:
            return None  # a sampled draw is keyed by its position: resumed, it would be another
        ids = tuple(int(t) for t in prompt_ids)
        best: list[int] | None = None
        for entry in self._answers.get(uri, ()):
            if entry.prompt_ids != ids or entry.params != params or not entry.stream:
                continue
            if self._consistent(entry, forced) and (best is None or len(entry.stream) > len(best)):
                best = list(entry.stream)
        while best and self.is_special(best[-1]):
            best.pop()  # an eos ends an answer, never continues one
        return best or None

    def _consistent(self, entry: RememberedAnswer, forced: bytes) -> bool:
        """Whether ``entry``'s tokens are the first that decoding under ``forced`` produces: the new
        forced prefix extends the old one, and the stream agrees with it as far as both go."""
        if not forced.startswith(entry.forced):
            return False
        covered = min(len(forced), len(entry.stream_bytes))
        if entry.stream_bytes[:covered] != forced[:covered]:
            return False
        return self._allowed_under(entry.stream, covered)

    def _allowed_under(self, stream: list[int], forced_len: int) -> bool:
        """Whether each token that covers the forced prefix is one a forced prefix allows at all
        (some bytes, not special: daemon/engine/prompt.py ForcedPrefix); a shorter prefix may
        have left such a token unmasked where the longer one masks it."""
        covered = 0
        for token in stream:
            if covered >= forced_len:
                return True
            piece = self.token_bytes(token)
            if not piece or self.is_special(token):
                return False
            covered += len(piece)
        return covered >= forced_len

    def forget(self, uri: str) -> None:
        for entry in self._answers.pop(uri, ()):
            self._forgotten(entry)

    def clear(self) -> None:
        for uri in list(self._answers):
            self.forget(uri)

    def _forgotten(self, entry: RememberedAnswer) -> None:
        if entry.prefetched and not entry.hits:
            self.stats.wasted_tokens += len(entry.stream)
