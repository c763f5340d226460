"""Render a Comparison: text for people, JSON (schema 2), Markdown for a pull request
comment, JUnit XML (one test case per compared metric) for CI test reporters.

Every regression, WATCH line and improvement is a line a reviewer can check on its own
(docs/ci.md "Reading a report"): the raw medians and their raw change; the normalized
median and change, labelled with the factor and where it came from (raw new median /
factor = normalized median); the Hodges-Lehmann effect with its interval, p and method,
which the verdict uses; the floor; its share of op time's change; then what changed in its
work and the rule that judged it. JSON carries the same numbers (never NaN or Infinity:
null instead).
"""

from __future__ import annotations

import json
import math
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from ..gate.compare import Comparison
from ..gate.workdiff import DIFF_SCHEMA, work_note
from ..units import fmt_us, p_value3

SCHEMA = 2
KIND_LABEL = {"step": "step", "op": "op type", "scope": "scope"}
MOVED = ("regression", "watch", "improvement", "new", "vanished")
HEADINGS = {"regression": "REGRESSIONS", "watch": "WATCH (same work, not failing the build)",
            "improvement": "IMPROVEMENTS", "new": "NEW", "vanished": "VANISHED"}
WORK_FIELDS = [c for c in DIFF_SCHEMA if c not in ("kind", "name")]


def _num(value: Any, digits: int = 1) -> Any:
    if value is None or isinstance(value, bool):
        return value
    f = float(value)
    if not math.isfinite(f):
        return None
    return round(f, digits) if digits is not None else f


def _records(c: Comparison) -> list[dict[str, Any]]:
    out = []
    for r in c.rows.iter_rows(named=True):
        down = r["verdict"] == "improvement"
        p_kind = "step level, Bonferroni" if r["kind"] == "step" else "Benjamini-Hochberg"
        out.append({
            "kind": r["kind"], "name": r["name"], "verdict": r["verdict"],
            "base_median_us": _num(r["base_median_us"]), "new_median_us": _num(r["new_median_us"]),
            "base_p90_us": _num(r["base_p90_us"]), "new_p90_us": _num(r["new_p90_us"]),
            "change_pct": _num(r["change_pct"]), "raw_change_pct": _num(r["change_pct"]),
            "normalized_median_us": _num(r.get("norm_median_us")),
            "normalized_change_pct": _num(r["norm_change_pct"]),
            "factor": _num(r.get("factor"), 4), "factor_from": r.get("factor_from"),
            "effect_pct": _num(r["effect_pct"]),
            "effect_ci95_pct": [_num(r["effect_low_pct"]), _num(r["effect_high_pct"])],
            "floor_pct": _num(r["floor_pct"]), "floor_from": r.get("floor_from"),
            "share_of_step_pct": _num(r["share_pct"]),
            "p_value": p_value3(r["p_less_adj"] if down else r["p_greater_adj"]),
            "p_raw": p_value3(r["p_less"] if down else r["p_greater"]),
            "p_adjustment": p_kind,
            "n_base": r["n_base"], "n_new": r["n_new"],
            "contribution_pct": _num(r.get("contribution_pct")),
            "rule": r.get("rule"), "work": work_note(r), "explained": r.get("explained"),
            "work_diff": {k: _num(r.get(k), 0) if isinstance(r.get(k), float) else r.get(k)
                          for k in WORK_FIELDS},
        })
    return out


def _header(c: Comparison) -> dict[str, Any]:
    return {
        "base": c.base, "new": c.new, "method": c.method, "alpha": c.alpha,
        "threshold_pct": c.threshold_pct, "machine_factor": _num(c.factor, 4),
        "machine_factor_nodes": c.factor_nodes, "base_runs": c.base_runs,
        "new_runs": c.new_runs, "base_run_factors": [_num(f, 4) for f in c.run_factors],
        "regressions": c.regressions.height, "watches": c.watches.height,
        "steps_left_out": c.excluded, "outlier_steps_kept": c.outliers,
        "warnings": c.warnings,
    }


def compare_json(c: Comparison) -> str:
    return json.dumps({"schema": SCHEMA, **_header(c), "metrics": _records(c)}, indent=1,
                      allow_nan=False)


def _fmt(us: float | None) -> str:
    return "-" if us is None else fmt_us(us)


def _pct(v: float | None) -> str:
    return "?" if v is None else f"{v:+.0f}%" if abs(v) >= 10 else f"{v:+.1f}%"


def effect(r: dict[str, Any]) -> str:
    """'+900%, 95% CI +878..+956%' (normalized Hodges-Lehmann change)."""
    if r["verdict"] in ("new", "vanished"):
        return r["verdict"]
    if r["effect_pct"] is None:
        return "-"
    low, high = r["effect_ci95_pct"]
    ci = "" if low is None else f", 95% CI {_pct(low)}..{_pct(high)}"
    return f"{_pct(r['effect_pct'])}{ci}"


