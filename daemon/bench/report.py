"""The bench's report: the summary over cases, a readable table, JSON, a plot.

A *speedup* is a baseline's time over ngramd's time for the same case
(``plain_ms / ms``; above 1 means ngramd was faster). *Total* speedup is the
ratio of summed times over the cases (long cases weigh more); *median* is the
median of the per-case ratios. ``identical`` counts cases whose speculative
output was token-identical to plain decoding; a case that is not is listed in
``summary["not_identical"]`` and makes ``ngramd bench`` exit with status 1.

A *ceiling* is the most speculation could give on the same cases: a baseline's time
over the time to the first token (the prompt's prefill and the first pass), as if every
token after the first came free. Drafts only shorten the decoding after it; the time to
the first token is the faster of speculation's and plain decoding's (``first_token_ms``,
``plain_first_token_ms``), so a draft riding on the first pass gets no credit. Where the
ceiling sits below a target, drafting alone cannot meet that target on these cases and this
machine (up to the timing noise of the runs it is made of). It bounds the cold runs; with
``--prepared``, ``ceiling_prepared`` is the same bound for the prepared ones (prepared plain
decoding's time over the prepared runs' first token: the prefill left to the request and the
first pass).

With ``ngramd bench --prepared`` each case is also timed with its prompt prefilled first
(daemon/bench/runner.py): ``prepared_vs_plain`` is prepared plain decoding's time over
prepared speculation's, the same head start for both, as in the editor's flow. Each
speedup target then shows that figure too (``prepared``, ``prepared_met``); ``met``
stays the cold protocol's.

Targets (issues 4 and 7; shown, never asserted by a test): ordinary cases >= 2.0x
over plain and >= 1.4x over HF prompt lookup; repeat cases >= 6x over plain; norepeat
cases never below 0.95x of plain; edits that change few lines (1 to ``FEW_LINES`` of
``changed_lines``, answer finished: not cut by max_tokens nor stopped in a loop) >= 6x over
plain; 100% identical. A finished answer that changed nothing (the selection repeated, the
draft's best case) is no edit of a few lines: those are a group of their own, ``edit_unchanged``.

On a llama.cpp runtime the baselines are llama.cpp's own decoding of the same GGUF
(daemon/bench/llamacpp_peer.py): ``vs_llamacpp_plain`` and ``vs_llamacpp_pld`` (its prompt-lookup
speculative mode), cold and prepared (``prepared_vs_...``: each side prepared), with totals of
ms and first-token ms per variant (``totals_ms``, ``first_token_totals_ms``) and how many cases
each peer made plain's very token ids in (``llamacpp_plain_identical``). Their targets (issue 31):
completions >= 1.0x llama.cpp plain in total and never below 0.95x on a case, edits >= 1.5x,
faster than the prompt-lookup peer in total; cold and prepared both. A case's lowest ratio is
also given paired by round (``paired_min``: each case's median over rounds of the ratio within a
round), which the machine's drift between rounds does not move; ``met`` stays the ratio of medians'.
Beside it, ``plain_reference``: the same lowest case for ngramd's plain decoding, which makes
llama.cpp plain's passes and drafts nothing (``plain_vs_llamacpp_plain``): how far the machine's
noise alone moves one case's ratio in the run.

An edit's answer is also judged as code: ``still_compiles`` per case (the Python file
compiles with the answer in place), counted in a group over the answers an editor applies
(finished: not cut by max_tokens nor stopped in a loop) as ``still_compiles`` of
``compile_checked``; and, where the instruction is one daemon/bench/followed.py can judge (a
rename, type hints), ``followed`` per case and ``followed`` of ``follow_checked`` in a group:
the answer does what was asked, no more (speed on an answer that ignores the instruction is
still speed, but not a useful edit).
"""

from __future__ import annotations

import difflib
import os
import statistics
import warnings
from typing import Any, TextIO

from ngramd.daemon.bench.cases import KINDS
from ngramd.daemon.protocol.lines import LINE_BREAK
from ngramd.daemon.protocol.requests import FINISHED_EDIT_STOPS

TARGETS = {
    "ordinary": {"vs_plain": 2.0, "vs_hf": 1.4},
    "repeat": {"vs_plain": 6.0},
    "norepeat": {"min_vs_plain": 0.95},
    "edit_few_lines": {"vs_plain": 6.0},
}
LLAMACPP_TARGETS = {"completions_vs_plain": 1.0, "completions_min_vs_plain": 0.95, "edits_vs_plain": 1.5,
                    "completions_vs_pld": 1.0}
