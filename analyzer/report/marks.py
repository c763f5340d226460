"""Which steps the report marks: warm-up and outlier steps.

A stand-in for analyzer.warmup (being written in parallel): the integrator swaps
`flag_steps` for `analyzer.warmup.flag_steps`, which takes and returns the same columns.
Local rule until then: with at least MIN_STEPS steps on a worker, a step is an outlier
when it takes more than OUTLIER_RATIO times the worker's median step; the warm-up steps
are the leading outliers (every step from the first traced one up to it is an outlier),
at most a quarter of the steps.
"""

from __future__ import annotations

import polars as pl

MIN_STEPS = 6
OUTLIER_RATIO = 1.5
MAX_WARMUP_SHARE = 0.25


def flag_steps(steps: pl.DataFrame) -> pl.DataFrame:
    """`steps`: worker, step, step_us. Returns them with outlier and warmup (bool),
    sorted by worker and step."""
    s = steps.sort("worker", "step")
    n = pl.len().over("worker")
    s = s.with_columns(
        outlier=(n >= MIN_STEPS)
        & (pl.col("step_us") > OUTLIER_RATIO * pl.col("step_us").median().over("worker")),
        pos=pl.int_range(pl.len()).over("worker"),
    )
    return s.with_columns(
        warmup=pl.col("outlier").cast(pl.Int32).cum_min().over("worker").cast(pl.Boolean)
        & (pl.col("pos") < (MAX_WARMUP_SHARE * n).floor())
    ).drop("pos")
