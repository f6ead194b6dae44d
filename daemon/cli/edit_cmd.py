"""``ngramd edit FILE --start L:C --end L:C --instruction TEXT``: one speculative edit, in-process.

Prints the replacement text for the range (the file is never written), or with
``--json`` one object: ``text``, ``forward_passes``, ``drafted``, ``accepted``,
``ms`` (as ``ngramd complete --json``), plus ``start``/``end`` (character
offsets), ``stop_reason``, ``prompt`` and the full ``stats``.

Positions are ``LINE:COL``, both 0-based; COL counts characters (code points)
and may equal the line's length (the end of the line).

Exit status: 0, the rewrite finished; 2, bad input (nothing rewritten); 3
(``EXIT_UNFINISHED``), the rewrite stopped before its end (at ``--max-tokens``, the
model's positions, or in a loop: ``repetition``): the text is still printed, cut short,
with a warning on stderr, because it must not replace the range. With ``--json`` the
status is 0 and ``stop_reason`` says it.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from pathlib import Path
from typing import Any

from ngramd.daemon.cli.inputs import InputError, check_generation_args, make_index, offset_of, read_source
from ngramd.daemon.protocol.requests import FINISHED_EDIT_STOPS

_POS = re.compile(r"\s*(-?\d+)\s*:\s*(-?\d+)\s*")  # a negative one is said to be outside the file
EXIT_UNFINISHED = 3


class PositionError(InputError):
    """A ``L:C`` position that is malformed or not in the file."""


def parse_position(spec: str) -> tuple[int, int]:
    """``"12:4"`` -> ``(12, 4)``; anything else raises ``PositionError``."""
    m = _POS.fullmatch(spec or "")
    if not m:
        raise PositionError(f"position {spec!r} is not LINE:COL (0-based integers, e.g. 12:4)")
    return int(m.group(1)), int(m.group(2))


def position_to_offset(text: str, line: int, col: int) -> int:
    """Character offset of 0-based (line, col) in ``text``; ``PositionError`` when outside it."""
    try:
        return offset_of(text, line, col)
    except InputError as exc:
        raise PositionError(str(exc)) from None


def resolve_range(text: str, start: str, end: str) -> tuple[int, int]:
    """Offsets of the ``L:C`` strings ``start`` and ``end``; start must not be after end."""
    s, e = (_offset_for(option, spec, text) for option, spec in (("--start", start), ("--end", end)))
    if s > e:
        raise PositionError(f"--start {start} is after --end {end}")
    return s, e


def _offset_for(option: str, spec: str, text: str) -> int:
    """``spec``'s offset, an error naming ``option`` when it is not a position in ``text``."""
    try:
        return position_to_offset(text, *parse_position(spec))
    except PositionError as exc:
        raise PositionError(f"{option}: {exc}") from None


def _error(message: str) -> int:
    print(f"ngramd edit: error: {message}", file=sys.stderr)
    return 2


def run(args: Any) -> int:
    path = Path(args.file)
    try:
        text = read_source(path, allow_empty=True)
        start, end = resolve_range(text, args.start, args.end)
        check_generation_args(args.max_tokens, args.temperature, args.top_p, args.seed)
    except InputError as exc:
        return _error(str(exc))
    if not args.instruction.strip():
        return _error("--instruction is empty")

    from ngramd.daemon.runtime.loading import ModelLoadError, load_runtime
    from ngramd.daemon.protocol.requests import EditRequest, SamplingParams

    try:
        runtime = load_runtime(args.model, device=args.device, runtime=getattr(args, "runtime", "auto"),
                               exact_kernels=getattr(args, "exact_kernels", False))
    except ModelLoadError as exc:
        return _error(str(exc))
    index = make_index(runtime, [])
    from ngramd.daemon.edit.session import EditingCompleter

    completer = EditingCompleter(runtime, index)
    req = EditRequest(uri=path.resolve().as_uri(), text=text, start=start, end=end,
                      instruction=args.instruction, max_tokens=args.max_tokens,
                      sampling=SamplingParams(temperature=args.temperature, top_p=args.top_p,
                                              seed=args.seed),
                      speculate=not args.no_speculation, stop_loops=not args.no_loop_stop)
    try:
        result = completer.edit(req, threading.Event())
    except ValueError as exc:  # e.g. a selection too long for the model's positions
        return _error(str(exc))
    if args.json:
        stats = result.stats
        print(json.dumps({
            "text": result.text, "token_ids": list(result.token_ids), "start": start, "end": end,
            "forward_passes": stats.forward_passes, "drafted": stats.drafted,
            "accepted": stats.accepted, "ms": round(stats.ms, 2),
            "stop_reason": result.stop_reason, "prompt": result.prompt, "stats": stats.to_dict(),
            "model": runtime.name, "device": str(runtime.device), "file": str(path),
            "speculate": req.speculate,
        }))
        return 0
    sys.stdout.write(result.text)
    if result.text and not result.text.endswith("\n"):
        sys.stdout.write("\n")
    s = result.stats
    print(f"--- {s.generated} tokens in {s.ms:.0f} ms ({s.forward_passes} passes, "
          f"{s.tokens_per_pass:.2f} tokens/pass; drafted {s.drafted}, accepted {s.accepted}; "
          f"first token {s.first_token_ms:.0f} ms; prefill {s.prefill_tokens}; stop: {result.stop_reason}; "
          f"{'speculative' if req.speculate else 'plain'}; {runtime.name} on {runtime.device})", file=sys.stderr)
    if result.stop_reason not in FINISHED_EDIT_STOPS:
        advice = ("the model went round in a loop: reword the instruction or select less"
                  if result.stop_reason == "repetition" else "select less or raise --max-tokens")
        print(f"ngramd edit: warning: the rewrite did not finish (stop: {result.stop_reason} after "
              f"{s.generated} tokens): the text above is cut short and must not replace the range; "
              f"{advice}", file=sys.stderr)
        return EXIT_UNFINISHED
    return 0
