"""Per-step samples of a run, what the CI gate compares (docs/ci.md).

A run is reduced to `Samples`: for each traced step (per worker), the step time and the
time of each op type and each name scope (tfprof's micros per execution, summed), plus
each timed node's median step time (the machine factors' input). A baseline file
(analyzer.gate.baseline) is exactly these samples as JSON. This module is the bottom of
the gate: baseline, baseruns, machinefactor and compare build on it, never the reverse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from ..analysis.jaxscopes import folded
from ..analysis.nodestats import exact_times, execution_us
from ..analysis.outside import outside
from ..analysis.steps import step_times
from ..analysis.warmup import flag_steps
from ..model import TIMED_LANES, Run
from .names import node_key, op_key
from .workdiff import work_from_run

STEP_TIME, OP_TIME = "step time", "op time"  # the two step-level metrics
CAP_SLACK_US = 5.0  # a capped node may still take this much above SPIKE_CAP x its median


@dataclass
class Samples:
    """Per-step samples of a run: long frame (kind, name, sample, value_us) + node medians."""

    source: str
    samples: pl.DataFrame  # kind ("step"|"op"|"scope"), name, sample ("worker/step"), value_us
    node_medians: pl.DataFrame  # name, median_us[, op_type] (every timed node: the factors)
    scope_depth: int = 3
    meta: dict[str, Any] = field(default_factory=dict)
    # What each node does per step (analyzer.gate.workdiff); None: not recorded (a
    # baseline saved before work was kept, or samples made by hand)
    work: pl.DataFrame | None = None

    @property
    def n_samples(self) -> int:
        return self.samples.filter(pl.col("name") == STEP_TIME).height


def reduce_run(run: Run, source: str, scope_depth: int, spike_cap: float | None) -> Samples:
    """Per-step samples of step time, op time, op type time and scope time.

    Op time, op types and scopes are sums of per-node step times capped at `spike_cap` x
    the node's median step time (+ CAP_SLACK_US; contention spikes, docs/ci.md); step time
    is the wall span, as is. Nodes and op types are keyed by analyzer.gate.names (no XLA
    fusion numbers); each node's time is its executions' time on the lanes the views
    count (tfprof's rules, analyzer.analysis.nodestats), so compare's numbers are the
    views' numbers per step. The run's work (analyzer.gate.workdiff) comes along.
    """
    away = outside(run)  # work outside the steps is in no step's sample, as in the views
    n = (run.nodes.with_columns(away.alias("_outside")).filter(~pl.col("_outside"))
         if away.any() else run.nodes)
    n = n.filter((pl.col("all_start_us") > 0) & pl.col("lane_kind").is_in(TIMED_LANES))
    n = n.with_columns(us=execution_us(exact_times(run)).cast(pl.Float64),
                       node_name=node_key(), op_type=op_key(),
                       sample=pl.format("{}/{}", pl.col("worker"), pl.col("step")))
    n = folded(n, "node_name")
    # One row per node, op type and step: its time in that step, capped (see SPIKE_CAP)
    # against its own median: every kernel of an unattributed accelerator profile is
    # one node name, and the median of them all would cap each one (issue 23).
    n = (n.group_by("node_name", "op_type", "sample").agg(us=pl.col("us").sum())
         .with_columns(median_us=pl.col("us").median().over("node_name", "op_type")))
    if spike_cap is not None:
        n = n.with_columns(us=pl.min_horizontal(
            "us", pl.col("median_us") * spike_cap + CAP_SLACK_US))
    steps = step_times(run).select(
        kind=pl.lit("step"), name=pl.lit(STEP_TIME),
        sample=pl.format("{}/{}", pl.col("worker"), pl.col("step")),
        value_us=pl.col("duration_ns") / 1000.0)
    op_time = n.group_by("sample").agg(value_us=pl.col("us").sum()).select(
        kind=pl.lit("step"), name=pl.lit(OP_TIME), sample="sample", value_us="value_us")
    ops = n.group_by("op_type", "sample").agg(value_us=pl.col("us").sum()).select(
        kind=pl.lit("op"), name="op_type", sample="sample", value_us="value_us")
    parts = pl.col("node_name").str.split("/")
    scopes = (
        n.filter(parts.list.len() > 1)
        .with_columns(level=pl.int_ranges(1, pl.min_horizontal(parts.list.len(),
                                                               scope_depth + 1)))
        .explode("level")
        .with_columns(name=pl.col("node_name").str.split("/").list.head(pl.col("level"))
                      .list.join("/"))
        .group_by("name", "sample").agg(value_us=pl.col("us").sum())
        .select(kind=pl.lit("scope"), name="name", sample="sample", value_us="value_us")
    )
    node_medians = (n.unique(["node_name", "op_type"]).group_by("node_name")
                    .agg(median_us=pl.col("median_us").sum(), op_type=pl.col("op_type").first())
                    .rename({"node_name": "name"}).sort("name"))
    long = _fill_missing(pl.concat([steps, op_time, ops, scopes]))

    return Samples(source, long, node_medians, scope_depth,
                   {"steps": len(run.steps), "workers": run.workers, "spike_cap": spike_cap},
                   work_from_run(run))


def _fill_missing(long: pl.DataFrame) -> pl.DataFrame:
    """A metric absent from a step is 0 there (an op type that did not run)."""
    all_samples = long.select("sample").unique()
    metrics = long.select("kind", "name").unique()
    return (
        metrics.join(all_samples, how="cross")
        .join(long, on=["kind", "name", "sample"], how="left")
        .with_columns(pl.col("value_us").fill_null(0.0))
        .sort("kind", "name", "sample")
    )


def _step_number(sample: pl.Expr) -> pl.Expr:
    return sample.str.extract(r"/(\d+)$", 1).cast(pl.Int64, strict=False)


def warmup_steps(s: Samples) -> pl.DataFrame:
    """The run's steps with outlier and warm-up flags (analyzer.analysis.warmup's rule)."""
    steps = s.samples.filter(pl.col("name") == STEP_TIME).select(
        "sample", worker=pl.col("sample").str.replace(r"/\d+$", ""),
        step=_step_number(pl.col("sample")), step_us="value_us")
    return flag_steps(steps.with_columns(pl.col("step").fill_null(0)))


def drop_samples(s: Samples, samples: list[str]) -> Samples:
    return Samples(s.source, s.samples.filter(~pl.col("sample").is_in(samples)),
                   s.node_medians, s.scope_depth, s.meta, s.work)
