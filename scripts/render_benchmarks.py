"""Render the tables of docs/benchmarks.md from the runs under bench/runs/.

    .venv/bin/python scripts/render_benchmarks.py            # print the generated tables
    .venv/bin/python scripts/render_benchmarks.py --write    # put them into docs/benchmarks.md
    .venv/bin/python scripts/render_benchmarks.py --check    # exit 1 if the page differs

The page holds each table between two markers, ``<!-- begin generated: NAME -->`` and
``<!-- end generated: NAME -->``; only the text between them is rewritten, the prose around
them is the page's own. ``RUNS`` below says which run feeds which table, and what a run's JSON
does not hold itself: the commit measured, the machine and the command that makes it again.
A run is added by committing its JSON under bench/runs/, adding it to ``RUNS`` and running
``--write``; tests/bench/test_benchmarks_page.py fails when the page and the runs disagree.

Two shapes are read: ``ngramd bench --json`` (``meta``, ``cases``, ``summary``; every figure here
is computed from ``cases``) and ``scripts/bench_typing.py --out`` (``runtime``, ``files``,
``configurations``).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
RUNS_DIR = REPO / "bench" / "runs"
PAGE = REPO / "docs" / "benchmarks.md"


@dataclass(frozen=True)
class Run:
    file: str  # under bench/runs/
    tables: tuple[str, ...]  # which tables it feeds: completions-cold, completions-prepared, edits, typing
    commit: str  # the code measured
    machine: str
    command: str  # the one command that makes it again
    runtime: str = "torch"


QUIET_2_CORES = "2-core x86-64 CPU, nothing else running"  # the machine of most runs


def bench_run(file: str, tables: tuple[str, ...], commit: str, args: str, runtime: str = "torch",
              machine: str = QUIET_2_CORES) -> Run:
    """A run of ``ngramd bench ARGS --json`` written to bench/runs/FILE."""
    return Run(file, tables, commit, machine, f".venv/bin/ngramd bench {args} --json > bench/runs/{file}", runtime)


def typing_run(file: str, commit: str, args: str, runtime: str = "torch", machine: str = QUIET_2_CORES) -> Run:
    """A run of scripts/bench_typing.py ARGS written to bench/runs/FILE (the typing table)."""
    return Run(file, ("typing",), commit, machine,
               f".venv/bin/python scripts/bench_typing.py {args} --out bench/runs/{file}", runtime)


COMPLETIONS = ("completions-cold", "completions-prepared")
# the arguments of the llama.cpp runs' two commands: completions in 5 rounds, edits with the instruction typed
LLAMACPP_COMPLETIONS = "--cases bench/cases/stdlib.jsonl --runtime llamacpp --prepared --repeat 5"
# the same with the prepared variants timed in 15 rounds (the cold ones in 5)
LLAMACPP_COMPLETIONS_15 = LLAMACPP_COMPLETIONS + " --prepared-repeat 15"
LLAMACPP_EDITS = "--cases bench/cases/edits_few.jsonl --runtime llamacpp --prepared --typed-instruction"

# Which run feeds which table, newest first within a table.
RUNS: list[Run] = [
    bench_run("2026-12-07-edits-llamacpp-batch256.json", ("edits",), "a638573",
              LLAMACPP_EDITS,
              runtime="llamacpp"),
    bench_run("2026-12-07-edits-llamacpp-overhead.json", ("edits",), "7da9590",
              LLAMACPP_EDITS,
              runtime="llamacpp"),
    bench_run("2026-12-07-llamacpp-stdlib-prepared15.json", COMPLETIONS, "7d4e969",
              LLAMACPP_COMPLETIONS_15,
              runtime="llamacpp"),
    bench_run("2026-12-07-llamacpp-stdlib-batch256-repeat5.json", COMPLETIONS, "94e8b27",
              LLAMACPP_COMPLETIONS,
              runtime="llamacpp"),
    bench_run("2026-12-07-llamacpp-stdlib-lean-repeat5.json", COMPLETIONS, "fbd5e1e",
              LLAMACPP_COMPLETIONS,
              runtime="llamacpp"),
    bench_run("2026-12-07-llamacpp-stdlib-overhead-repeat5.json", COMPLETIONS, "6b87e7d",
              LLAMACPP_COMPLETIONS,
              runtime="llamacpp", machine="2-core x86-64 CPU; a niced test (about 2% of the CPU) ran "
                                          "during json-repeat-03 and json-norepeat-04"),
    bench_run("2026-12-07-edits-llamacpp-opening.json", ("edits",), "a7ce48e",
              LLAMACPP_EDITS,
              runtime="llamacpp"),
    bench_run("2026-12-07-llamacpp-stdlib-opening-repeat5.json", COMPLETIONS, "a7ce48e",
              LLAMACPP_COMPLETIONS,
              runtime="llamacpp"),
    bench_run("2026-12-07-edits-llamacpp-f16-reduce.json", ("edits",), "9727f36",
              LLAMACPP_EDITS,
              runtime="llamacpp"),
    bench_run("2026-12-07-llamacpp-stdlib-f16-reduce-repeat5.json", COMPLETIONS, "52500fa",
              LLAMACPP_COMPLETIONS,
              runtime="llamacpp", machine="2-core x86-64 CPU; a test run overlapped its first case, json-ordinary-00"),
    bench_run("2026-12-07-edits-llamacpp-stop-cut.json", ("edits",), "3eebe24",
              LLAMACPP_EDITS,
              runtime="llamacpp"),
    bench_run("2026-12-07-llamacpp-stdlib-stop-cut-repeat5.json", COMPLETIONS, "3eebe24",
              LLAMACPP_COMPLETIONS,
              runtime="llamacpp"),
    bench_run("2026-12-07-torch-stdlib-beside-f16-again.json", COMPLETIONS, "488671b",
              "--cases bench/cases/stdlib.jsonl --runtime torch --prepared"),
    bench_run("2026-12-07-torch-stdlib-beside-f16.json", COMPLETIONS, "488671b",
              "--cases bench/cases/stdlib.jsonl --runtime torch --prepared"),
    bench_run("2026-12-07-llamacpp-stdlib-f16-repeat5.json", COMPLETIONS, "488671b",
              LLAMACPP_COMPLETIONS,
              runtime="llamacpp"),
    bench_run("2026-12-07-edits-llamacpp-f16.json", ("edits",), "488671b",
              LLAMACPP_EDITS,
              runtime="llamacpp"),
    bench_run("2026-12-07-torch-stdlib.json", COMPLETIONS, "84b3072",
              "--cases bench/cases/stdlib.jsonl --runtime torch --prepared"),
    bench_run("2026-12-07-llamacpp-stdlib-exact-gemm-repeat3.json", COMPLETIONS, "84b3072",
              "--cases bench/cases/stdlib.jsonl --runtime llamacpp --prepared --repeat 3",
              runtime="llamacpp"),
    bench_run("2026-12-07-edits-llamacpp-exact-gemm.json", ("edits",), "84b3072",
              LLAMACPP_EDITS,
              runtime="llamacpp"),
    bench_run("2026-12-06-edits-llamacpp-declined.json", ("edits",), "7344ca9",
              LLAMACPP_EDITS,
              runtime="llamacpp"),
    typing_run("2026-12-06-typing-llamacpp-huge-pages.json", "7344ca9",
               "--runtime llamacpp --modules json,email,asyncio,http,logging,collections"
               " --functions 6 --lines 5 --sample 12",
               runtime="llamacpp"),
    bench_run("2026-12-06-llamacpp-stdlib-repeat3.json", COMPLETIONS, "f0ed831",
              "--cases bench/cases/stdlib.jsonl --runtime llamacpp --prepared --repeat 3",
              runtime="llamacpp"),
    bench_run("2026-12-06-torch-stdlib-huge-pages.json", COMPLETIONS, "60cc8fe",
              "--cases bench/cases/stdlib.jsonl --runtime torch --prepared"),
    bench_run("2026-12-06-llamacpp-stdlib-huge-pages.json", COMPLETIONS, "60cc8fe",
              "--cases bench/cases/stdlib.jsonl --runtime llamacpp --prepared", runtime="llamacpp"),
    bench_run("2026-12-06-llamacpp-stdlib-prepared-numpy.json", COMPLETIONS, "a52aa14",
              "--cases bench/cases/stdlib.jsonl --runtime llamacpp --prepared", runtime="llamacpp"),
    typing_run("2026-12-06-typing-llamacpp-6-functions.json", "eb733c5",
               "--runtime llamacpp --modules json,email,asyncio,http,logging,collections"
               " --functions 6 --lines 5 --sample 12",
               runtime="llamacpp"),
    bench_run("2026-12-06-llamacpp-stdlib-prepared.json", COMPLETIONS, "f4d0c8e",
              "--cases bench/cases/stdlib.jsonl --runtime llamacpp --prepared", runtime="llamacpp"),
    bench_run("2026-12-06-llamacpp-stdlib.json", ('completions-cold',), "0f9773d",
              "--cases bench/cases/stdlib.jsonl --runtime llamacpp", runtime="llamacpp"),
    typing_run("2026-12-06-typing-llamacpp-peer.json", "3e976f9",
               "--runtime llamacpp --functions 2 --lines 5 --sample 10", runtime="llamacpp"),
    typing_run("2026-12-06-typing-llamacpp.json", "0f9773d",
               "--runtime llamacpp --functions 2 --lines 5 --sample 10", runtime="llamacpp"),
    bench_run("2026-12-06-edits-llamacpp.json", ("edits",), "9813057",
              LLAMACPP_EDITS,
              runtime="llamacpp"),
    bench_run("edits_few_2026-12-01.json", ("edits",), "4c9b4c6",
              "--cases bench/cases/edits_few.jsonl --prepared --typed-instruction --repeat 1"),
    bench_run("2026-12-01-completions-stdlib-cpu.json", COMPLETIONS, "d684adc",
              "--cases bench/cases/stdlib.jsonl --prepared --repeat 3",
              machine="2-core AMD EPYC CPU (AVX2, no AVX-512), nothing else running"),
]

# (label, ngramd's time, the baseline's time, the per-case key saying the outputs matched,
#  the baseline's forward passes): the comparisons a bench run can hold, per flow.
Baseline = tuple[str, str, str, str, str]
COLD: list[Baseline] = [
    ("plain decoding", "ms", "plain_ms", "identical", "plain_forward_passes"),
    ("transformers prompt lookup", "ms", "hf_prompt_lookup_ms", "hf_identical", "hf_forward_passes"),
    ("llama.cpp plain", "ms", "llamacpp_plain_ms", "llamacpp_plain_identical", "llamacpp_plain_forward_passes"),
    ("llama.cpp prompt lookup", "ms", "llamacpp_pld_ms", "llamacpp_pld_identical", "llamacpp_pld_forward_passes"),
]
PREPARED: list[Baseline] = [
    ("plain decoding, prepared", "prepared_ms", "prepared_plain_ms", "prepared_identical", "plain_forward_passes"),
    ("llama.cpp plain, prompt cached", "prepared_ms", "prepared_llamacpp_plain_ms",
     "prepared_llamacpp_plain_identical", "llamacpp_plain_forward_passes"),
    ("llama.cpp prompt lookup, prompt cached", "prepared_ms", "prepared_llamacpp_pld_ms",
     "prepared_llamacpp_pld_identical", "llamacpp_pld_forward_passes"),
]
KNOWN_MS = {b[1] for b in COLD + PREPARED} | {b[2] for b in COLD + PREPARED} | {
    "first_token_ms", "plain_first_token_ms", "hf_first_token_ms", "prepared_first_token_ms",
    "prepared_plain_first_token_ms", "prepare_ms"}


def load(run: Run) -> dict[str, Any]:
    return json.loads((RUNS_DIR / run.file).read_text(encoding="utf-8"))


def run_date(run: Run) -> str:
    found = re.search(r"\d{4}-\d{2}-\d{2}", run.file)
    return found.group(0) if found else "?"


def run_link(run: Run) -> str:
    return f"[{Path(run.file).stem}](../bench/runs/{run.file})"


def x(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}x"


def num(v: float | None, digits: int = 2) -> str:
    return "—" if v is None else f"{v:,.{digits}f}"


# --------------------------------------------------------------------------- ngramd bench runs

def ok_cases(report: dict[str, Any], mode: str) -> list[dict[str, Any]]:
    return [c for c in report["cases"] if c.get("status") == "ok" and (c.get("mode") == "edit") == (mode == "edit")]


def comparison(cases: list[dict[str, Any]], b: Baseline) -> dict[str, Any] | None:
    label, mine, base, same, base_passes = b
    pairs = [c for c in cases if c.get(mine) and c.get(base)]
    if not pairs:
        return None
    generated = sum(c["generated"] for c in pairs)
    passes = sum(c["forward_passes"] for c in pairs)
    if "plain" in base:
        theirs: float | None = 1.0  # one token per pass by construction
    elif all(c.get(base_passes) for c in pairs):
        theirs = generated / sum(c[base_passes] for c in pairs)
    else:
        theirs = None
    judged = [c[same] for c in pairs if c.get(same) is not None]
    return {
        "label": label,
        "cases": len(pairs),
        "total": sum(c[base] for c in pairs) / sum(c[mine] for c in pairs),
        "median": statistics.median(c[base] / c[mine] for c in pairs),
        "tpp": generated / passes if passes else None,
        "tpp_base": theirs,
        "identical": f"{sum(map(bool, judged))}/{len(judged)}" if judged else "not recorded",
    }


def unknown_baselines(cases: list[dict[str, Any]]) -> set[str]:
    return {k for c in cases for k, v in c.items()
            if k.endswith("_ms") and not k.endswith("first_token_ms") and isinstance(v, (int, float))
            and k not in KNOWN_MS}


def bench_table(name: str, mode: str, baselines: list[Baseline],
                groups: Callable[[list[dict[str, Any]]], list[tuple[str, list[dict[str, Any]]]]]) -> str:
    lines = ["| run | runtime | cases | against | speedup, total (median of cases) | tokens per pass, ngramd / baseline "
             "| identical to the baseline |",
             "|---|---|---|---|---|---|---|"]
    legend = []
    for run in (r for r in RUNS if name in r.tables):
        report = load(run)
        for key in sorted(unknown_baselines(report["cases"])):
            print(f"render_benchmarks: {run.file}: {key} is no baseline this script knows", file=sys.stderr)
        first = True
        for group, cases in groups(ok_cases(report, mode)):
            shown = group
            for b in baselines:
                c = comparison(cases, b)
                if c is None:
                    continue
                head = (f"{run_date(run)} | {report['meta'].get('runtime', run.runtime)}" if first else " | ")
                first = False
                lines.append(f"| {head} | {shown} | {c['label']} | **{x(c['total'])}** ({x(c['median'])}) "
                             f"| {num(c['tpp'])} / {num(c['tpp_base'])} | {c['identical']} |")
                shown = ""
        legend.append(run_legend(run, report.get("meta", {})))
    return "\n".join(lines + [""] + legend)


def run_legend(run: Run, meta: dict[str, Any]) -> str:
    model = meta.get("model", "?")
    device = meta.get("device", "?")
    dtype = meta.get("dtype")
    rounds = meta.get("repeat")
    note = " (transcribed from the old page: per-case medians, no token ids)" if meta.get("transcribed_from") else ""
    return (f"- {run_date(run)}, {run_link(run)}{note}: {run.machine}; model {model} on {meta.get('runtime', run.runtime)} "
            f"({device}{', ' + dtype if dtype else ''}); {rounds} round(s); commit `{run.commit}`.  \n"
            f"  `{run.command}`")


def completion_groups(cases: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    return [(f"{len(cases)}", cases)] if cases else []


def edit_groups(cases: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    from ngramd.daemon.bench.report import is_few_lines_edit

    few = [c for c in cases if is_few_lines_edit(c)]
    out = [(f"{len(few)} changing 1-3 lines", few)] if few else []
    return out + [(f"all {len(cases)}", cases)] if cases else out


# --------------------------------------------------------------------------- the typing replay

def typing_table() -> str:
    lines = ["| run | runtime | configuration | keystroke to suggestion, p50 / p95 / p99 ms | ngramd faster, p50 / p95 "
             "| forward passes per keystroke | answers with no pass | decoded answers: how many, p50 / p95 ms "
             "| characters accepted | identical to cold plain |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    legend = []
    for run in (r for r in RUNS if "typing" in r.tables):
        report = load(run)
        configs = report["configurations"]
        mine = configs.get("ngramd", {}).get("total", {}).get("latency_ms", {})
        first = True
        for name, cfg in configs.items():
            t = cfg["total"]
            lat = t["latency_ms"]
            faster = " / ".join(x(lat[p] / mine[p]) if mine.get(p) and lat.get(p) else "—" for p in ("p50", "p95")) \
                if name != "ngramd" else ""
            head = f"{run_date(run)} | {report.get('runtime', run.runtime)}" if first else " | "
            first = False
            dec = t.get("latency_ms_decoded") or {}  # runs before the replay kept them apart: —
            decoded = (f"{dec['n']:,} of {t['shown']:,}: {num(dec['p50'], 0)} / {num(dec['p95'], 0)}"
                       if dec.get("n") else "—")
            lines.append(f"| {head} | {name} | {num(lat['p50'], 0)} / {num(lat['p95'], 0)} / {num(lat['p99'], 0)} "
                         f"| {faster} | {num(t['passes_per_keystroke'])} | {t['zero_pass_share']:.0%} | {decoded} "
                         f"| {t['accepted_share']:.0%} of {t['typed_chars'] + t['accepted_chars']:,} "
                         f"| {t['identical_to_cold']} |")
        legend.append(f"- {run_date(run)}, {run_link(run)}: {run.machine}; {len(report['files'])} functions typed; "
                      f"commit `{run.commit}`.  \n  `{run.command}`")
    return "\n".join(lines + [""] + legend)


TABLES: dict[str, Callable[[], str]] = {
    "completions-cold": lambda: bench_table("completions-cold", "complete", COLD, completion_groups),
    "completions-prepared": lambda: bench_table("completions-prepared", "complete", PREPARED, completion_groups),
    "edits": lambda: bench_table("edits", "edit", COLD + PREPARED, edit_groups),
    "typing": typing_table,
}

BLOCK = re.compile(r"(<!-- begin generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated: (?P=name) -->)",
                   re.DOTALL)


def render_page(page: str) -> str:
    """The page with every generated block rendered again from the runs."""
    def sub(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in TABLES:
            raise SystemExit(f"render_benchmarks: the page has a block {name!r} this script does not render")
        return f"{m.group(1)}{TABLES[name]()}\n{m.group(4)}"
    return BLOCK.sub(sub, page)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the generated blocks of docs/benchmarks.md")
    mode.add_argument("--check", action="store_true", help="exit 1 if docs/benchmarks.md is not what the runs give")
    args = ap.parse_args()
    page = PAGE.read_text(encoding="utf-8")
    new = render_page(page)
    if args.write:
        PAGE.write_text(new, encoding="utf-8")
    elif args.check:
        if new != page:
            print("docs/benchmarks.md differs from bench/runs/: run scripts/render_benchmarks.py --write",
                  file=sys.stderr)
            return 1
    else:
        for name, render in TABLES.items():
            print(f"## {name}\n\n{render()}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
