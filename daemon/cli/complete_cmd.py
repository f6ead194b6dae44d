"""``ngramd complete FILE --line L --col C``: one completion, in-process.

Loads the model, indexes the file itself (and ``--workspace`` folders), completes at the position and prints the text and
its statistics, or one JSON object (``CompletionResult.to_dict()`` plus the
model and the position, and ``forward_passes``, ``drafted``, ``accepted`` and ``ms``
at its top as ``ngramd edit --json`` has them) with ``--json``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from ngramd.daemon.cli.inputs import InputError, check_generation_args, make_index, offset_of, read_source
from ngramd.daemon.protocol.requests import CompletionRequest, SamplingParams


def run(args: Any) -> int:
    try:  # the input first: a mistake is reported at once, not after torch's import
        path = Path(args.file)
        text = read_source(path)
        offset = offset_of(text, args.line, args.col)
        check_generation_args(args.max_tokens, args.temperature, args.top_p, args.seed)
        for ws in args.workspace:
            if not Path(ws).is_dir():
                raise InputError(f"--workspace {ws}: not a directory")
    except InputError as exc:
        print(f"ngramd complete: error: {exc}", file=sys.stderr)
        return 2
    from ngramd.daemon.engine.completer import Completer
    from ngramd.daemon.runtime.loading import ModelLoadError, load_runtime

    try:
        runtime = load_runtime(args.model, args.device, getattr(args, "runtime", "auto"),
                               exact_kernels=getattr(args, "exact_kernels", False))
    except ModelLoadError as exc:
        print(f"ngramd complete: error: {exc}", file=sys.stderr)
        return 2
    index = make_index(runtime, list(args.workspace))
    completer = Completer(runtime, index)
    req = CompletionRequest(
        uri=path.resolve().as_uri(), text=text, offset=offset, max_tokens=args.max_tokens,
        multiline=not getattr(args, "single_line", False),
        sampling=SamplingParams(temperature=args.temperature, top_p=args.top_p, seed=args.seed),
        speculate=not args.no_speculation)
    t0 = time.perf_counter()
    try:
        result = completer.complete(req)
    except ValueError as exc:
        print(f"ngramd complete: error: {exc}", file=sys.stderr)
        return 2
    wall = (time.perf_counter() - t0) * 1000
    if args.json:
        out = result.to_dict()
        s = result.stats
        out.update(model=runtime.name, device=str(runtime.device), file=str(path), line=args.line,
                   col=args.col, offset=offset, speculate=req.speculate, forward_passes=s.forward_passes,
                   drafted=s.drafted, accepted=s.accepted, ms=round(s.ms, 2))
        print(json.dumps(out))
        return 0
    s = result.stats
    print(result.text)
    print(f"--- {s.generated} tokens in {wall:.0f} ms ({s.forward_passes} passes, "
          f"{s.tokens_per_pass:.2f} tokens/pass; drafted {s.drafted}, accepted {s.accepted}; "
          f"first token {s.first_token_ms:.0f} ms; prefill {s.prefill_tokens}, reused {s.reused_tokens}; "
          f"stop: {result.stop_reason}; {'speculative' if req.speculate else 'plain'}; {runtime.name} "
          f"on {runtime.device})", file=sys.stderr)
    return 0
