"""The request and result types shared by the CLI, the RPC service and the bench.

Torch-free so that the LSP and the RPC layer can import them. Offsets are in
characters (Python ``str`` indices, i.e. code points) of the document text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


# A positive temperature below MIN_TEMPERATURE is refused rather than quietly made greedy:
# logits / T overflows float32 to inf for T below ~1e-37 (NaN probabilities), and
# anything this small samples like greedy anyway, so 0 says what the caller means.
MIN_TEMPERATURE = 1e-4
MAX_TEMPERATURE = 100.0


def check_temperature(value: float) -> float:
    """``value`` when it is 0 (greedy) or finite in [MIN_TEMPERATURE, MAX_TEMPERATURE]; else ValueError.

    The message leaves out the parameter's name, which the caller adds
    (``--temperature`` on the command line, ``'temperature'`` in the RPC).
    """
    if not (value == 0 or MIN_TEMPERATURE <= value <= MAX_TEMPERATURE):  # NaN fails both
        raise ValueError(f"must be >= 0 (0 is greedy; otherwise between {MIN_TEMPERATURE:g} "
                         f"and {MAX_TEMPERATURE:g}), got {value}")
    return value


def check_top_p(value: float) -> float:
    """``value`` when it is in (0, 1] (NaN is not); else ValueError, worded like ``check_temperature``."""
    if not 0 < value <= 1:
        raise ValueError(f"must be in (0, 1], got {value}")
    return value


MAX_SEED = 2**63 - 1  # seeds are 0..MAX_SEED (numpy's SeedSequence takes no negative ones)


def check_seed(value: int | None) -> int | None:
    """``value`` when it is None or in [0, MAX_SEED]; else ValueError."""
    if value is not None and not 0 <= value <= MAX_SEED:
        raise ValueError(f"must be between 0 and {MAX_SEED}, got {value}")
    return value


def check_sampling(sampling: "SamplingParams",
                   names: tuple[str, str, str] = ("temperature", "top_p", "seed")) -> None:
    """``check_temperature``, ``check_top_p`` and ``check_seed``; ValueError naming the field as
    ``names`` call them (the command line names its flags)."""
    for name, value, check in ((names[0], sampling.temperature, check_temperature),
                               (names[1], sampling.top_p, check_top_p),
                               (names[2], sampling.seed, check_seed)):
        try:
            check(value)
        except ValueError as exc:
            raise ValueError(f"{name} {exc}") from None


# An edit's instruction is a sentence or a paragraph; a huge one would be tokenized on the
# model's worker, uncancellable, before the edit is found too long (10 MB took 12 s).
MAX_INSTRUCTION_CHARS = 10_000


def check_instruction(value: object) -> str:
    """An edit's instruction when it has some non-blank text and at most MAX_INSTRUCTION_CHARS
    characters; else ValueError (the RPC checks it before queueing, the engine for in-process
    callers)."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("the instruction is empty")
    if len(value) > MAX_INSTRUCTION_CHARS:
        raise ValueError(f"the edit is too long to rewrite: the instruction has {len(value)} characters, "
                         f"at most {MAX_INSTRUCTION_CHARS} are taken; shorten the instruction")
    try:  # a lone surrogate (bytes that were not UTF-8 on a command line) has no tokens
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"the instruction is not valid text: {exc.reason} at character {exc.start}") from None
    return value


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 means greedy
    top_p: float = 1.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True)
class CompletionRequest:
    """Complete ``text`` at character ``offset``. ``text`` is the whole buffer."""

    uri: str
    text: str
    offset: int
    max_tokens: int = 64
    multiline: bool = True
    sampling: SamplingParams = SamplingParams()
    speculate: bool = True
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class EditRequest:
    """Rewrite ``text[start:end]`` following ``instruction``."""

    uri: str
    text: str
    start: int
    end: int
    instruction: str
    max_tokens: int | None = None  # None: sized from the original range
    sampling: SamplingParams = SamplingParams()
    speculate: bool = True
    stop_loops: bool = True  # stop an answer caught in a loop (daemon/engine/repetition.py)


@dataclass
class GenerationStats:
    """Counters for one request; ``merge`` accumulates totals."""

    forward_passes: int = 0
    prefill_tokens: int = 0  # prompt tokens actually run through the model
    reused_tokens: int = 0  # prompt tokens whose KV came from the cache
    drafted: int = 0
    accepted: int = 0
    generated: int = 0
    ms: float = 0.0
    first_token_ms: float = 0.0
    drafted_by_source: dict[str, int] = field(default_factory=dict)
    accepted_by_source: dict[str, int] = field(default_factory=dict)

    @property
    def tokens_per_pass(self) -> float:
        decode_passes = max(self.forward_passes, 1)
        return self.generated / decode_passes

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def merge(self, other: "GenerationStats") -> None:
        for name in ("forward_passes", "prefill_tokens", "reused_tokens", "drafted",
                     "accepted", "generated", "ms"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for mine, theirs in ((self.drafted_by_source, other.drafted_by_source),
                             (self.accepted_by_source, other.accepted_by_source)):
            for key, value in theirs.items():
                mine[key] = mine.get(key, 0) + value

    def to_dict(self) -> dict[str, Any]:
        return {
            "forward_passes": self.forward_passes,
            "prefill_tokens": self.prefill_tokens,
            "reused_tokens": self.reused_tokens,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "generated": self.generated,
            "tokens_per_pass": round(self.tokens_per_pass, 3),
            "acceptance": round(self.acceptance, 3),
            "ms": round(self.ms, 2),
            "first_token_ms": round(self.first_token_ms, 2),
            "drafted_by_source": dict(self.drafted_by_source),
            "accepted_by_source": dict(self.accepted_by_source),
        }


# How a finished rewrite (edit) ends (daemon/engine/stops.py): its closing fence, or the model's end
# of text. Any other stop (max_tokens, repetition, cancelled) leaves the text cut short: applied, it would
# delete the selection's tail, so the LSP refuses it and `ngramd edit` warns.
FINISHED_EDIT_STOPS = ("stop_string", "eos")


@dataclass(frozen=True)
class Prepared:
    """What a prepare (a prompt prefilled ahead of the request that will use it) did: the
    prompt's tokens, those it ran through the model, and those already cached."""

    tokens: int
    prefilled: int
    reused: int
    cancelled: bool = False

    def to_dict(self) -> dict[str, int]:
        return {"tokens": self.tokens, "prefilled": self.prefilled, "reused": self.reused}


@dataclass
class CompletionResult:
    text: str
    token_ids: list[int]
    prompt: str  # the exact text given to the model
    stats: GenerationStats
    cancelled: bool = False
    stop_reason: str = ""  # "max_tokens" | "stop_string" | "end_of_line" | "block_end" | "eos" | "repetition" | "cancelled"
    # "" decoded; "answer_cache": a remembered answer typed through; "prefetch": one decoded ahead
    answered_from: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "token_ids": list(self.token_ids),
            "prompt": self.prompt,
            "stats": self.stats.to_dict(),
            "cancelled": self.cancelled,
            "stop_reason": self.stop_reason,
            "answered_from": self.answered_from,
        }
