"""What `analyze summary` prints (and the report's header): the run's shape and its
step-time statistics over the steps an analysis covers. Above step selection
(analysis.stepselect), which is above the step times (analysis.steps)."""

from __future__ import annotations

from typing import Any

import polars as pl

from ..model import Run
from . import collectives
from .attribution import attribution_note, attribution_shares
from .collectives import per_device_step
from .devicesteps import device_steps
from .loops import loops
from .outside import outside_note
from .steps import step_times
from .stepselect import StepChoice, chosen_steps, left_out
from .stepselect import analysed as analysed_run


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
    if comm := collectives.summary(analysed_run(run, choice)):
        extra["collectives"] = comm  # medians per step over the analysed steps
    if found := loops(run):
        extra["loops"] = found  # XLA while loops: the user's scope and the trip count
    if note := outside_note(analysed_run(run, choice)):
        extra["outside_steps"] = note  # its own row, in no step (analysis.outside)
    if run.attribution.height:
        extra["attribution"] = attribution_shares(run)
        extra["attribution_note"] = attribution_note(run)

    per_device = device_table(run, analysed.select("worker", "step"))
    return {
        "paths": [str(p) for p in run.paths],
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


def device_table(run: Run, steps: pl.DataFrame) -> pl.DataFrame:
    """One row per (worker, device): node_stats, nodes, and medians over the `steps`
    (worker, step) in which the device worked: device_step_us (span of its work in the
    step), busy_us (union of its op intervals), idle_share (of its own span),
    collective_us, collective_wait_us, modules (TPU: program runs per step; null
    elsewhere); steps_with_work of `steps` (0: "no work in this step": the numbers are
    null, not an idle share)."""
    by = ["worker", "device"]
    counts = run.nodes.group_by(by).agg(node_stats=pl.len(), nodes=pl.col("node_name").n_unique())
    # a device with no collective in a step spent 0 in them (per_device_step lists the
    # (worker, device, step) that ran one)
    per_step = (device_steps(run).join(steps, on=["worker", "step"])
                .join(per_device_step(run), on=[*by, "step"], how="left")
                .with_columns(pl.col("collective_us", "collective_wait_us").fill_null(0.0)))
    worked = pl.col("work")
    medians = per_step.group_by(by).agg(
        steps=pl.len(), steps_with_work=worked.sum(),
        device_step_us=(pl.col("device_step_ns").filter(worked) / 1000).median().round(1),
        busy_us=(pl.col("busy_ns").filter(worked) / 1000).median().round(1),
        idle_share=pl.col("idle_share").filter(worked).median().round(4),
        collective_us=pl.col("collective_us").filter(worked).median().round(1),
        collective_wait_us=pl.col("collective_wait_us").filter(worked).median().round(1),
        modules=pl.col("modules").filter(worked).median())
    return (medians.join(counts, on=by, how="left")
            .with_columns(pl.col("steps", "steps_with_work", "node_stats", "nodes")
                          .fill_null(0))
            .select(*by, "node_stats", "nodes", "device_step_us", "busy_us", "idle_share",
                    "collective_us", "collective_wait_us", "steps_with_work", "steps",
                    "modules")
            .sort(by))
