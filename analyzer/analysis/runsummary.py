"""What `analyze summary` prints (and the report's header): the run's shape and its
step-time statistics over the steps an analysis covers. Above step selection
(analysis.stepselect), which is above the step times (analysis.steps)."""

from __future__ import annotations

from typing import Any

import polars as pl

from ..model import Run
from ..readfile import shown
from .attribution import attribution_note, attribution_shares
from .steps import step_times
from .stepselect import StepChoice, chosen_steps, left_out


def summary(run: Run, choice: Any = None) -> dict:
    """What `analyze summary` prints: shape of the run and step-time statistics over the
    steps `choice` keeps (analyzer.analysis.stepselect.StepChoice; default: warm-up and outlier
    steps left out), the steps left out and why, every step's time, and what the input
    lacks."""
    choice = choice or StepChoice()
    flags = chosen_steps(run, choice)
    times = step_times(run).join(flags.select("worker", "step", "analysed", "why"),
                                 on=["worker", "step"], how="left")
    analysed = times.filter(pl.col("analysed"))
    d = analysed.get_column("duration_ns") / 1000.0
    dev = analysed.get_column("device_ns").drop_nulls() / 1000.0

    def num(x: Any) -> float:
        return round(float(x or 0.0), 1)

    def stats(v: pl.Series) -> dict:
        return {"count": len(v), "mean": num(v.mean()), "median": num(v.median()),
                "p90": num(v.quantile(0.9, "nearest")), "min": num(v.min()),
                "max": num(v.max()), "stdev": num(v.std())}

    kinds = analysed.get_column("kind").unique().to_list()
    extra: dict[str, Any] = {"step_time_kind": kinds[0] if len(kinds) == 1 else "mixed"}
    if len(dev):  # accelerator profiles: the device side of each step, named apart
        extra["device_step_time_us"] = stats(dev)
    if run.attribution.height:
        extra["attribution"] = attribution_shares(run)
        extra["attribution_note"] = attribution_note(run)

    per_device = (
        run.nodes.group_by("device")
        .agg(node_stats=pl.len(), nodes=pl.col("node_name").n_unique())
        .sort("device")
    )
    return {
        "paths": [shown(p) for p in run.paths],
        "workers": run.workers,
        "steps": run.steps,
        "node_stats": run.nodes.height,
        "distinct_nodes": run.nodes.select(pl.struct("worker", "node_name").n_unique()).item(),
        "op_types": run.nodes.get_column("op_type").n_unique(),
        "devices": per_device.to_dicts(),
        "step_time_us": stats(d),
        **extra,
        "left_out": left_out(run, choice),
        "per_step": times.select(
            "worker", "step", (pl.col("duration_ns") / 1000).round(1).alias("duration_us"),
            (pl.col("device_ns") / 1000).round(1).alias("device_us"), "node_stats",
            "analysed",
        ).to_dicts(),
        "warnings": run.warnings,
        "lacks": run.lacks,
    }
