"""Rendering of `analyze summary`: text, or JSON (a schema number around the summary)."""

from __future__ import annotations

import json

from ..readfile import shown
from ..units import fmt_us, lacks_by_reason

SCHEMA = 1


def summary_text(s: dict) -> str:
    t = s["step_time_us"]
    lines = [
        f"run        {', '.join(shown(p) for p in s['paths'])}",
        f"workers    {len(s['workers'])} ({', '.join(s['workers'])})",
        f"steps      {len(s['steps'])} ({_ranges(s['steps'])})",
        f"node stats {s['node_stats']:,} ({s['distinct_nodes']:,} distinct nodes, "
        f"{s['op_types']} op types)",
        "devices",
    ]
    for d in s["devices"]:
        lines.append(f"  {d['device']}  {d['node_stats']:,} node stats, {d['nodes']:,} nodes")
    lines.append(
        f"step time  median {fmt_us(t['median'])}  mean {fmt_us(t['mean'])}  "
        f"p90 {fmt_us(t['p90'])}  min {fmt_us(t['min'])}  max {fmt_us(t['max'])}  "
        f"stdev {fmt_us(t['stdev'])}"
        + (f"  (over {t['count']} steps)" if s.get("left_out") else "")
        + _KIND_SAID.get(s.get("step_time_kind", ""), "")
    )
    if dev := s.get("device_step_time_us"):
        lines.append(
            f"device     median {fmt_us(dev['median'])}  mean {fmt_us(dev['mean'])}  "
            f"p90 {fmt_us(dev['p90'])}  min {fmt_us(dev['min'])}  max {fmt_us(dev['max'])}"
            "  (device step: first to last device event of the step, as xprof's step db)")
    if outside := s.get("outside_steps"):
        lines.append(f"outside    {outside.removeprefix('outside steps: ')}")
    if note := s.get("attribution_note"):
        lines.append(f"ops        {note}")
    for item in s.get("left_out", []):
        lines.append(f"left out   step {item['step']} on {item['worker']} "
                     f"({fmt_us(item['step_us'])}): {item['why']}")
    if any(item["why"] != "outside --steps" for item in s.get("left_out", [])):
        lines.append("           (averages, checks and comparisons leave these out: "
                     "--include-warmup keeps them; rule: docs/ci.md)")
    for why, what in lacks_by_reason(s.get("lacks", {})).items():
        lines.append(f"lacks      {', '.join(what)}: {why}")
    for w in s["warnings"]:
        lines.append(f"warning: {w}")
    return "\n".join(lines) + "\n"


# What the step time measures (analysis.steps.step_times' `kind`).
_KIND_SAID = {"marker": "  (host: the step marker's span)",
              "device": "  (device: the step's device work)",
              "work": "  (the step's work: its marker covers only the dispatch)",
              "dispatch": "  (the markers' spans: dispatch only, not step times)"}


def _ranges(steps: list[int]) -> str:
    if not steps:
        return "none"
    out, start, prev = [], steps[0], steps[0]
    for s in steps[1:] + [None]:  # type: ignore[list-item]
        if s is not None and s == prev + 1:
            prev = s
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if s is not None:
            start = prev = s
    return ", ".join(out)


def summary_json(s: dict) -> str:
    return json.dumps({"schema": SCHEMA, "summary": s}, indent=1) + "\n"
