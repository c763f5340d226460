"""Memory within a step from the allocation records: what the report's memory chart and the
timeline's memory counters draw, and RL110 cites, computed one way.

Two measures of memory are not one: an allocator's *bytes in use* (absolute; RunMetadata's
`allocator_bytes_in_use`, recorded as each op ends) and the *rise within a step* (the
running sum of the step's allocation records, + allocated and - freed, from the step's
start: what the step allocated above what was in use when it began). Outputs say which one
they print."""

from __future__ import annotations

import polars as pl

from ..model import Run

KEY = ["worker", "allocator_name", "step"]


def rise_levels(run: Run) -> pl.LazyFrame:
    """Per worker, allocator, step and timestamp (alloc_us > 0): `level`, the bytes
    allocated since the step began after the last record of that timestamp (records of
    one timestamp in any order give the same level, so the result is deterministic)."""
    return (run.allocations.lazy().filter(pl.col("alloc_us") > 0)
            .group_by(*KEY, "alloc_us").agg(pl.col("alloc_bytes").sum())
            .sort(*KEY, "alloc_us")
            .with_columns(level=pl.col("alloc_bytes").cum_sum().over(KEY)))


def step_rise_peaks(run: Run) -> pl.DataFrame:
    """Per worker and allocator: `peak`, the largest rise within a step over the run's
    steps, `peak_step` the first step that reaches it (ties: the earliest step, whatever
    order the rows come in), `steps` how many steps have records."""
    per_step = rise_levels(run).group_by(KEY).agg(peak=pl.col("level").max())
    return (per_step.group_by("worker", "allocator_name")
            .agg(peak_step=pl.col("step").filter(pl.col("peak") == pl.col("peak").max()).min(),
                 peak=pl.col("peak").max(), steps=pl.len())
            .sort("worker", "allocator_name").collect())