LLAMACPP_PEERS = ("llamacpp_plain", "llamacpp_pld")
# (label, cold ms key, cold first-token key) per variant of a llama.cpp run; prepared: "prepared_" keys
LLAMACPP_VARIANTS = (("spec", "ms", "first_token_ms"), ("plain", "plain_ms", "plain_first_token_ms"),
                     ("llamacpp_plain", "llamacpp_plain_ms", "llamacpp_plain_first_token_ms"),
                     ("llamacpp_pld", "llamacpp_pld_ms", "llamacpp_pld_first_token_ms"))
FEW_LINES = 3  # an edit "changes few lines" when its answer differs from the original in at most this many


def changed_lines(original: str, replacement: str) -> int:
    """Lines an edit changed: per differing block, the larger of its original and replaced line counts.

    A modified line counts once, an inserted or deleted line once.
    Example: changed_lines("a\nb\nc\n", "a\nB\nc\nd\n") == 2.
    """
    ops = difflib.SequenceMatcher(None, _lines(original), _lines(replacement), autojunk=False).get_opcodes()
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in ops if tag != "equal")


def still_compiles(path: str, text: str, start: int, end: int, replacement: str) -> bool | None:
    """Whether the Python file ``text`` still compiles with ``replacement`` put at ``start:end``;
    None when it is not a Python file or did not compile before (then the answer is not to blame).

    Example: still_compiles("a.py", "if a:\n    x = 1\n", 10, 15, "y = 2") is True.
    """
    if not path.endswith((".py", ".pyi")):
        return None

    def compiles(source: str) -> bool:
        with warnings.catch_warnings():  # invalid escapes and the like: still code
            warnings.simplefilter("ignore")
            try:
                compile(source, path, "exec", dont_inherit=True)
            except (SyntaxError, ValueError):  # ValueError: a NUL in the source
                return False
        return True

    if not compiles(text):
        return None
    return compiles(text[:start] + replacement + text[end:])


def _lines(text: str) -> list[str]:
    """``text``'s lines by the project's one line-break rule (daemon/protocol/lines.py), not
    ``str.splitlines`` (which also breaks at \\x0c, \\u2028, ...); a final break ends the last line."""
    lines = LINE_BREAK.split(text)
    return lines[:-1] if lines[-1] == "" else lines


def is_few_lines_edit(row: dict[str, Any]) -> bool:
    """An edit case whose answer was complete and changed 1 to ``FEW_LINES`` lines."""
    return _finished_edit(row) and 1 <= row["changed_lines"] <= FEW_LINES


def is_unchanged_edit(row: dict[str, Any]) -> bool:
    """An edit case whose answer was complete and repeated the selection unchanged."""
    return _finished_edit(row) and row["changed_lines"] == 0


def _finished_edit(row: dict[str, Any]) -> bool:
    return (row.get("mode") == "edit" and row.get("changed_lines") is not None
            and row.get("stop_reason") in FINISHED_EDIT_STOPS)


# A row's median time -> the variant whose every run ``runs_ms`` keeps (daemon/bench/runner.py)
RUNS_OF = {"ms": "spec", "plain_ms": "plain", "hf_prompt_lookup_ms": "hf", "prepared_ms": "prep_spec",
           "prepared_plain_ms": "prep_plain", "llamacpp_plain_ms": "llamacpp_plain",
           "llamacpp_pld_ms": "llamacpp_pld", "prepared_llamacpp_plain_ms": "prep_llamacpp_plain",
           "prepared_llamacpp_pld_ms": "prep_llamacpp_pld"}


def _speedups(rows: list[dict[str, Any]], base_key: str, key: str = "ms") -> dict[str, float | None]:
    timed = [r for r in rows if r.get(base_key) and r.get(key)]
    pairs = [(r[base_key], r[key]) for r in timed]
    if not pairs:
        return {"total": None, "median": None, "min": None, "paired_min": None}
    ratios = [b / m for b, m in pairs]
    paired = [p for p in (_paired_ratio(r, base_key, key) for r in timed) if p is not None]
    return {"total": round(sum(b for b, _ in pairs) / sum(m for _, m in pairs), 3),
            "median": round(statistics.median(ratios), 3),
            "min": round(min(ratios), 3),
            "paired_min": round(min(paired), 3) if len(paired) == len(pairs) else None}


def _paired_ratio(row: dict[str, Any], base_key: str, key: str) -> float | None:
    """A case's speedup paired by round: the median over rounds of the baseline's run over ngramd's
    run of the same round (None without runs of both in every round). The variants of a round run
    back to back, seconds apart; rounds run a minute or more apart, and this machine's speed can
    shift by 20% between them (a case's every variant alike), which moves the ratio of two
    medians taken over different rounds and not the ratio within a round."""
    runs = row.get("runs_ms") or {}
    base, mine = runs.get(RUNS_OF.get(base_key, "")), runs.get(RUNS_OF.get(key, ""))
    if not base or not mine or len(base) != len(mine) or not all(mine):
        return None
    return statistics.median(b / m for b, m in zip(base, mine))


