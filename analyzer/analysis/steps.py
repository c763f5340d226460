"""Step times: the span of every traced step, per worker, from the executions frame."""

from __future__ import annotations

from typing import Any

import polars as pl

from ..model import Run


def step_times(run: Run) -> pl.DataFrame:
    """One row per (worker, step): start_ns, end_ns and duration_ns over all lanes, or
    the step's span where the input says it (`step_spans`: an xplane step marker, the
    device span of a GPU step; docs/xplane.md)."""
    spans = run.step_spans.lazy().select(
        "worker", "step", span_start="start_ns", span_end="end_ns")
    return (
        run.nodes_lazy().select("worker", "step", "start_ns", "all_end_rel_ns")
        .group_by("worker", "step")
        .agg(
            start_ns=pl.col("start_ns").min(),
            end_ns=(pl.col("start_ns") + pl.col("all_end_rel_ns")).max(),
            node_stats=pl.len(),
        )
        .join(spans, on=["worker", "step"], how="left")
        .with_columns(start_ns=pl.coalesce("span_start", "start_ns"),
                      end_ns=pl.coalesce("span_end", "end_ns"))
        .drop("span_start", "span_end")
        .with_columns(duration_ns=pl.col("end_ns") - pl.col("start_ns"))
        .sort("worker", "step")
        .collect()
    )


def median_step(run: Run) -> int:
    """The traced step whose time is the median (the lower one for an even count)."""
    times = step_times(run).group_by("step").agg(pl.col("duration_ns").max()).sort(
        "duration_ns", "step")
    return int(times["step"][(times.height - 1) // 2])


def summary(run: Run, choice: Any = None) -> dict:
    """What `analyze summary` prints: shape of the run and step-time statistics over the
    steps `choice` keeps (analyzer.analysis.stepselect.StepChoice; default: warm-up and outlier
    steps left out), the steps left out and why, every step's time, and what the input
    lacks."""
    from .stepselect import StepChoice, chosen_steps, left_out

    choice = choice or StepChoice()
    flags = chosen_steps(run, choice)
    times = step_times(run).join(flags.select("worker", "step", "analysed", "why"),
                                 on=["worker", "step"], how="left")
    d = times.filter(pl.col("analysed")).get_column("duration_ns") / 1000.0

    def num(x: Any) -> float:
        return round(float(x or 0.0), 1)

    per_device = (
        run.nodes.group_by("device")
        .agg(node_stats=pl.len(), nodes=pl.col("node_name").n_unique())
        .sort("device")
    )
    return {
        "paths": [str(p) for p in run.paths],
        "workers": run.workers,
        "steps": run.steps,
        "node_stats": run.nodes.height,
        "distinct_nodes": run.nodes.select(pl.struct("worker", "node_name").n_unique()).item(),
        "op_types": run.nodes.get_column("op_type").n_unique(),
        "devices": per_device.to_dicts(),
        "step_time_us": {
            "count": len(d),
            "mean": num(d.mean()),
            "median": num(d.median()),
            "p90": num(d.quantile(0.9, "nearest")),
            "min": num(d.min()),
            "max": num(d.max()),
            "stdev": num(d.std()),
        },
        "left_out": left_out(run, choice),
        "per_step": times.select(
            "worker", "step", (pl.col("duration_ns") / 1000).round(1).alias("duration_us"),
            "node_stats", "analysed",
        ).to_dicts(),
        "warnings": run.warnings,
        "lacks": run.lacks,
    }
