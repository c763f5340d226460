"""Warm-up and outlier steps: which traced steps are not like the others.

The first traced steps of a run are often slower (graph optimization, allocator growth,
oneDNN primitive caches): in 12 separate 30-step captures on our shared 2-core machine
(benchmarks/ci_capture.py) the first traced step took 0.9-2.0x the run's median step,
above 1.25x in 9 of them. Hence, per worker:
- *warm-up*: the leading steps slower than WARMUP_RATIO * median, from the first traced
  step on.
- *outlier*: any step above OUTLIER_RATIO * median and above median + OUTLIER_MADS *
  1.4826 * MAD (both: a MAD near 0 must not flag a 2% slower step). On a shared machine
  these are contention spikes: one such base step, 3x slower in every scope, outranks a
  3x regression and costs a rank test its significance (measured: 9 of 40 injected 3x
  regressions missed at 10 steps a side before outliers were left out).
- *left_out*: warm-up and outlier steps, at most MAX_LEFT_OUT of the steps (warm-up
  first, then the slowest outliers): what the test leaves out by default. The report
  names them; a regression that makes "every 4th step slow" moves the median, so it is
  not an outlier by this rule.
- With FEW_STEPS to MIN_STEPS - 1 steps there is too little to tell noise from a slow
  step, so only a gross warm-up is flagged: the first traced step when it takes more than
  FEW_WARMUP_RATIO times the median of the others (gpu_mnist's first step: 114 ms against
  1.2 ms). Such a step is left out whatever the cap.
"""

from __future__ import annotations

import polars as pl

WARMUP_RATIO = 1.25
OUTLIER_MADS = 3.0
OUTLIER_RATIO = 1.25
MAX_LEFT_OUT = 0.25
MIN_STEPS = 6  # fewer steps than this: only a gross first-step warm-up is flagged
FEW_STEPS = 3  # below this, nothing is flagged
FEW_WARMUP_RATIO = 3.0


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
    # Leading slow steps: every step up to this one is slow.
    slow = (n >= MIN_STEPS) & (pl.col("step_us") > WARMUP_RATIO * med)
    cap = (MAX_LEFT_OUT * n).floor()
    s = s.with_columns(
        warmup=slow.cast(pl.Int32).cum_min().over("worker").cast(pl.Boolean)
        & (pl.col("pos") < cap))
    # Warm-up first, then the slowest outliers, up to the cap.
    key = (pl.when(pl.col("warmup")).then(float("inf"))
           .when(pl.col("outlier")).then(pl.col("step_us")).otherwise(-1.0))
    rank = key.rank("ordinal", descending=True).over("worker")
    s = s.with_columns(left_out=(pl.col("warmup") | pl.col("outlier")) & (rank <= cap))
    # Few steps: only a first step far slower than all the others.
    others = pl.col("step_us").filter(pl.col("pos") > 0).median().over("worker")
    gross = ((n >= FEW_STEPS) & (n < MIN_STEPS) & (pl.col("pos") == 0)
             & (pl.col("step_us") > FEW_WARMUP_RATIO * others))
    s = s.with_columns(warmup=pl.col("warmup") | gross, left_out=pl.col("left_out") | gross)
    return s.drop("pos")
