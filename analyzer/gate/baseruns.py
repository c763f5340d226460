"""A baseline of several runs: the process, not the step, is the unit of variation.

Steps of one process are not independent: a scope's time can sit at one level for a
whole process and at another (up to ~2.5x for an attention softmax) in the next process
of the same code. One base run cannot tell that swing from a regression; k >= 2 base
runs can. `merge_runs` keeps each run's per-step samples apart (sample ids "i#worker/
step", node medians per run); `normalize_runs` divides each base run by its own
machine-wide factor; `run_floors` turns the spread of the k run medians into each
metric's effect-size floor (docs/ci.md, "A baseline of several runs").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from ..errors import InputFileError
from .machinefactor import machine_factor
from .samples import Samples

RUN_SEP = "#"  # sample id of run i: f"{i}#{worker}/{step}"
# With k >= 2 base runs a metric's floor is max(least, RUN_SPREAD_X x (s - 1)), s the
# largest ratio between one base run's median and the pooled median (either way): NEW must
# be further from the pooled base than any base run is, with 95% confidence. `least` is
# RUN_FLOOR_MIN for op time and for scopes of at least SMALL_SHARE of the step. Op types
# and metrics below SMALL_SHARE keep their size-class floor: a few runs of one session do
# not show how far they move between sessions (the attention softmaxes of 1-3% moved
# +60-80% between sessions while the runs of one session stayed within 20%; op type
# Softmax sums six of them). Chosen on the choice set (the study runs and session 1:
# X 1, 1.5, 2 x minimum 30-60%); rates measured on held-out sessions (docs/ci.md).
RUN_SPREAD_X = 1.0
RUN_FLOOR_MIN = {"step": 0.10, "scope": 0.40}
SMALL_SHARE = 0.03


def run_sources(s: Samples) -> list[str]:
    """The runs a Samples holds ([] for a plain one-run Samples)."""
    runs = s.meta.get("runs")
    return list(runs) if isinstance(runs, list) else []


def n_runs(s: Samples) -> int:
    return max(1, len(run_sources(s)))


def step_label(s: Samples, sample: str) -> str:
    """A sample id as a reader knows it: run i's "i#worker:0/7" of several runs becomes
    "<run dir name> worker:0/7"; one run's ids stay as they are."""
    sources = run_sources(s)
    head, sep, rest = sample.partition(RUN_SEP)
    if not sep or not head.isdigit() or len(sources) < 2:
        return sample
    index = int(head)
    name = Path(sources[index]).name if index < len(sources) else f"run {index}"
    return f"{name} {rest}"


def run_index(sample: pl.Expr) -> pl.Expr:
    """The run number of a sample id ("2#worker:0/7" -> 2); 0 without a run prefix."""
    return sample.str.extract(rf"^(\d+){RUN_SEP}", 1).cast(pl.Int64).fill_null(0)


def merge_runs(parts: list[Samples]) -> Samples:
    """One Samples holding every run of `parts` apart (a part may itself hold several).

    One part of one run is returned as it is: the one-run gate stays exactly as it was.
    """
    if len(parts) == 1:
        return parts[0]
    samples: list[pl.DataFrame] = []
    medians: list[pl.DataFrame] = []
    sources: list[str] = []
    for part in parts:
        runs = run_sources(part) or [part.source]
        local = run_index(pl.col("sample")) if run_sources(part) else pl.lit(0, pl.Int64)
        sample = pl.col("sample").str.replace(rf"^\d+{RUN_SEP}", "") \
            if run_sources(part) else pl.col("sample")
        offset = len(sources)
        samples.append(part.samples.with_columns(
            sample=pl.format("{}" + RUN_SEP + "{}", local + offset, sample)))
        nm = part.node_medians
        if "run" not in nm.columns:
            nm = nm.with_columns(run=pl.lit(0, pl.Int64))
        if "op_type" not in nm.columns:
            nm = nm.with_columns(op_type=pl.lit(None, pl.String))
        medians.append(nm.select("name", "median_us", "op_type", run=pl.col("run") + offset))
        sources += runs
    first = parts[0]
    for p in parts[1:]:
        if p.scope_depth != first.scope_depth:
            raise InputFileError(f"{p.source}: name scopes kept to depth {p.scope_depth}, "
                                 f"but {first.source} to depth {first.scope_depth}; base "
                                 "runs must agree (baseline save --scope-depth)")
    meta = {**first.meta, "runs": sources,
            "steps": sum(int(p.meta.get("steps", 0) or 0) for p in parts)}
    source = f"{len(sources)} runs ({', '.join(sources)})"
    # the runs' work: the first run that recorded it (runs of one commit do the same work)
    work = next((p.work for p in parts if p.work is not None), None)
    return Samples(source, pl.concat(samples), pl.concat(medians), first.scope_depth, meta,
                   work)


def pooled_node_medians(s: Samples) -> pl.DataFrame:
    """Each node's median over the runs' own node medians (the base's reference speed)."""
    nm = s.node_medians
    if "run" not in nm.columns:
        return nm
    if "op_type" not in nm.columns:
        return nm.group_by("name").agg(pl.col("median_us").median()).sort("name")
    pooled = nm.group_by("name").agg(pl.col("median_us").median(),
                                     pl.col("op_type").drop_nulls().first())
    if pooled["op_type"].null_count() == pooled.height:  # no run knew op types
        pooled = pooled.drop("op_type")
    return pooled.sort("name")


def normalize_runs(base: Samples) -> tuple[Samples, list[float]]:
    """Divide each base run by its machine-wide factor against the runs' pooled node
    medians, so that one slow machine among the base runs does not count as a scope's
    run-to-run spread. Returns the pooled Samples (node medians pooled) and the factors."""
    ref = Samples("pooled", base.samples.head(0), pooled_node_medians(base))
    factors = []
    for i in range(len(run_sources(base))):
        one = base.node_medians.filter(pl.col("run") == i).drop("run")
        factors.append(machine_factor(ref, Samples("run", base.samples.head(0), one))[0])
    factor = run_index(pl.col("sample")).replace_strict(dict(enumerate(factors)),
                                                        return_dtype=pl.Float64)
    scaled = base.samples.with_columns(value_us=pl.col("value_us") / factor)
    return Samples(base.source, scaled, ref.node_medians, base.scope_depth,
                   base.meta, base.work), factors


def run_spread(b: np.ndarray, runs: np.ndarray) -> np.ndarray:
    """Per metric: the largest ratio between one run's median and the pooled median,
    upwards or downwards (>= 1); b is metrics x steps, runs the run of each column."""
    pooled = np.median(b, axis=1) + 1.0
    meds = np.stack([np.median(b[:, runs == r], axis=1) + 1.0 for r in np.unique(runs)], 1)
    return np.maximum(meds.max(axis=1) / pooled, pooled / meds.min(axis=1))


def run_floors(kinds: list[str], spread: np.ndarray, class_floors: np.ndarray,
               shares: np.ndarray) -> np.ndarray:
    """The effect-size floor each metric gets from k >= 2 base runs (see RUN_SPREAD_X);
    `class_floors` are the one-run size-class floors, NaN where nothing is called."""
    least = np.array([RUN_FLOOR_MIN.get(k, np.nan) for k in kinds])
    keep = ((shares < SMALL_SHARE) & np.array([k != "step" for k in kinds])) | np.isnan(least)
    least = np.where(keep, class_floors, least)
    return np.where(np.isnan(class_floors), np.nan,
                    np.maximum(least, RUN_SPREAD_X * (spread - 1)))
