"""The numbers of a comparison's report page, from a Comparison and the two runs' samples.

The Comparison's rows are read through one adapter, `metric_row`, which takes the
columns compare.py has and the confidence-interval columns only when they are there
(effect_pct, effect_low_pct, effect_high_pct), so the page follows the statistics
without knowing how they are computed.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from ..gate.compare import Comparison, Samples
from ..gate.workdiff import work_note
from ..units import p_value3

MOVED = ("regression", "watch", "improvement", "new", "vanished")
STEP_TIME = "step time"  # the step-level metric drawn as distributions
MAX_SCOPES = 30  # bars in the moved-scopes chart
MAX_POINTS = 2000  # step samples drawn per side


def _num(value: Any, digits: int = 3) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return round(float(value), digits)


def metric_row(r: dict[str, Any]) -> dict[str, Any]:
    """One Comparison row as the page shows it. `change_pct` is the change the verdict
    was judged on (the effect estimate when compare.py gives one, else the normalized
    change of medians); `ci_pct` its confidence interval, or None. The raw medians and
    change, the normalized median with its factor and where it came from, the work diff
    and the rule come along, as in the text report."""
    change = r.get("effect_pct")
    if change is None:
        change = r.get("norm_change_pct")
    low, high = r.get("effect_low_pct"), r.get("effect_high_pct")
    p = r.get("p_less_adj") if r["verdict"] == "improvement" else r.get("p_greater_adj")
    return {
        "kind": r["kind"], "name": r["name"], "verdict": r["verdict"],
        "base_median_us": _num(r.get("base_median_us")),
        "new_median_us": _num(r.get("new_median_us")),
        "change_pct": _num(change, 2), "raw_change_pct": _num(r.get("change_pct"), 2),
        "normalized_median_us": _num(r.get("norm_median_us")),
        "normalized_change_pct": _num(r.get("norm_change_pct"), 2),
        "factor": _num(r.get("factor"), 4), "factor_from": r.get("factor_from"),
        "contribution_pct": _num(r.get("contribution_pct"), 1),
        "rule": r.get("rule"), "work": work_note(r) if "work_changed" in r else None,
        "ci_pct": ([_num(low, 2), _num(high, 2)]
                   if _num(low) is not None and _num(high) is not None else None),
        "p_value": p_value3(p),
        "delta_us": _num(r.get("delta_us")),
    }


def _step_values(samples: Samples) -> list[float]:
    steps = samples.samples.filter(pl.col("kind") == "step")
    if STEP_TIME in steps["name"]:  # there may be other step-level metrics (op time)
        steps = steps.filter(pl.col("name") == STEP_TIME)
    s = steps.sort("sample")
    values = s["value_us"].to_list()
    if len(values) > MAX_POINTS:
        stride = len(values) / MAX_POINTS
        values = [values[int(i * stride)] for i in range(MAX_POINTS)]
    return [round(v, 1) for v in values]


def _box(values: list[float]) -> list[float] | None:
    """[min, q1, median, q3, max] (linear quantiles), as ECharts' boxplot takes it."""
    if not values:
        return None
    s = pl.Series(values, dtype=pl.Float64)
    return [round(float(s.quantile(q, "linear") or 0.0), 1) for q in (0, 0.25, 0.5, 0.75, 1)]


def compare_data(c: Comparison, base: Samples, new: Samples) -> dict[str, Any]:
    """Everything the comparison page shows, as JSON-ready data: regressions first."""
    rows = [metric_row(r) for r in c.rows.iter_rows(named=True)]
    moved = [r for r in rows if r["verdict"] in MOVED]
    moved.sort(key=lambda r: MOVED.index(r["verdict"]))  # stable: compare.py's order within
    scopes = [r for r in rows if r["kind"] == "scope"
              and r["verdict"] not in ("below-floor",) and r["change_pct"] is not None]
    scopes.sort(key=lambda r: (r["verdict"] != "regression", r["verdict"] != "improvement",
                               -abs(r["delta_us"] or 0.0)))
    step = next((r for r in rows if r["kind"] == "step" and r["name"] == STEP_TIME),
                next((r for r in rows if r["kind"] == "step"), None))
    base_steps, new_steps = _step_values(base), _step_values(new)
    return {
        "page": "compare",
        "base": c.base, "new": c.new, "method": c.method, "alpha": c.alpha,
        "threshold_pct": c.threshold_pct, "machine_factor": round(c.factor, 4),
        "machine_factor_nodes": c.factor_nodes, "warnings": c.warnings,
        "regressions": sum(1 for r in rows if r["verdict"] == "regression"),
        "watches": sum(1 for r in rows if r["verdict"] == "watch"),
        "excluded": getattr(c, "excluded", {}),
        "step": step,
        "distributions": {"base": base_steps, "new": new_steps,
                          "box": [_box(base_steps), _box(new_steps)]},
        "moved": moved,
        "scopes": scopes[:MAX_SCOPES],
    }
