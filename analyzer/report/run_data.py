"""The numbers of a run's report page, taken from the public functions of the engine.

One source of truth: the op, scope and code breakdowns are the documents
`analyze ops|scopes|code --format json` print with the command line's defaults
(render.views.view_doc), the critical path is `analyze graph --critical-path --format
json` of the median step, the findings are the advisor's. Only aggregates are embedded, never
executions, so a page stays small whatever the run's size. A section the source has no
data for carries `missing`: one line saying so.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import polars as pl

from ..analysis.graph import critical_path, no_dataflow
from ..analysis.nodestats import node_stats
from ..analysis.runsummary import summary as run_summary
from ..analysis.stepmemory import rise_levels
from ..analysis.steps import median_step, step_times
from ..analysis.stepselect import StepChoice, analysed
from ..analysis.views import VIEWS, ViewOptions
from ..analysis.warmup import flag_steps
from ..model import Run, kernel_label_expr
from ..render.critical_path import critical_path_json
from ..render.views import view_doc
from ..units import fmt_us

# The command line's defaults of the view commands (cli._view_options), so the embedded
# documents equal `analyze ops|scopes|code --format json` (tests/test_report.py).
VIEW_OPTIONS = ViewOptions(order_by="micros", select=("micros", "bytes", "occurrence"))
MAX_PATH_OPS = 400  # critical-path rows embedded (the longest ones when there are more)
MEMORY_POINTS = 400  # points per allocator in the memory chart
MAX_NODES_PER_TYPE = 25  # nodes of an op type in the drill-down (the rest as one sum)


def run_data(run: Run, findings: Sequence[Any], source: str,
             steps: StepChoice | None = None) -> dict[str, Any]:
    """Everything the run page shows, as JSON-ready data, over the steps `steps` keeps
    (analyzer.analysis.stepselect; the step chart shows every step, the left-out ones marked)."""
    steps = steps or StepChoice()
    chosen = analysed(run, steps)
    options = VIEW_OPTIONS.with_(include_warmup=steps.include_warmup, first_step=steps.first,
                                 last_step=steps.last)
    views = {kind: view_doc(VIEWS[kind](run, options)) for kind in ("ops", "scopes", "code")}
    code_rows = views["code"]["rows"]
    return {
        "page": "run",
        "source": source,
        "glance": glance(run, views, steps),
        "steps": steps_section(run),
        "ops": views["ops"],
        "op_nodes": op_nodes(chosen),
        "scopes": views["scopes"],
        "code": views["code"] if code_rows else {
            "missing": "No Python code view: " + ("; ".join(views["code"]["notes"])
                                                  or "no code traces in this source") + "."},
        "critical_path": critical_path_section(chosen),
        "memory": memory_section(chosen),
        "findings": [f.to_dict() for f in findings],
    }


def glance(run: Run, views: dict[str, dict[str, Any]], steps: StepChoice | None = None
           ) -> dict[str, Any]:
    """The run at a glance: its shape, step time and where the time goes in a sentence."""
    s = run_summary(run, steps)
    return {
        "steps": len(s["steps"]), "workers": s["workers"],
        # Each (worker, device) its own; the worker named where there are several.
        "devices": [d["device"] if len(s["workers"]) == 1 else f"{d['worker']} {d['device']}"
                    for d in s["devices"]],
        "node_stats": s["node_stats"], "step_time_us": s["step_time_us"],
        "step_time_kind": s.get("step_time_kind"),
        "device_step_time_us": s.get("device_step_time_us"),
        "attribution_note": s.get("attribution_note"),
        "collectives": s.get("collectives"),
        "where_time_goes": where_time_goes(views["ops"], views["scopes"]),
    }


def where_time_goes(ops: dict[str, Any], scopes: dict[str, Any]) -> str:
    total = ops["total"]["micros"]
    if not total:
        return "No op time was recorded."
    top = sorted(ops["rows"], key=lambda r: -r["micros"])[:3]
    parts = [f"{r['name']} ({100 * r['micros'] / total:.0f}%)" for r in top]
    text = "Op time (" + fmt_us(total) + " a step) goes mostly to " + _and(parts)
    scope = max(scopes["rows"], key=lambda r: r["micros"], default=None)
    if scope is not None and scopes["total"]["micros"]:
        text += (f"; the top-level scope {scope['name']} holds "
                 f"{100 * scope['micros'] / scopes['total']['micros']:.0f}%")
    accel = ops["total"]["accelerator_micros"]
    if accel:
        text += f"; {100 * accel / total:.0f}% of it on accelerators"
    return text + "."


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def op_nodes(run: Run) -> dict[str, Any]:
    """Each kernel's nodes (the op view's rows) by time (average over steps), the
    MAX_NODES_PER_TYPE largest and the rest as one sum, for the op-type breakdown's
    drill-down. The same per-node numbers the op view sums (nodestats.node_stats at step
    -1), so a type's nodes add up to its row of `analyze ops`."""
    n = (node_stats(run, -1, "steps").with_columns(op_type=kernel_label_expr())  # as `analyze ops`
         .group_by("op_type", "name").agg(pl.col("micros").sum())
         .filter(pl.col("micros") > 0)
         .sort(["op_type", "micros", "name"], descending=[False, True, False])
         .with_columns(rank=pl.int_range(pl.len()).over("op_type")))
    top = n.filter(pl.col("rank") < MAX_NODES_PER_TYPE)
    rest = (n.filter(pl.col("rank") >= MAX_NODES_PER_TYPE).group_by("op_type")
            .agg(rest=pl.col("micros").sum(), rest_nodes=pl.len()))
    types = (top.group_by("op_type", maintain_order=True)
             .agg(nodes=pl.concat_list("name", pl.col("micros").cast(pl.String)))
             .join(rest, on="op_type", how="left").sort("op_type"))
    return {"types": [
        {"name": r["op_type"], "nodes": [[name, _us(us)] for name, us in r["nodes"]],
         "rest": _us(r["rest"] or 0), "rest_nodes": int(r["rest_nodes"] or 0)}
        for r in types.iter_rows(named=True)]}


