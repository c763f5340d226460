"""Step times: the span of every traced step, per worker, from the executions frame."""

from __future__ import annotations

from typing import Any

import polars as pl

from ..model import Run


def step_times(run: Run) -> pl.DataFrame:
    """One row per (worker, step): start_ns, end_ns and duration_ns over all lanes, or
    the step's span where the input says it (`step_spans`: an xplane step marker, the
    device span of a GPU step; docs/xplane.md), `kind` saying which ("marker", "device",
    "executions"); and on accelerator profiles the step's device work apart:
    device_start_ns, device_end_ns, device_ns (first to last device event: xprof's
    device-side step time; null without device work)."""
    spans = run.step_spans.lazy().select(
        "worker", "step", "kind", "device_start_ns", "device_end_ns", span_start="start_ns",
        span_end="end_ns")
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
        .with_columns(duration_ns=pl.col("end_ns") - pl.col("start_ns"),
                      device_ns=pl.col("device_end_ns") - pl.col("device_start_ns"),
                      kind=pl.col("kind").fill_null("executions"))
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
        from .attribution import attribution_note, attribution_shares

        extra["attribution"] = attribution_shares(run)
        extra["attribution_note"] = attribution_note(run)

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