def floor_text(r: dict[str, Any]) -> str:
    """'floor 60%, size class' or 'floor 62% from 3 base runs' (which floor applied)."""
    if r["floor_pct"] is None:
        return ""
    source = r.get("floor_from") or "size class"
    joint = ", " if source == "size class" else " from "
    return f"floor {r['floor_pct']:.0f}%{joint}{source}"


def numbers(r: dict[str, Any]) -> str:
    """'raw 195us -> 2.77ms (+1320%); normalized 2.71ms (+1290%, factor 1.020 from 12 peer
    nodes ...)': the medians a reader can redo the arithmetic of."""
    raw = (f"raw {_fmt(r['base_median_us'])} -> {_fmt(r['new_median_us'])} "
           f"({_pct(r['raw_change_pct'])})")
    if r.get("factor") is None or r["verdict"] in ("new", "vanished"):
        return raw
    return (f"{raw}; normalized {_fmt(r['normalized_median_us'])} "
            f"({_pct(r['normalized_change_pct'])}, factor {r['factor']:.3f} from "
            f"{r['factor_from']})")


def verdict_line(r: dict[str, Any], method: str) -> str:
    """The one line a reviewer reads: name, raw and normalized medians with the factor,
    the effect with CI, p, method, floor and its share of op time's change."""
    p = "" if r["p_value"] is None else f", p = {r['p_value']:.2g}"
    how = "" if r["p_value"] is None else f" ({method.split(' (')[0]}, {r['p_adjustment']})"
    floor = floor_text(r)
    share = r.get("contribution_pct")
    part = ("" if share is None or r["kind"] == "step" or r["verdict"] not in MOVED[:2]
            else f"; {share:.0f}% of op time's change")
    return (f"{r['name']}: {numbers(r)}; effect {effect(r)}{p}{how}"
            f"{'; ' + floor if floor else ''}{part}")


def full_line(r: dict[str, Any], method: str, sep: str = "; ") -> str:
    """verdict_line, then what changed in the work and the rule that judged the line."""
    out = [verdict_line(r, method), f"work: {r['work']}"]
    if r.get("rule"):
        out.append(f"rule: {r['rule']}")
    return sep.join(out)


def _step_header(recs: list[dict[str, Any]], c: Comparison) -> list[str]:
    """Step time and op time as a reader checks them, and which one the gate judges."""
    lines = []
    for name, what in (("step time", "wall span of each step; on XSpace the step marker's "
                        "host span"),
                       ("op time", "the ops' own time per step, device kernels on "
                        "accelerators")):
        r = next((x for x in recs if x["kind"] == "step" and x["name"] == name), None)
        if r:
            lines.append(f"{name} ({what}): {numbers(r)}; effect {effect(r)}; p90 raw "
                         f"{_fmt(r['base_p90_us'])} -> {_fmt(r['new_p90_us'])}")
    wall = next((x for x in recs if x["kind"] == "step" and x["name"] == "step time"), None)
    shared = wall is not None and "op time decides" in (wall.get("rule") or "")
    lines.append("step level: " + ("op time judges the step (the wall span moves with "
                                   "contention on a shared machine)" if shared else
                                   "step time and op time judge the step (not normalized)"))
    step = next((x for x in recs if x["kind"] == "step" and x["name"] == "op time"), None)
    if step:
        lines.append(f"work of the step: {step['work']}")
    return lines


def _what_moved(recs: list[dict[str, Any]]) -> str | None:
    """The scopes that made the step slower, by their share of op time's change."""
    moved = [r for r in recs if r["kind"] == "scope" and r["verdict"] in MOVED[:2]
             and (r.get("contribution_pct") or 0) > 0 and not r.get("explained")]
    moved.sort(key=lambda r: -(r["contribution_pct"] or 0))
    if not moved:
        return None
    return "what made the step slower: " + ", ".join(
        f"{r['name']} {r['contribution_pct']:.0f}%" for r in moved[:3]) + \
        " of op time's change"