def _us(value: Any) -> float | int:
    """Microseconds as the views have them: whole for tfprof's rules, to the ns for an
    XSpace profile's (nodestats.exact_times)."""
    us = float(value)
    return int(us) if us.is_integer() else round(us, 3)


def steps_section(run: Run) -> dict[str, Any]:
    times = step_times(run).select("worker", "step", step_us=pl.col("duration_ns") / 1000.0)
    if not times.height:
        return {"missing": "No steps in this source."}
    flagged = flag_steps(times).with_columns(pl.col("step_us").round(1))
    return {"rows": flagged.to_dicts(),
            "rule": "warm-up and outliers by analyzer.analysis.warmup.flag_steps"}


def critical_path_section(run: Run) -> dict[str, Any]:
    if not run.steps:
        return {"missing": "No steps in this source."}
    skipped = no_dataflow(run)
    if skipped:
        return {"missing": f"No critical path: it {skipped}."}
    doc = json.loads(critical_path_json(critical_path(run, median_step(run))))
    if not doc["ops"]:
        return {"missing": "No critical path: the source has no dataflow graph for its ops."}
    doc["ops_total"] = len(doc["ops"])
    if len(doc["ops"]) > MAX_PATH_OPS:
        keep = sorted(range(len(doc["ops"])), key=lambda i: -doc["ops"][i]["micros"])
        doc["ops"] = [doc["ops"][i] for i in sorted(keep[:MAX_PATH_OPS])]
    return doc


def memory_section(run: Run) -> dict[str, Any]:
    """Bytes allocated per allocator since the median step began, from the allocation
    records (the rise within the step: analysis.stepmemory, as the timeline's memory
    counters and RL110 give it)."""
    if not run.steps:
        return {"missing": "No steps in this source."}
    step = median_step(run)
    levels = rise_levels(run).filter(pl.col("step") == step).collect()
    if not levels.height:
        return {"missing": "No memory over time: the source has no allocation records."}
    start_us = step_times(run).filter(pl.col("step") == step)["start_ns"].min()
    t0 = int(start_us) // 1000 if start_us is not None else int(levels["alloc_us"].min())  # type: ignore[arg-type]
    key = ["worker", "allocator_name"]
    curve = levels.select(*key, bytes="level", t_ms=(pl.col("alloc_us") - t0) / 1000.0)
    span = pl.col("t_ms").max().over(key) - pl.col("t_ms").min().over(key)
    bucket = ((pl.col("t_ms") - pl.col("t_ms").min().over(key)) * MEMORY_POINTS
              // (span + 1e-9)).cast(pl.Int64)
    thin = (curve.with_columns(b=bucket)
            .group_by(*key, "b", maintain_order=True)
            .agg(pl.col("t_ms").first(), pl.col("bytes").max()))
    series = []
    for (worker, allocator), g in thin.group_by(key, maintain_order=True):
        series.append({"worker": worker, "allocator": allocator,
                       "points": [[round(t, 3), int(b)] for t, b in
                                  zip(g["t_ms"].to_list(), g["bytes"].to_list(), strict=True)]})
    return {"step": step, "series": sorted(series, key=lambda s: (s["worker"], s["allocator"]))}
