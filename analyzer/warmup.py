"""Warm-up and outlier steps: which traced steps are not like the others.

The first traced steps of a run are often slower (graph optimization, allocator growth,
oneDNN primitive caches): in our 30-step captures of a 6-block transformer the first
traced step took up to 1.7x the median. A step is an *outlier* when its time is above
    median + OUTLIER_MADS * 1.4826 * MAD   and   above OUTLIER_RATIO * median
over the steps of its worker (both: a MAD of near 0 must not flag 2% slower steps).
The *warm-up* steps are the leading outliers: the run of outliers from the first traced
step on, at most a quarter of the steps. Only warm-up steps are meant to be left out of a
test; later outliers are reported but kept (a regression may well be "every 10th step is
slow").
"""

from __future__ import annotations

import polars as pl

OUTLIER_MADS = 5.0
OUTLIER_RATIO = 1.2
MAX_WARMUP_SHARE = 0.25
MIN_STEPS = 6  # fewer steps than this: nothing is flagged


def flag_steps(steps: pl.DataFrame) -> pl.DataFrame:
    """Flag outlier and warm-up steps.

    `steps`: columns worker (str), step (int), step_us (float). Returns those columns plus
    outlier (bool) and warmup (bool), sorted by worker and step.
    """
    s = steps.sort("worker", "step")
    med = pl.col("step_us").median().over("worker")
    mad = (pl.col("step_us") - med).abs().median().over("worker")
    n = pl.len().over("worker")
    s = s.with_columns(
        outlier=(n >= MIN_STEPS)
        & (pl.col("step_us") > med + OUTLIER_MADS * 1.4826 * mad)
        & (pl.col("step_us") > OUTLIER_RATIO * med),
        pos=pl.int_range(pl.len()).over("worker"),
    )
    # Leading outliers: every step up to this one is an outlier.
    s = s.with_columns(
        warmup=pl.col("outlier").cast(pl.Int32).cum_min().over("worker").cast(pl.Boolean)
        & (pl.col("pos") < (MAX_WARMUP_SHARE * n).floor())
    )
    return s.drop("pos")
