"""Do other edit prompts make the model do what was asked? (an experiment, not a code path)

Each edit case is decoded plainly (greedy, the real model) with each prompt variant; the
answer is judged with daemon/bench_followed.py (a rename or type hints done exactly) and
replayed with the real proposer and draft policy on a fixed cost curve (scripts/simulate_edits.py),
so that speed is compared on the answers each prompt gets. Variants (chat style only):

- ``base``: the prompt as built (daemon/edit_prompt.py);
- ``shots1`` / ``shots2``: worked examples before the request, as earlier chat turns (a
  parameter renamed; then type hints added);
- ``no-context``: the selection and the instruction only, no file excerpt;
- ``no-context-shots2``: both.

docs/benchmarks.md ("Does the answer do what was asked?") records a run.

    .venv/bin/python scripts/edit_prompt_variants.py --cases bench/cases/edits_few.jsonl [--variants base,shots1]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import simulate_edits  # noqa: E402  (a sibling script)

VARIANTS = ("base", "shots1", "shots2", "no-context", "no-context-shots2")
COST = "35.4,35.4,40,48.8,66.2,100.1,174.6"  # ms for 1-64 new tokens (docs/benchmarks.md, session 16)

# (file excerpt with the selection marked, selection, instruction, answer)
EXAMPLES = (
    ("import math\n\n<selection/>\n\ndef perimeter(r):\n    return 2 * math.pi * r",
     'def area(radius, scale=1.0):\n    """The area of a circle."""\n    full = math.pi * radius ** 2\n'
     "    return full * scale",
     "Rename the parameter radius to r.",
     'def area(r, scale=1.0):\n    """The area of a circle."""\n    full = math.pi * r ** 2\n'
     "    return full * scale"),
    ("import os\n\n<selection/>",
     "def join_all(base, names):\n    paths = []\n    for name in names:\n"
     "        paths.append(os.path.join(base, name))\n    return paths",
     "Add type hints.",
     "def join_all(base: str, names: list[str]) -> list[str]:\n    paths = []\n    for name in names:\n"
     "        paths.append(os.path.join(base, name))\n    return paths"),
)


def user_message(context: str | None, shown: str, instruction: str, fence: str = "```", lang: str = "python") -> str:
    """The user turn as daemon/edit_prompt.py writes it, the file excerpt left out when ``context`` is None."""
    from daemon.edit_prompt import file_block, question

    head = "" if context is None else file_block("example.py", fence, lang, context)
    return head + question(fence, lang, shown, instruction)


def variant_prompt(rt, ep, variant: str, instruction: str, lang: str):
    """``ep`` (an EditPrompt) with the prompt of ``variant``."""
    import daemon.edit_prompt as edit_prompt

    if variant == "base":
        return ep
    shots = {"shots1": 1, "shots2": 2, "no-context": 0, "no-context-shots2": 2}[variant]
    with_context = not variant.startswith("no-context")
    messages = [{"role": "system", "content": edit_prompt.SYSTEM}]
    for context, shown, ask, answer in EXAMPLES[:shots]:
        messages.append({"role": "user", "content": user_message(context if with_context else None, shown, ask)})
        messages.append({"role": "assistant", "content": f"```python\n{answer}\n```"})
    messages.append({"role": "user", "content": "\x00user\x00"})
    rendered = rt.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    before, after = rendered.split("\x00user\x00")
    after += ep.fence + lang
    if with_context:
        head, tail = edit_prompt._chat_template_around_user(rt.tokenizer)  # as build_edit_prompt wrote them
        user = ep.prompt[len(head):len(ep.prompt) - len(tail + ep.fence + lang)]
    else:
        user = user_message(None, ep.shown, instruction, ep.fence, lang)
    ids = (edit_prompt.encode_template(rt.tokenizer, before) + list(rt.encode(user))
           + edit_prompt.encode_template(rt.tokenizer, after))
    return dataclasses.replace(ep, prompt=before + user + after, prompt_ids=ids)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", required=True, nargs="+")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    variants = args.variants.split(",")
    if unknown := set(variants) - set(VARIANTS):
        ap.error(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")

    import torch

    import daemon.edit as edit
    from daemon.adaptive import AdaptiveConfig, DraftPolicy
    from daemon.bench_cases import load_cases
    from daemon.bench_followed import followed
    from daemon.bench_report import changed_lines
    from daemon.bench_runner import case_document
    from daemon.completer import Completer
    from daemon.edit_indent import line_before
    from daemon.edit_prompt import build_edit_prompt, language_of
    from daemon.edit_proposer import EditProposerConfig
    from daemon.engine import EngineConfig
    from daemon.model import load_runtime
    from daemon.requests import EditRequest
    from edit_bounds import replay_bound

    torch.set_num_threads(args.threads)
    rt = load_runtime(None, device="cpu")
    completer = Completer(rt, None, EngineConfig(calibrate=False, add_history=False))
    cost = simulate_edits.cost_model(COST)
    cases, seen = [], set()
    for path in args.cases:
        for case in load_cases(path):
            if case.mode == "edit" and case.id not in seen:
                seen.add(case.id)
                cases.append(case)
    indexes: dict = {}
    build = edit.build_edit_prompt
    for variant in variants:
        judged, plain_ms, spec_ms, ratios, few = [], 0.0, 0.0, [], 0
        for case in cases:
            uri, end = case.path.as_uri(), case.end or case.offset
            ep = variant_prompt(rt, build_edit_prompt(rt, case.text, case.offset, end, case.instruction, uri),
                                variant, case.instruction, language_of(uri))
            edit.build_edit_prompt = lambda *a, _ep=ep, **k: _ep  # the run uses this variant's prompt
            try:
                result = completer.edit(EditRequest(uri=uri, text=case.text, start=case.offset, end=end,
                                                    instruction=case.instruction, max_tokens=case.max_tokens,
                                                    speculate=False))
            finally:
                edit.build_edit_prompt = build
            answer = list(result.token_ids)
            lead = line_before(case.text, case.offset)
            verdict = followed(case.instruction, case.path.name, case.text[case.offset:end], lead, result.text)
            index = simulate_edits.workspace_index(indexes, rt, case.workspace)
            with case_document(index, case):
                proposer = edit.edit_proposer(ep, index, uri, EditProposerConfig(), rt.token_bytes)
                policy = edit.EditDraftPolicy(DraftPolicy(cost, AdaptiveConfig()), width=1)
                _, ms = replay_bound("policy", answer, ep.prompt_ids, ep.draft_ids, cost, case.max_tokens,
                                     EditProposerConfig().k_max, proposer, policy)
            plain = len(answer) * cost(1)
            plain_ms, spec_ms = plain_ms + plain, spec_ms + ms
            ratios.append(plain / ms)
            judged.append(verdict)
            lines = changed_lines(case.text[case.offset:end], result.text)
            few += lines <= 3
            print(f"{variant:18} {case.id[:44]:44} followed={verdict!s:5} lines={lines:3} "
                  f"tokens={len(answer):4} prompt={len(ep.prompt_ids):4} {plain / ms:5.2f}x", flush=True)
        print(f"== {variant}: followed {judged.count(True)} of {judged.count(True) + judged.count(False)} judged; "
              f"{few} of {len(cases)} change <= 3 lines; projected {plain_ms / spec_ms:.2f}x over plain in total, "
              f"median {statistics.median(ratios):.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
