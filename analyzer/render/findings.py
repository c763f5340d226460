"""Render advisor findings (text grouped by severity, JSON schema 1) and the checker list."""

from __future__ import annotations

import inspect
import json
import re
import textwrap
from typing import Any

from ..units import fmt_bytes, fmt_count, fmt_number, fmt_us, lacks_by_reason

SCHEMA = 1


def findings_json(findings: list[Any], meta: dict[str, Any]) -> str:
    return json.dumps({"schema": SCHEMA, **meta,
                       "findings": [f.to_dict() for f in findings]}, indent=1, default=str)


def _evidence_lines(evidence: dict[str, Any], width: int = 100) -> list[str]:
    lines = []
    for key, value in evidence.items():
        if isinstance(value, list):
            shown = value[:5]
            text = "; ".join(_compact(v, key) for v in shown)
            if len(value) > len(shown):
                text += f"; ... ({len(value)} in all)"
        else:
            text = _compact(value, key)
        lines.extend(textwrap.wrap(f"{_label(key)}: {text}", width, initial_indent="      ",
                                   subsequent_indent="        "))
    return lines


_TIME_KEY = re.compile(r"(^|_)(us|micros)(_|$)")
# `peak` alone is bytes (an allocator's peak); `peak_step` is a step number.
_BYTES_KEY = re.compile(r"(^|_)bytes(_|$)|(^|_)peak$")
_SHARE_KEY = re.compile(r"(^|_)share(_|$)")


def _label(key: str) -> str:
    """An evidence key as the text shows it: a time key without its unit (`_us`,
    `micros`), since its value is printed in human units (`op_time_us_per_step: 1.05s`
    read as microseconds); JSON keeps the key."""
    if not _TIME_KEY.search(key):
        return key
    words = [w for w in key.split("_") if w not in ("us", "micros")]
    if not words or words[0] == "per":
        words.insert(0, "time")
    if words[-1] == "step" and "time" not in words:
        words.append("time")
    return "_".join(words)


def _compact(value: Any, key: str = "") -> str:
    """An evidence value in human units, chosen by its key's name: times (`*_us`,
    `micros*`), bytes, shares (as %); other numbers without scientific notation."""
    if isinstance(value, dict):
        return ", ".join(f"{_label(k)}={_compact(v, k)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return "/".join(_compact(v, key) for v in value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if _TIME_KEY.search(key):
        return fmt_us(round(value, 1))
    if _BYTES_KEY.search(key):
        return fmt_bytes(value)
    if _SHARE_KEY.search(key):
        return f"{100 * value:.1f}%"
    return fmt_count(value) if abs(value) >= 10_000 else fmt_number(value)


def findings_text(findings: list[Any], meta: dict[str, Any]) -> str:
    over = meta.get("median_over_steps", meta["steps"])
    lines = [f"runlens advise: {meta['run']} ({meta['steps']} steps, "
             f"median step {fmt_us(meta['median_step_us'])}"
             + (f" over the {over} analysed" if over != meta["steps"] else "") + ")"]
    lines += [f"lacks {', '.join(what)}: {why}"
              for why, what in lacks_by_reason(meta.get("lacks", {})).items()]
    lines += [f"skipped {c['code']} {c['name']}: needs {c['reason']}"
              for c in meta.get("skipped", [])]
    by_why: dict[str, list[str]] = {}
    for item in meta.get("left_out", []):
        by_why.setdefault(item["why"], []).append(f"{item['step']} ({item['worker']})")
    lines += [f"left out {why} step(s) {', '.join(steps)} (--include-warmup keeps them)"
              if why != "outside --steps" else f"left out step(s) {', '.join(steps)}: "
              "outside --steps" for why, steps in by_why.items()]
    if not findings:
        lines.append("no findings: nothing the checkers know about stands out")
        return "\n".join(lines) + "\n"
    for severity in ("error", "warning", "info"):
        group = [f for f in findings if str(f.severity) == severity]
        if not group:
            continue
        lines.append("")
        lines.append(f"{severity.upper()} ({len(group)})")
        for f in group:
            impact = f" [{100 * f.impact:.1f}% of step]" if f.impact else ""
            lines.append(f"  {f.code} {f.name}{impact}: {f.message}")
            where = ", ".join(f"{k}={v}" for k, v in f.where.items() if v is not None)
            if where:
                lines.append(f"      where: {where}")
            lines.extend(_evidence_lines(f.evidence))
            if f.suggestion:
                lines.extend(textwrap.wrap(f"fix: {f.suggestion}", 100,
                                           initial_indent="      ",
                                           subsequent_indent="        "))
    counts = {s: sum(1 for f in findings if str(f.severity) == s)
              for s in ("error", "warning", "info")}
    lines.append("")
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items()))
    return "\n".join(lines) + "\n"


def checker_list(checkers: list[Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps({"schema": SCHEMA, "checkers": [
            {"code": c.code, "name": c.name, "title": c.title, "severity": str(c.severity),
             "severity_note": c.severity_note,
             "doc": inspect.cleandoc(c.__doc__ or "")} for c in checkers]}, indent=1)
    out = []
    for c in checkers:
        severity = f"{c.severity}; {c.severity_note}" if c.severity_note else str(c.severity)
        out.append(f"{c.code} {c.name} ({severity}): {c.title}")
        doc = inspect.cleandoc(c.__doc__ or "")
        for para in doc.split("\n\n"):
            out.extend(textwrap.wrap(" ".join(para.split()), 96, initial_indent="    ",
                                     subsequent_indent="    "))
        out.append("")
    return "\n".join(out)