def _decode_speedup(rows: list[dict[str, Any]], base: str) -> float | None:
    """Total speedup of the time after the first token (decoding only, prefill left out)."""
    keys = {"plain": ("plain_ms", "plain_first_token_ms"), "hf": ("hf_prompt_lookup_ms", "hf_first_token_ms")}[base]
    num = den = 0.0
    for r in rows:
        if None in (r.get(keys[0]), r.get(keys[1]), r.get("ms"), r.get("first_token_ms")):
            continue
        num += r[keys[0]] - r[keys[1]]
        den += r["ms"] - r["first_token_ms"]
    return round(num / den, 3) if den > 0 else None


def _ceiling(rows: list[dict[str, Any]], base_key: str, first_keys: tuple[str, ...]) -> float | None:
    """Summed ``base_key`` over the summed time to the first token, the faster of ``first_keys``'
    per case (see the module doc)."""
    pairs = []
    for r in rows:
        firsts = [r[k] for k in first_keys if r.get(k)]
        if r.get(base_key) and firsts:
            pairs.append((r[base_key], min(firsts)))
    den = sum(f for _, f in pairs)
    return round(sum(b for b, _ in pairs) / den, 3) if den > 0 else None


COLD_FIRST = ("first_token_ms", "plain_first_token_ms")
PREPARED_FIRST = ("prepared_first_token_ms", "prepared_plain_first_token_ms")


def _has_llamacpp(rows: list[dict[str, Any]]) -> bool:
    return any("llamacpp_plain_ms" in r for r in rows)


