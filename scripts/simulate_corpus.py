"""Would a background corpus of code help the drafts? A replay, no model run.

    .venv/bin/python scripts/bench_index.py            # once: caches stdlib token ids
    .venv/bin/python scripts/simulate_corpus.py --bench-json bench.json --cases bench/cases/stdlib.jsonl

Retrieval-based drafting (REST, He et al. 2023) drafts from a large datastore of
code rather than from the user's own files. Here the datastore is the standard
library token ids cached by ``scripts/bench_index.py`` (~9M tokens), minus the
case's own package (and its tests), installed into the case's workspace index.
For each case's recorded greedy output (``ngramd bench --json``) the replay asks
the proposer for a draft at every step, as ``scripts/simulate_drafts.py`` does,
with and without drafts from the request's own output (``ContextLookup``, as the
Completer uses), and projects decoding time with the engine's ``DraftPolicy``.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from simulate_drafts import adaptive_policy, load_cost, simulate, trace_proposer  # noqa: E402

TOKEN_CACHE = Path("/tmp/ngramd_bench_tokens.pkl")  # written by scripts/bench_index.py


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench-json", required=True)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--cost", default="35,35,45,79,109,142,208", help="ms per pass of 1,2,4,..,64 new tokens")
    args = ap.parse_args()

    from daemon.bench_cases import load_cases
    from daemon.bench_runner import case_document
    from daemon.context_lookup import ContextLookup
    from daemon.model import load_runtime
    from daemon.prompt import PromptConfig, build_prompt
    from daemon.proposer import IndexProposer
    from index.store import NgramIndex

    rt = load_runtime("tiny", device="cpu")  # only its tokenizer (SmolLM2's) is used
    bench = {c["id"]: c for c in json.load(open(args.bench_json))["cases"]}
    cases = [c for c in load_cases(args.cases) if c.id in bench]
    corpus = pickle.load(open(TOKEN_CACHE, "rb"))
    traces = defaultdict(dict)  # (corpus?, output drafts?) -> case id -> (kind, n, steps)
    for with_corpus in (False, True):
        indexes = {}
        for case in cases:
            ws = str(case.workspace)
            if ws not in indexes:
                idx = NgramIndex(rt.tokenize_batch)
                idx.index_workspace(ws)
                if with_corpus:
                    pkg = case.workspace.name
                    with idx._lock:
                        for path, toks in corpus.items():
                            if f"/{pkg}/" not in path and f"test_{pkg}" not in path:
                                idx._install("corpus:" + path, np.asarray(toks, np.int32))
                        idx._enforce_bound()
                    idx.merge()
                indexes[ws] = idx
            idx = indexes[ws]
            prompt = build_prompt(rt, case.text, case.offset, PromptConfig())
            out = list(bench[case.id]["token_ids"])
            with case_document(idx, case):
                for output_drafts in (False, True):
                    p = IndexProposer(idx, case.path.as_uri())
                    if output_drafts:
                        p = ContextLookup(p, len(prompt.ids))
                    steps = trace_proposer(p, prompt.ids, out, 32)
                    traces[(with_corpus, output_drafts)][case.id] = (case.kind, len(out), steps)
        print(f"corpus={with_corpus}: {idx.stats()['workspace_tokens']:,} workspace tokens", flush=True)

    cost = load_cost(args.cost)
    print("\n| corpus | output drafts | kind | projected decoding speedup | plain passes / passes | steps with an agreeing draft |")
    print("|---|---|---|---:|---:|---:|")
    for (with_corpus, output_drafts), per in traces.items():
        tot = defaultdict(lambda: [0.0, 0.0, 0, 0, 0])
        policy = adaptive_policy(args.cost)
        for kind, n, steps in per.values():
            plain_ms = simulate(steps, n, cost, lambda m, s, c, L: 0)[1]
            passes, ms = simulate(steps, n, cost, policy)
            for key in (kind, "all"):
                t = tot[key]
                t[0] += plain_ms
                t[1] += ms
                t[2] += n
                t[3] += passes
                t[4] += sum(1 for st in steps if st[3] > 0)
        for key in ("ordinary", "repeat", "norepeat", "all"):
            t = tot[key]
            print(f"| {'yes' if with_corpus else 'no'} | {'yes' if output_drafts else 'no'} | {key} "
                  f"| {t[0] / t[1]:.2f}x | {t[2] / t[3]:.2f}x | {t[4]}/{t[2]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
