"""Render a Comparison: text for people, JSON (schema 2), Markdown for a pull request
comment, JUnit XML (one test case per compared metric) for CI test reporters.

Every regression and improvement is one line a reviewer can read on its own:
    block3/mlp: 92us -> 926us (+900%, 95% CI +878..+956%), p = 8.3e-17 (exact Mann-Whitney
    U, Benjamini-Hochberg)
The change is the Hodges-Lehmann estimate after dividing out the machine-wide factor,
which is what the verdict uses. JSON never holds NaN or Infinity (null instead).
"""

from __future__ import annotations

import json
import math
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from ..gate.compare import Comparison
from ..units import fmt_us, p_value3

SCHEMA = 2
KIND_LABEL = {"step": "step", "op": "op type", "scope": "scope"}
MOVED = ("regression", "improvement", "new", "vanished")
HEADINGS = {"regression": "REGRESSIONS", "improvement": "IMPROVEMENTS", "new": "NEW",
            "vanished": "VANISHED"}


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
            "change_pct": _num(r["change_pct"]),
            "normalized_change_pct": _num(r["norm_change_pct"]),
            "effect_pct": _num(r["effect_pct"]),
            "effect_ci95_pct": [_num(r["effect_low_pct"]), _num(r["effect_high_pct"])],
            "floor_pct": _num(r["floor_pct"]), "floor_from": r.get("floor_from"),
            "share_of_step_pct": _num(r["share_pct"]),
            "p_value": p_value3(r["p_less_adj"] if down else r["p_greater_adj"]),
            "p_raw": p_value3(r["p_less"] if down else r["p_greater"]),
            "p_adjustment": p_kind,
            "n_base": r["n_base"], "n_new": r["n_new"],
        })
    return out


def _header(c: Comparison) -> dict[str, Any]:
    return {
        "base": c.base, "new": c.new, "method": c.method, "alpha": c.alpha,
        "threshold_pct": c.threshold_pct, "machine_factor": _num(c.factor, 4),
        "machine_factor_nodes": c.factor_nodes, "base_runs": c.base_runs,
        "base_run_factors": [_num(f, 4) for f in c.run_factors],
        "regressions": c.regressions.height,
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


def verdict_line(r: dict[str, Any], method: str) -> str:
    """The one line a reviewer reads: name, medians, change with CI, p, method, floor."""
    p = "" if r["p_value"] is None else f", p = {r['p_value']:.2g}"
    how = "" if r["p_value"] is None else f" ({method.split(' (')[0]}, {r['p_adjustment']})"
    floor = floor_text(r)
    return (f"{r['name']}: {_fmt(r['base_median_us'])} -> {_fmt(r['new_median_us'])} "
            f"({effect(r)}){p}{how}{'; ' + floor if floor else ''}")


def compare_text(c: Comparison) -> str:
    recs = _records(c)
    step = next((r for r in recs if r["kind"] == "step" and r["name"] == "step time"), None)
    lines = [f"base {c.base}  vs  new {c.new}"]
    if step:
        lines.append(f"step time: median {_fmt(step['base_median_us'])} -> "
                     f"{_fmt(step['new_median_us'])} ({effect(step)} normalized), p90 "
                     f"{_fmt(step['base_p90_us'])} -> {_fmt(step['new_p90_us'])}")
    lines.append(f"machine-wide factor {c.factor:.3f} (median over {c.factor_nodes} nodes; "
                 "divided out before judging)")
    if c.base_runs >= 2:
        lines.append(f"base: {c.base_runs} runs (machine factors "
                     f"{', '.join(f'{f:.3f}' for f in c.run_factors) or 'not divided out'}); "
                     "each metric's floor from the spread of their medians")
    floors = "by share of step" if c.base_runs < 2 else f"from {c.base_runs} base runs"
    lines.append(f"test: {c.method}, alpha {c.alpha}; effect-size floors {floors}"
                 + (f", threshold {c.threshold_pct:g}%" if c.threshold_pct else ""))
    for side, steps in c.outliers.items():
        if steps:
            lines.append(f"{side}: outlier steps kept in the test: {', '.join(steps)}")
    for w in c.warnings:
        lines.append(f"warning: {w}")
    moved = [r for r in recs if r["verdict"] in MOVED]
    if not moved:
        lines.append("no significant change above the effect-size floors")
    for verdict in MOVED:
        group = [r for r in moved if r["verdict"] == verdict]
        if not group:
            continue
        lines.append("")
        lines.append(f"{HEADINGS[verdict]} ({len(group)})")
        for r in group[:25]:
            lines.append(f"  {KIND_LABEL[r['kind']]:<8} {verdict_line(r, c.method)}")
        if len(group) > 25:
            lines.append(f"  ... {len(group) - 25} more")
    lines.append("")
    lines.append(f"result: {'REGRESSION' if c.regressions.height else 'OK'} "
                 f"({c.regressions.height} regression(s))")
    return "\n".join(lines) + "\n"


def compare_markdown(c: Comparison) -> str:
    recs = _records(c)
    status = "❌ regression" if c.regressions.height else "✅ no regression"
    step = next((r for r in recs if r["kind"] == "step" and r["name"] == "step time"), None)
    out = [f"### runlens: {status}", ""]
    if step:
        out.append(f"Step time (median): **{_fmt(step['base_median_us'])} → "
                   f"{_fmt(step['new_median_us'])}** ({effect(step)} normalized)")
        out.append("")
    out.append(f"{c.method}, α = {c.alpha}, machine-wide factor {c.factor:.3f} divided out.")
    for w in c.warnings:
        out.append(f"> ⚠️ {w}")
    moved = [r for r in recs if r["verdict"] in MOVED]
    if moved:
        out += ["", "| | kind | name | base | new | change (95% CI) | p |",
                "|---|---|---|---|---|---|---|"]
        icon = {"regression": "🔺", "improvement": "🔻", "new": "🆕", "vanished": "➖"}
        for r in moved[:40]:
            name = r["name"].replace("|", "\\|")
            p = "" if r["p_value"] is None else f"{r['p_value']:.2g}"
            out.append(f"| {icon[r['verdict']]} | {KIND_LABEL[r['kind']]} | `{name}` | "
                       f"{_fmt(r['base_median_us'])} | {_fmt(r['new_median_us'])} | "
                       f"{effect(r)} | {p} |")
        regs = [r for r in moved if r["verdict"] == "regression"]
        if regs:
            out += ["", "Regressions:", ""]
            out += [f"- {verdict_line(r, c.method)}" for r in regs[:20]]
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
        detail = verdict_line(r, c.method)
        if r["verdict"] == "regression":
            out.append(f'    <failure message={quoteattr("regression: " + detail)} '
                       f'type="regression">{escape(detail)}</failure>')
        else:
            out.append(f"    <system-out>{escape(r['verdict'] + ': ' + detail)}</system-out>")
        out.append("  </testcase>")
    out.append("</testsuite>")
    return "\n".join(out) + "\n"