def _llamacpp_group(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The llama.cpp baselines' figures of a group (none where no row has them)."""
    if not _has_llamacpp(rows):
        return {}
    out: dict[str, Any] = {}
    for peer in LLAMACPP_PEERS:
        out[f"vs_{peer}"] = _speedups(rows, f"{peer}_ms")
        out[f"prepared_vs_{peer}"] = _speedups(rows, f"prepared_{peer}_ms", "prepared_ms")
        # every run of the peer, cold and prepared, made plain's token ids
        out[f"{peer}_identical"] = sum(r.get(f"{peer}_identical") is True
                                       and r.get(f"prepared_{peer}_identical") is not False for r in rows)
    out["ceiling_vs_llamacpp_plain"] = _ceiling(rows, "llamacpp_plain_ms", COLD_FIRST)
    out["ceiling_prepared_vs_llamacpp_plain"] = _ceiling(rows, "prepared_llamacpp_plain_ms", PREPARED_FIRST)
    # ngramd's plain decoding against llama.cpp plain: the same passes, no drafting; what the
    # machine's noise alone does to a per-case ratio (``plain_reference`` of the min target)
    out["plain_vs_llamacpp_plain"] = _speedups(rows, "llamacpp_plain_ms", "plain_ms")
    out["prepared_plain_vs_llamacpp_plain"] = _speedups(rows, "prepared_llamacpp_plain_ms", "prepared_plain_ms")
    totals: dict[str, float] = {}
    firsts: dict[str, float] = {}
    for label, ms_key, first_key in LLAMACPP_VARIANTS:
        for prefix, keys in (("", (ms_key, first_key)), ("prep_", _prepared_keys(ms_key, first_key))):
            values = [(r.get(keys[0]), r.get(keys[1])) for r in rows]
            if any(v[0] is not None for v in values):
                totals[prefix + label] = round(sum(v[0] or 0 for v in values), 1)
                firsts[prefix + label] = round(sum(v[1] or 0 for v in values), 1)
    out["totals_ms"], out["first_token_totals_ms"] = totals, firsts
    return out


def _prepared_keys(ms_key: str, first_key: str) -> tuple[str, str]:
    """A cold variant's row keys -> its prepared variant's (``plain_ms`` -> ``prepared_plain_ms``)."""
    if ms_key == "ms":
        return "prepared_ms", "prepared_first_token_ms"
    return "prepared_" + ms_key, "prepared_" + first_key


def _group(rows: list[dict[str, Any]]) -> dict[str, Any]:
    drafted = sum(r["drafted"] for r in rows)
    accepted = sum(r["accepted"] for r in rows)
    passes = sum(r["forward_passes"] for r in rows)
    generated = sum(r["generated"] for r in rows)
    plain_passes = sum(r.get("plain_forward_passes") or 0 for r in rows)
    # edits whose answer an editor applies (finished: not cut at max_tokens nor stopped looping),
    # of Python files that compiled before: how many still compile with the answer in place
    applied = [r["still_compiles"] for r in rows
               if r.get("still_compiles") is not None and r.get("stop_reason") in FINISHED_EDIT_STOPS]
    quality = {"still_compiles": sum(applied), "compile_checked": len(applied)} if applied else {}
    # of those answers, the ones whose instruction can be judged (daemon/bench/followed.py): did it do that?
    judged = [r["followed"] for r in rows
              if r.get("followed") is not None and r.get("stop_reason") in FINISHED_EDIT_STOPS]
    if judged:
        quality.update({"followed": sum(judged), "follow_checked": len(judged)})
    return {**quality,
        "cases": len(rows),
        "vs_plain": _speedups(rows, "plain_ms"),
        "vs_hf": _speedups(rows, "hf_prompt_lookup_ms"),
        "decode_vs_plain": _decode_speedup(rows, "plain"),
        "decode_vs_hf": _decode_speedup(rows, "hf"),
        "ceiling_vs_plain": _ceiling(rows, "plain_ms", COLD_FIRST),
        "ceiling_vs_hf": _ceiling(rows, "hf_prompt_lookup_ms", COLD_FIRST),
        "ceiling_prepared": _ceiling(rows, "prepared_plain_ms", PREPARED_FIRST),
        "prepared_vs_plain": _speedups(rows, "prepared_plain_ms", "prepared_ms"),
        "identical": sum(bool(r["identical"]) for r in rows),
        "drafted": drafted,
        "accepted": accepted,
        "acceptance": round(accepted / drafted, 3) if drafted else 0.0,
        "tokens_per_pass": round(generated / passes, 3) if passes else 0.0,
        # plain decoding's forward passes over ngramd's: the speedup if every pass cost
        # the same; immune to timing noise, an upper bound where drafting costs extra
        "passes_vs_plain": round(plain_passes / passes, 3) if passes and plain_passes else None,
        **_llamacpp_group(rows),
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary object of ``ngramd bench --json`` (see the module doc)."""
    ok = [r for r in rows if r.get("status") == "ok"]
    summary: dict[str, Any] = {
        "cases": len(rows),
        "ok": len(ok),
        "unsupported": [r["id"] for r in rows if r.get("status") == "unsupported"],
        "errors": [r["id"] for r in rows if r.get("status") == "error"],
        "identical": sum(bool(r["identical"]) for r in ok),
        "not_identical": [r["id"] for r in ok if not r["identical"]],
        "all_identical": bool(ok) and all(r["identical"] for r in ok),
        "hf_identical": sum(bool(r.get("hf_identical")) for r in ok),
    }
    summary.update({k: v for k, v in _group(ok).items() if k not in ("cases", "identical")} if ok else {})
    by_kind = {}
    for kind in KINDS:  # completion cases; the kinds' targets are about completions
        group = [r for r in ok if r.get("kind") == kind and r.get("mode") != "edit"]
        if group:
            by_kind[kind] = _group(group)
    summary["by_kind"] = by_kind
    edits = [r for r in ok if r.get("mode") == "edit"]
    summary["edits"] = _group(edits) if edits else None
    few = [r for r in edits if is_few_lines_edit(r)]
    summary["edit_few_lines"] = _group(few) if few else None
    unchanged = [r for r in edits if is_unchanged_edit(r)]
    summary["edit_unchanged"] = _group(unchanged) if unchanged else None
    if _has_llamacpp(ok):  # the llama.cpp targets are about all completions together
        completions = [r for r in ok if r.get("mode") != "edit"]
        summary["completions"] = _group(completions) if completions else None
    summary["targets"] = check_targets(by_kind, summary)
    return summary


def check_targets(by_kind: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """Each issue-4 and issue-7 target: the figure, whether it was met (None: no such cases) and,
    for a total speedup, the ceiling of the same cases (the most any draft could give)."""
    out: dict[str, Any] = {}

    def put(name: str, value: float | None, goal: float, ceiling: float | None = None) -> None:
        out[name] = {"value": value, "goal": goal, "met": None if value is None else value >= goal}
        if ceiling is not None:
            out[name]["ceiling"] = ceiling

    def speedup(name: str, group: dict[str, Any] | None, base: str, goal: float) -> None:
        put(name, group and group[f"vs_{base}"]["total"], goal, group and group[f"ceiling_vs_{base}"])
        prepared = group and base == "plain" and group["prepared_vs_plain"]["total"]
        if prepared:
            out[name].update(prepared=prepared, prepared_met=prepared >= goal)
            if group["ceiling_prepared"] is not None:
                out[name]["prepared_ceiling"] = group["ceiling_prepared"]

    ordinary, repeat, norepeat = (by_kind.get(k) for k in KINDS)
    speedup("ordinary_vs_plain", ordinary, "plain", TARGETS["ordinary"]["vs_plain"])
    speedup("ordinary_vs_hf", ordinary, "hf", TARGETS["ordinary"]["vs_hf"])
    speedup("repeat_vs_plain", repeat, "plain", TARGETS["repeat"]["vs_plain"])
    put("norepeat_min_vs_plain", norepeat and norepeat["vs_plain"]["min"], TARGETS["norepeat"]["min_vs_plain"])
    speedup("edit_few_lines_vs_plain", summary.get("edit_few_lines"), "plain", TARGETS["edit_few_lines"]["vs_plain"])

    def vs_peer(name: str, group: dict[str, Any] | None, peer: str, goal: float, stat: str = "total") -> None:
        """A target over a llama.cpp baseline: cold, and prepared beside it; the ceiling (every
        token after the first free) for a total over llama.cpp plain."""
        ceilings = group and stat == "total" and peer == "llamacpp_plain"
        put(name, group and group[f"vs_{peer}"][stat], goal, group["ceiling_vs_llamacpp_plain"] if ceilings else None)
        prepared = group and group[f"prepared_vs_{peer}"][stat]
        if prepared:
            out[name].update(prepared=prepared, prepared_met=prepared >= goal)
            if ceilings and group["ceiling_prepared_vs_llamacpp_plain"] is not None:
                out[name]["prepared_ceiling"] = group["ceiling_prepared_vs_llamacpp_plain"]
        if group and stat == "min":  # the lowest case paired by round, beside (never instead of) it
            out[name].update(paired=group[f"vs_{peer}"]["paired_min"],
                             prepared_paired=group[f"prepared_vs_{peer}"]["paired_min"])
            if f"plain_vs_{peer}" in group:  # the same lowest case for ngramd's plain decoding
                out[name].update(plain_reference=group[f"plain_vs_{peer}"]["min"],
                                 prepared_plain_reference=group[f"prepared_plain_vs_{peer}"]["min"])

    if "completions" in summary:
        completions, edits = summary["completions"], summary.get("edits")
        vs_peer("completions_vs_llamacpp_plain", completions, "llamacpp_plain", LLAMACPP_TARGETS["completions_vs_plain"])
        vs_peer("completions_min_vs_llamacpp_plain", completions, "llamacpp_plain",
                LLAMACPP_TARGETS["completions_min_vs_plain"], "min")
        vs_peer("edits_vs_llamacpp_plain", edits, "llamacpp_plain", LLAMACPP_TARGETS["edits_vs_plain"])
        vs_peer("completions_vs_llamacpp_pld", completions, "llamacpp_pld", LLAMACPP_TARGETS["completions_vs_pld"])
    # a case that failed never showed it was identical: it counts against the target
    failed = len(summary["errors"])
    out["identical"] = {"value": summary["identical"], "goal": summary["ok"] + failed,
                        "met": (summary["all_identical"] and not failed) if summary["ok"]
                        else (False if failed else None)}  # None: no case at all
    return out


def build_report(rows: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    return {"meta": meta, "cases": rows, "summary": summarize(rows)}


# --------------------------------------------------------------------------- text output


def _fmt(x: Any, suffix: str = "", digits: int = 0) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}{suffix}"
    return f"{x}{suffix}"


COLUMNS = ("id", "kind", "tok", "ms", "plain", "hf", "x plain", "x hf", "passes", "acc/draft", "same")
PREPARED_COLUMNS = ("prep", "prep plain", "x prep")  # after "x hf", in a run with --prepared
# a run on llama.cpp: its own plain and prompt-lookup decoding instead of hf ("lc": llama.cpp)
LLAMACPP_COLUMNS = ("id", "kind", "tok", "ms", "plain", "lc", "lc pld", "x plain", "x lc", "x pld",
                    "passes", "acc/draft", "same")
LLAMACPP_PREPARED_COLUMNS = ("prep", "prep lc", "prep pld", "x prep", "x prep lc", "x prep pld")


def _has_prepared(rows: list[dict[str, Any]]) -> bool:
    return any("prepared_ms" in r for r in rows)


def columns(rows: list[dict[str, Any]]) -> tuple[str, ...]:
    """The table's columns: the prepared ones only where some case was run prepared."""
    base, extra, after = ((LLAMACPP_COLUMNS, LLAMACPP_PREPARED_COLUMNS, "x pld") if _has_llamacpp(rows)
                          else (COLUMNS, PREPARED_COLUMNS, "x hf"))
    if not _has_prepared(rows):
        return base
    at = base.index(after) + 1
    return base[:at] + extra + base[at:]


def table_rows(rows: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    prepared = _has_prepared(rows)
    llamacpp = _has_llamacpp(rows)
    out = []
    for r in rows:
        if r.get("status") != "ok":
            out.append((r["id"], r.get("kind", ""), *["-"] * (len(columns(rows)) - 3),
                        r.get("status", "?") + ": " + str(r.get("error", ""))[:40]))
            continue
        kind = "edit" if r.get("mode") == "edit" else r["kind"]  # edits are summarised apart
        if llamacpp:
            prep = (_fmt(r.get("prepared_ms")), _fmt(r.get("prepared_llamacpp_plain_ms")),
                    _fmt(r.get("prepared_llamacpp_pld_ms")), _fmt(r.get("speedup_prepared"), "x", 2),
                    _fmt(r.get("speedup_prepared_llamacpp_plain"), "x", 2),
                    _fmt(r.get("speedup_prepared_llamacpp_pld"), "x", 2)) if prepared else ()
            out.append((r["id"], kind, str(r["generated"]), _fmt(r["ms"]), _fmt(r["plain_ms"]),
                        _fmt(r.get("llamacpp_plain_ms")), _fmt(r.get("llamacpp_pld_ms")),
                        _fmt(r["speedup_plain"], "x", 2), _fmt(r.get("speedup_llamacpp_plain"), "x", 2),
                        _fmt(r.get("speedup_llamacpp_pld"), "x", 2), *prep, str(r["forward_passes"]),
                        f"{r['accepted']}/{r['drafted']}", "yes" if r["identical"] else "NO"))
            continue
        prep = (_fmt(r.get("prepared_ms")), _fmt(r.get("prepared_plain_ms")),
                _fmt(r.get("speedup_prepared"), "x", 2)) if prepared else ()
        out.append((r["id"], kind, str(r["generated"]), _fmt(r["ms"]), _fmt(r["plain_ms"]),
                    _fmt(r["hf_prompt_lookup_ms"]), _fmt(r["speedup_plain"], "x", 2),
                    _fmt(r["speedup_hf"], "x", 2), *prep, str(r["forward_passes"]),
                    f"{r['accepted']}/{r['drafted']}", "yes" if r["identical"] else "NO"))
    return out


def summary_lines(summary: dict[str, Any]) -> list[str]:
    lines = []
    if not summary.get("ok"):
        return [f"no case ran ({summary['cases']} cases; errors: {summary['errors']}, "
                f"unsupported: {summary['unsupported']})"]

    def sp(g: dict[str, Any], key: str) -> str:
        s = g[key]
        return f"total {_fmt(s['total'], 'x', 2)}, median {_fmt(s['median'], 'x', 2)}, min {_fmt(s['min'], 'x', 2)}"

    def prepared(g: dict[str, Any]) -> str:
        if not g["prepared_vs_plain"]["total"]:
            return ""
        return (f"; prepared vs prepared plain {sp(g, 'prepared_vs_plain')}, "
                f"prepared ceiling {_fmt(g.get('ceiling_prepared'), 'x', 2)}")

    lines.append(f"identical to plain: {summary['identical']}/{summary['ok']}"
                 + ("" if summary["all_identical"] else f"  NOT IDENTICAL: {', '.join(summary['not_identical'])}"))
    lines.append(f"all cases: vs plain {sp(summary, 'vs_plain')}; vs HF prompt lookup {sp(summary, 'vs_hf')}"
                 + prepared(summary))
    lines.append(f"  decoding only (after the first token): vs plain {_fmt(summary['decode_vs_plain'], 'x', 2)}, "
                 f"vs HF {_fmt(summary['decode_vs_hf'], 'x', 2)}; acceptance {summary['acceptance']:.2f}, "
                 f"{summary['tokens_per_pass']:.2f} tokens/pass, "
                 f"plain passes / ngramd passes {_fmt(summary['passes_vs_plain'], 'x', 2)}")
    for label, g in (("all cases", summary), ("completions", summary.get("completions")),
                     ("edits", summary.get("edits"))):
        if g and "vs_llamacpp_plain" in g:
            lines.append(_llamacpp_line(label, g))
    for kind, g in summary["by_kind"].items():
        lines.append(f"{kind} ({g['cases']}): vs plain {sp(g, 'vs_plain')}; vs HF {sp(g, 'vs_hf')}; "
                     f"decoding only {_fmt(g['decode_vs_plain'], 'x', 2)}; "
                     f"passes {_fmt(g['passes_vs_plain'], 'x', 2)}; ceiling {_fmt(g['ceiling_vs_plain'], 'x', 2)}"
                     + prepared(g))
    for label, group in (("edits", summary.get("edits")),
                         (f"edits changing 1-{FEW_LINES} lines", summary.get("edit_few_lines")),
                         ("edits answered with the selection unchanged", summary.get("edit_unchanged"))):
        if group:
            lines.append(f"{label} ({group['cases']}): vs plain {sp(group, 'vs_plain')}; "
                         f"vs HF {sp(group, 'vs_hf')}; decoding only {_fmt(group['decode_vs_plain'], 'x', 2)}; "
                         f"passes {_fmt(group['passes_vs_plain'], 'x', 2)}; "
                         f"ceiling {_fmt(group['ceiling_vs_plain'], 'x', 2)}" + prepared(group)
                         + (f"; the file still compiles after {group['still_compiles']} of "
                            f"{group['compile_checked']} finished answers" if "compile_checked" in group else "")
                         + (f"; the answer does what the instruction asks in {group['followed']} of "
                            f"{group['follow_checked']} judged" if "follow_checked" in group else ""))
    for name, t in summary["targets"].items():
        met = {True: "met", False: "MISSED", None: "n/a"}[t["met"]]
        reach = _reach("cold ceiling" if "prepared" in t else "ceiling", t.get("ceiling"), t["goal"])
        reach = f"; {reach}" if reach else ""
        prep = ""
        if "prepared" in t:
            prep_reach = _reach("ceiling", t.get("prepared_ceiling"), t["goal"])
            prep = (f"; prepared {t['prepared']:.2f}" + (f" ({prep_reach})" if prep_reach else "")
                    + f" {'met' if t['prepared_met'] else 'MISSED'}")
        if t.get("paired") is not None or t.get("prepared_paired") is not None:
            prep += (f"; paired by round {_fmt(t.get('paired'), '', 2)}"
                     + (f", prepared {_fmt(t.get('prepared_paired'), '', 2)}" if "prepared" in t else ""))
        if t.get("plain_reference") is not None:
            prep += (f"; ngramd's plain decoding, the same passes, {_fmt(t['plain_reference'], '', 2)}"
                     + (f", prepared {_fmt(t.get('prepared_plain_reference'), '', 2)}" if "prepared" in t else ""))
        lines.append(f"target {name}: {_fmt(t['value'], '', 2)} (goal {t['goal']}{reach}) {met}{prep}")
    if summary["unsupported"]:
        lines.append(f"unsupported: {', '.join(summary['unsupported'])}")
    if summary["errors"]:
        lines.append(f"errors: {', '.join(summary['errors'])}")
    return lines


def _llamacpp_line(label: str, g: dict[str, Any]) -> str:
    """A group's figures over llama.cpp's own decoding: cold and prepared, totals, identical counts."""
    def sp(key: str) -> str:
        s = g[key]
        return f"total {_fmt(s['total'], 'x', 2)}, min {_fmt(s['min'], 'x', 2)}"

    totals = ", ".join(f"{k} {v:.0f}" for k, v in g["totals_ms"].items())
    firsts = ", ".join(f"{k} {v:.0f}" for k, v in g["first_token_totals_ms"].items())
    return (f"{label} ({g['cases']}) on llama.cpp: vs llama.cpp plain {sp('vs_llamacpp_plain')}, prepared "
            f"{sp('prepared_vs_llamacpp_plain')}; vs LlamaPromptLookupDecoding {sp('vs_llamacpp_pld')}, prepared "
            f"{sp('prepared_vs_llamacpp_pld')}; same ids as plain: llama.cpp plain {g['llamacpp_plain_identical']}/"
            f"{g['cases']}, prompt lookup {g['llamacpp_pld_identical']}/{g['cases']}; ms in total: {totals}; "
            f"first-token ms in total: {firsts}")


def _reach(label: str, ceiling: float | None, goal: float) -> str:
    """A target's ceiling, and whether drafting alone can meet the goal under it ("" without one)."""
    if ceiling is None:
        return ""
    below = ", below the goal: drafting alone cannot meet it here" if ceiling < goal else ""
    return f"{label} {ceiling:.2f}{below}"


def render_text(report: dict[str, Any], out: TextIO, use_rich: bool | None = None) -> None:
    """The table and summary; with rich when it is installed (and ``use_rich`` allows)."""
    rows = table_rows(report["cases"])
    heads = columns(report["cases"])
    lines = summary_lines(report["summary"])
    meta = report["meta"]
    title = (f"ngramd bench: {meta.get('model')} on {meta.get('device')}"
             f"{' (llama.cpp)' if meta.get('runtime') == 'llamacpp' else ''}, {meta.get('cases_file')}, "
             f"repeat {meta.get('repeat')} (ms are medians; x = baseline ms / ngramd ms)")
    if meta.get("hf_skipped"):
        lines = lines + [f"hf baseline skipped: {meta['hf_skipped']}"]
    if use_rich is not False:
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            use_rich = False
    if use_rich is False:
        widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(heads)]
        out.write(title + "\n")
        out.write("  ".join(c.ljust(w) for c, w in zip(heads, widths)).rstrip() + "\n")
        for r in rows:
            out.write("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() + "\n")
        out.write("\n".join(lines) + "\n")
        return
    console = Console(file=out, width=max(120, Console(file=out).width))
    table = Table(title=title)
    for c in heads:
        table.add_column(c, justify="left" if c in ("id", "kind") else "right")
    for r in rows:
        table.add_row(*r, style=None if r[-1] != "NO" else "bold red")
    console.print(table)
    for line in lines:
        console.print(line, markup=False, highlight=False)


def markdown_table(report: dict[str, Any]) -> str:
    """The table as Markdown, for docs/benchmarks.md."""
    rows = table_rows(report["cases"])
    heads = columns(report["cases"])
    head = "| " + " | ".join(heads) + " |\n|" + "|".join("---" for _ in heads) + "|\n"
    return head + "".join("| " + " | ".join(r) + " |\n" for r in rows)


# --------------------------------------------------------------------------- plot


class PlotUnavailable(RuntimeError):
    pass


def require_matplotlib() -> Any:
    """matplotlib's pyplot (Agg backend); PlotUnavailable with the install command if it is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotUnavailable("--plot needs matplotlib: pip install 'ngramd[plot]' "
                              "(or pip install matplotlib)") from exc
    return plt


def check_plot_path(path: str) -> None:
    """PlotUnavailable when ``plot(report, path)`` would fail for a reason known before the run:
    no matplotlib, a format it cannot write, or a folder that is missing or not writable."""
    require_matplotlib()
    from matplotlib.backend_bases import FigureCanvasBase

    suffix = os.path.splitext(path)[1].lstrip(".").lower()
    formats = FigureCanvasBase.get_supported_filetypes()
    if suffix and suffix not in formats:  # no suffix: plot writes png to the very path given
        raise PlotUnavailable(f"--plot {path}: matplotlib cannot write .{suffix} files "
                              f"(it writes {', '.join('.' + f for f in sorted(formats))})")
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise PlotUnavailable(f"--plot {path}: no folder {folder}")
    if not os.access(folder, os.W_OK):
        raise PlotUnavailable(f"--plot {path}: folder {folder} is not writable")


def plot(report: dict[str, Any], path: str) -> None:
    """Speedup per case vs both baselines, and the histogram of accepted tokens per pass."""
    plt = require_matplotlib()
    rows = [r for r in report["cases"] if r.get("status") == "ok"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(max(8, 0.5 * len(rows) + 5), 4.5))
    xs = range(len(rows))
    bars = [("speedup_plain", "vs plain"), ("speedup_hf", "vs HF prompt lookup")]
    if _has_prepared(rows):
        bars.append(("speedup_prepared", "prepared vs prepared plain"))
    width = 0.8 / len(bars)
    for i, (key, label) in enumerate(bars):
        offset = (i - (len(bars) - 1) / 2) * width
        ax1.bar([x + offset for x in xs], [r.get(key) or 0 for r in rows], width, label=label)
    ax1.axhline(1.0, color="black", linewidth=0.8)
    ax1.set_xticks(list(xs))
    ax1.set_xticklabels([r["id"] for r in rows], rotation=70, fontsize=7)
    ax1.set_ylabel("speedup (baseline ms / ngramd ms)")
    ax1.legend()
    accepted = [a for r in rows for a in r.get("accepted_per_pass", [])]
    if accepted:
        ax2.hist(accepted, bins=range(0, max(accepted) + 2), align="left")
    ax2.set_xlabel("accepted draft tokens per forward pass")
    ax2.set_ylabel("passes")
    fig.suptitle(f"ngramd bench: {report['meta'].get('model')} on {report['meta'].get('device')}")
    fig.tight_layout()
    # with no suffix savefig would write PATH.png, not the path reported: the format is said instead
    fig.savefig(path, dpi=110, format=None if os.path.splitext(path)[1] else "png")
    plt.close(fig)
