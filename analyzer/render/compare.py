"""Render a Comparison: text for people, JSON (schema 1), Markdown for a pull request
comment, JUnit XML (one test case per compared metric) for CI test reporters."""

from __future__ import annotations

import json
import math
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from analyzer.compare import Comparison
from analyzer.render.units import fmt_us

SCHEMA = 1
KIND_LABEL = {"step": "step", "op": "op type", "scope": "scope"}
MOVED = ("regression", "improvement", "new", "vanished")


def _num(value: Any, digits: int = 1) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return round(float(value), digits)


def _records(c: Comparison) -> list[dict[str, Any]]:
    out = []
    for r in c.rows.iter_rows(named=True):
        out.append({
            "kind": r["kind"], "name": r["name"], "verdict": r["verdict"],
            "base_median_us": _num(r["base_median_us"]), "new_median_us": _num(r["new_median_us"]),
            "base_p90_us": _num(r["base_p90_us"]), "new_p90_us": _num(r["new_p90_us"]),
            "change_pct": _num(r["change_pct"]),
            "normalized_change_pct": _num(r["norm_change_pct"]),
            "p_value": _num(r["p_greater_adj"] if r["verdict"] != "improvement"
                            else r["p_less_adj"], 6),
            "n_base": r["n_base"], "n_new": r["n_new"],
        })
    return out


def _header(c: Comparison) -> dict[str, Any]:
    return {
        "base": c.base, "new": c.new, "method": c.method, "alpha": c.alpha,
        "threshold_pct": c.threshold_pct, "machine_factor": round(c.factor, 4),
        "machine_factor_nodes": c.factor_nodes, "regressions": c.regressions.height,
        "warnings": c.warnings,
    }


def compare_json(c: Comparison) -> str:
    return json.dumps({"schema": SCHEMA, **_header(c), "metrics": _records(c)}, indent=1)


def _change(r: dict[str, Any]) -> str:
    if r["verdict"] in ("new", "vanished"):
        return r["verdict"]
    ch, norm = r["change_pct"], r["normalized_change_pct"]
    if ch is None:
        return "-"
    text = f"{ch:+.1f}%"
    if norm is not None and abs(norm - ch) >= 0.5:
        text += f" ({norm:+.1f}% normalized)"
    return text


def _fmt(us: float | None) -> str:
    return "-" if us is None else fmt_us(us)


def compare_text(c: Comparison) -> str:
    recs = _records(c)
    step = next((r for r in recs if r["kind"] == "step"), None)
    lines = [f"base {c.base}  vs  new {c.new}"]
    if step:
        lines.append(f"step time: median {_fmt(step['base_median_us'])} -> "
                     f"{_fmt(step['new_median_us'])} ({_change(step)}), p90 "
                     f"{_fmt(step['base_p90_us'])} -> {_fmt(step['new_p90_us'])}")
    lines.append(f"machine-wide factor {c.factor:.3f} (median over {c.factor_nodes} nodes; "
                 "divided out before judging); "
                 f"test: {c.method}, alpha {c.alpha}, threshold {c.threshold_pct:g}%")
    for w in c.warnings:
        lines.append(f"warning: {w}")
    moved = [r for r in recs if r["verdict"] in MOVED]
    if not moved:
        lines.append("no significant change above the threshold")
    for verdict in MOVED:
        group = [r for r in moved if r["verdict"] == verdict]
        if not group:
            continue
        lines.append("")
        lines.append(f"{verdict.upper()}S ({len(group)})" if verdict != "new"
                     else f"NEW ({len(group)})")
        for r in group[:25]:
            p = f"  p={r['p_value']:.2g}" if r["p_value"] is not None and verdict in (
                "regression", "improvement") else ""
            lines.append(f"  {KIND_LABEL[r['kind']]:<8} {r['name'][:60]:<60} "
                         f"{_fmt(r['base_median_us']):>10} -> {_fmt(r['new_median_us']):>10}  "
                         f"{_change(r)}{p}")
        if len(group) > 25:
            lines.append(f"  ... {len(group) - 25} more")
    lines.append("")
    lines.append(f"result: {'REGRESSION' if c.regressions.height else 'OK'} "
                 f"({c.regressions.height} regression(s))")
    return "\n".join(lines) + "\n"


def compare_markdown(c: Comparison) -> str:
    recs = _records(c)
    status = "❌ regression" if c.regressions.height else "✅ no regression"
    step = next((r for r in recs if r["kind"] == "step"), None)
    out = [f"### runlens: {status}", ""]
    if step:
        out.append(f"Step time (median): **{_fmt(step['base_median_us'])} → "
                   f"{_fmt(step['new_median_us'])}** ({_change(step)})")
        out.append("")
    out.append(f"{c.method}, α = {c.alpha}, threshold {c.threshold_pct:g}%, "
               f"machine-wide factor {c.factor:.3f} divided out.")
    for w in c.warnings:
        out.append(f"> ⚠️ {w}")
    moved = [r for r in recs if r["verdict"] in MOVED]
    if moved:
        out += ["", "| | kind | name | base | new | change |", "|---|---|---|---|---|---|"]
        icon = {"regression": "🔺", "improvement": "🔻", "new": "🆕", "vanished": "➖"}
        for r in moved[:40]:
            name = r["name"].replace("|", "\\|")
            out.append(f"| {icon[r['verdict']]} | {KIND_LABEL[r['kind']]} | `{name}` | "
                       f"{_fmt(r['base_median_us'])} | {_fmt(r['new_median_us'])} | "
                       f"{_change(r)} |")
    return "\n".join(out) + "\n"


def compare_junit(c: Comparison) -> str:
    recs = _records(c)
    failures = sum(1 for r in recs if r["verdict"] == "regression")
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           f'<testsuite name="runlens.compare" tests="{len(recs)}" failures="{failures}" '
           f'errors="0" skipped="0">']
    for r in recs:
        case = f'  <testcase classname={quoteattr("runlens." + r["kind"])} ' \
               f'name={quoteattr(r["name"])} time="0">'
        detail = (f"base median {_fmt(r['base_median_us'])}, new median "
                  f"{_fmt(r['new_median_us'])}, change {_change(r)}, p={r['p_value']}")
        if r["verdict"] == "regression":
            out.append(case)
            out.append(f'    <failure message={quoteattr("regression: " + detail)} '
                       f'type="regression">{escape(detail)}</failure>')
            out.append("  </testcase>")
        else:
            out.append(case)
            out.append(f"    <system-out>{escape(r['verdict'] + ': ' + detail)}</system-out>")
            out.append("  </testcase>")
    out.append("</testsuite>")
    return "\n".join(out) + "\n"


RENDERERS = {"text": compare_text, "json": compare_json, "markdown": compare_markdown,
             "junit": compare_junit}
