"""Step times: the span of every traced step, per worker, from the executions frame.

One number per fact: every output that names a step's time (summary, the advise header,
RL109, the critical path and RL108, the report) reads it from `step_times`, computed once
per Run, and a median step time from `median_step_us` (over the steps of the Run it is
given: the analysed ones, warm-up and outliers left out, unless the caller says)."""

from __future__ import annotations

import polars as pl

from .. import products
from ..model import Run


def step_times(run: Run) -> pl.DataFrame:
    """One row per (worker, step): start_ns, end_ns and duration_ns over all lanes, or
    the step's span where the input says it (`step_spans`: an xplane step marker, the
    device span of a GPU step; docs/xplane.md), `kind` saying which ("marker", "device",
    "executions"); and on accelerator profiles the step's device work apart:
    device_start_ns, device_end_ns, device_ns (first to last device event: xprof's
    device-side step time; null without device work). Computed once per Run."""
    return products.memoised(run, ("step_times",), lambda: _step_times(run))


def _step_times(run: Run) -> pl.DataFrame:
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


def median_step_us(run: Run, worker: str | None = None) -> float:
    """The median step time in microseconds over `run`'s steps (one row per worker and
    step; `worker`: that worker's only), as summary, the advise header and RL109 print it;
    0.0 without steps."""
    times = step_times(run)
    if worker is not None:
        times = times.filter(pl.col("worker") == worker)
    value = times.get_column("duration_ns").median()
    return float(value) / 1000.0 if value is not None else 0.0  # type: ignore[arg-type]