def compare_text(c: Comparison) -> str:
    recs = _records(c)
    lines = [f"base {c.base}  vs  new {c.new}", *_step_header(recs, c)]
    lines.append(f"machine-wide factor {c.factor:.3f} (median over {c.factor_nodes} nodes; "
                 "each metric's own factor is on its line)")
    if c.base_runs >= 2:
        lines.append(f"base: {c.base_runs} runs (machine factors "
                     f"{', '.join(f'{f:.3f}' for f in c.run_factors) or 'not divided out'}); "
                     "each metric's floor from the spread of their medians")
    floors = "by share of step" if c.base_runs < 2 else f"from {c.base_runs} base runs"
    lines.append(f"test: {c.method}, alpha {c.alpha}; effect-size floors {floors}"
                 + (f", threshold {c.threshold_pct:g}%" if c.threshold_pct else ""))
    lines.append(f"processes: {c.base_runs} base, {c.new_runs} new; verdicts by evidence "
                 "(docs/ci.md): work changed -> regression when +20% or more")
    for side, steps in c.outliers.items():
        if steps:
            lines.append(f"{side}: outlier steps kept in the test: {', '.join(steps)}")
    for w in c.warnings:
        lines.append(f"warning: {w}")
    moved = [r for r in recs if r["verdict"] in MOVED]
    if not moved:
        lines.append("no significant change above the effect-size floors")
    first = _what_moved(recs)
    if first:
        lines.append(first)
    for verdict in MOVED:
        group = [r for r in moved if r["verdict"] == verdict]
        if not group:
            continue
        lines.append("")
        lines.append(f"{HEADINGS[verdict]} ({len(group)})")
        for r in group[:25]:
            text = full_line(r, c.method, "\n" + " " * 11)
            lines.append(f"  {KIND_LABEL[r['kind']]:<8} {text}")
        if len(group) > 25:
            lines.append(f"  ... {len(group) - 25} more")
    lines.append("")
    watch = f", {c.watches.height} WATCH line(s)" if c.watches.height else ""
    lines.append(f"result: {'REGRESSION' if c.regressions.height else 'OK'} "
                 f"({c.regressions.height} regression(s){watch})")
    return "\n".join(lines) + "\n"


def compare_markdown(c: Comparison) -> str:
    recs = _records(c)
    status = "❌ regression" if c.regressions.height else "✅ no regression"
    step = next((r for r in recs if r["kind"] == "step" and r["name"] == "step time"), None)
    out = [f"### runlens: {status}", ""]
    if step:
        out.append(f"Step time (median, wall span): **{_fmt(step['base_median_us'])} → "
                   f"{_fmt(step['new_median_us'])}** raw ({_pct(step['raw_change_pct'])}); "
                   f"effect {effect(step)} normalized")
        out.append("")
    out.append(f"{c.method}, α = {c.alpha}, machine-wide factor {c.factor:.3f}; "
               f"{c.base_runs} base and {c.new_runs} new process(es); verdicts by evidence "
               "(work diff).")
    for w in c.warnings:
        out.append(f"> ⚠️ {w}")
    moved = [r for r in recs if r["verdict"] in MOVED]
    if moved:
        out += ["", "| | kind | name | base (raw) | new (raw) | normalized (factor) | "
                "change (95% CI) | p |", "|---|---|---|---|---|---|---|---|"]
        icon = {"regression": "🔺", "watch": "👁️", "improvement": "🔻", "new": "🆕",
                "vanished": "➖"}
        for r in moved[:40]:
            name = r["name"].replace("|", "\\|")
            p = "" if r["p_value"] is None else f"{r['p_value']:.2g}"
            norm = ("" if r.get("factor") is None else
                    f"{_fmt(r['normalized_median_us'])} (÷{r['factor']:.3f})")
            out.append(f"| {icon[r['verdict']]} | {KIND_LABEL[r['kind']]} | `{name}` | "
                       f"{_fmt(r['base_median_us'])} | {_fmt(r['new_median_us'])} | {norm} | "
                       f"{effect(r)} | {p} |")
        for verdict, title in (("regression", "Regressions"), ("watch", "WATCH (same work, "
                                                                       "not failing)")):
            group = [r for r in moved if r["verdict"] == verdict]
            if group:
                out += ["", f"{title}:", ""]
                out += [f"- {full_line(r, c.method)}" for r in group[:20]]
    return "\n".join(out) + "\n"


def compare_junit(c: Comparison) -> str:
    recs = _records(c)
    failures = sum(1 for r in recs if r["verdict"] == "regression")
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           f'<testsuite name="runlens.compare" tests="{len(recs)}" failures="{failures}" '
           f'errors="0" skipped="0">']
    for r in recs:
        out.append(f'  <testcase classname={quoteattr("runlens." + r["kind"])} '
                   f'name={quoteattr(r["name"])} time="0">')
        detail = full_line(r, c.method)
        if r["verdict"] == "regression":
            out.append(f'    <failure message={quoteattr("regression: " + detail)} '
                       f'type="regression">{escape(detail)}</failure>')
        else:
            out.append(f"    <system-out>{escape(r['verdict'] + ': ' + detail)}</system-out>")
        out.append("  </testcase>")
    out.append("</testsuite>")
    return "\n".join(out) + "\n"
