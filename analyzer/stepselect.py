"""The steps an analysis covers, one rule for every command.

Every traced step but those analyzer.warmup leaves out (warm-up steps at the start of a
run, outlier steps far above the median: its docstring gives the rule and the measured
reason), decided once per worker over all traced steps; `include_warmup` keeps them, and
`first`/`last` (`--steps A:B`) restrict to a range after that. Views at step -1, the
checkers, the critical path's median step and the summary's statistics work on
`analysed(run, choice)`; the summary and the advisor say which steps were left out and
why. tfprof averages over every step: `ViewOptions.tfprof()` sets include_warmup.

The cache stores step -1's per-node numbers and the default trees for the default choice
(analyzer/load.py puts them in `Run.defaults`); `analysed` hands them to the Run of any
choice that covers the same steps, so a warm analysis aggregates nothing again.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from analyzer.errors import RunlensError
from analyzer.model import Run
from analyzer.steps import step_times
from analyzer.warmup import flag_steps

# Frames with one row per (worker, step, ...) that a choice of steps restricts; the
# executions and outputs carry the worker in their key tables.
_BY_WORKER_STEP = ("memory", "allocations")
_KEYED = {"executions": ("key_id", "keys"), "output_rows": ("out_key", "output_keys")}


@dataclass(frozen=True)
class StepChoice:
    """Which traced steps to analyse: all but the left-out ones (unless include_warmup),
    from `first` to `last` inclusive (None: that end open)."""

    include_warmup: bool = False
    first: int | None = None
    last: int | None = None

    @classmethod
    def parse(cls, steps: str | None, include_warmup: bool = False) -> StepChoice:
        """From `--steps A:B` (A: or :B leave an end open) and `--include-warmup`."""
        if not steps:
            return cls(include_warmup)
        first, last = parse_step_range(steps)
        return cls(include_warmup, first, last)

    @property
    def ranged(self) -> bool:
        return self.first is not None or self.last is not None


def step_flags(run: Run) -> pl.DataFrame:
    """Every traced (worker, step): step_us, warmup, outlier, left_out (analyzer.warmup)
    and `why` ("warm-up", "outlier" or null), computed once over all of the run's steps
    (the cache keeps it; a Run of chosen steps keeps its whole run's)."""
    def build(r: Run) -> pl.DataFrame:
        times = step_times(r).select("worker", "step", step_us=pl.col("duration_ns") / 1000)
        flags = flag_steps(times)
        return flags.with_columns(
            why=pl.when(~pl.col("left_out")).then(None)
            .when(pl.col("warmup")).then(pl.lit("warm-up")).otherwise(pl.lit("outlier")))
    return run.derived_frame("step_flags", build)


def _in_range(choice: StepChoice) -> pl.Expr:
    inside = pl.lit(True)
    if choice.first is not None:
        inside = inside & (pl.col("step") >= choice.first)
    if choice.last is not None:
        inside = inside & (pl.col("step") <= choice.last)
    return inside


def parse_step_range(text: str) -> tuple[int | None, int | None]:
    """'A:B' (inclusive, either end may be left out) -> (A, B)."""
    lo, sep, hi = text.partition(":")
    try:
        if not sep:
            raise ValueError
        bounds = (int(lo) if lo.strip() else None, int(hi) if hi.strip() else None)
    except ValueError:
        raise RunlensError(f"--steps {text!r}: expected A:B (global steps, inclusive), "
                           "e.g. 10:20, 10: or :20") from None
    if bounds[0] is not None and bounds[1] is not None and bounds[0] > bounds[1]:
        raise RunlensError(f"--steps {text}: the first step is after the last")
    return bounds


def short_steps(values: list[int]) -> str:
    """Up to 12 steps, then how many in all: how error messages list traced steps."""
    text = ", ".join(map(str, values[:12]))
    return text + (f", ... ({len(values)} in all)" if len(values) > 12 else "")


def require_traced(run: Run, step: int, where: str) -> None:
    """Raise the one error every command gives for a step the run did not trace."""
    if step not in run.steps:
        raise RunlensError(f"{where}: step {step} was not traced "
                           f"(traced steps: {short_steps(run.steps)})")


def chosen_steps(run: Run, choice: StepChoice) -> pl.DataFrame:
    """step_flags with `in_range` and `analysed` (what `choice` keeps)."""
    return step_flags(run).with_columns(in_range=_in_range(choice)).with_columns(
        analysed=pl.col("in_range") & (pl.lit(choice.include_warmup) | ~pl.col("left_out")))


def left_out(run: Run, choice: StepChoice) -> list[dict]:
    """The traced steps `choice` leaves out, with why: what summary and advise print."""
    flags = chosen_steps(run, choice).filter(~pl.col("analysed"))
    flags = flags.with_columns(why=pl.when(pl.col("in_range")).then(pl.col("why"))
                               .otherwise(pl.lit("outside --steps")))
    return flags.select("worker", "step", pl.col("step_us").round(1), "why").to_dicts()


def analysed(run: Run, choice: StepChoice | None = None) -> Run:
    """`run` restricted to the steps `choice` keeps (the run itself when it keeps them
    all), memoized on `run`."""
    choice = choice or StepChoice()
    known = run.chosen.get(choice)
    if known is not None:
        return known
    flags = chosen_steps(run, choice)
    keep = flags.get_column("analysed")
    if not keep.any():
        raise RunlensError(f"{', '.join(map(str, run.paths)) or 'run'}: no traced step is "
                           "left to analyse (--steps outside the traced steps?)")
    sub = run if keep.all() else _restricted(run, flags.filter(pl.col("analysed")))
    if sub is not run:
        sub.derived["step_flags"] = flags.drop("in_range", "analysed")
        sub.derived.setdefault("code_paths", run.derived.get("code_paths"))  # type: ignore[arg-type]
        if sub.derived["code_paths"] is None:
            del sub.derived["code_paths"]
    if run.defaults and keep.equals(~flags.get_column("left_out")):
        # The cache's numbers were computed for exactly these steps.
        sub.node_stats.setdefault(-1, run.defaults["node_stats"])
        for name, frame in run.defaults.items():
            if name != "node_stats":
                sub.derived.setdefault(name, frame)
    run.chosen[choice] = sub
    return sub


def _restricted(run: Run, kept: pl.DataFrame) -> Run:
    """A Run with the rows of the `kept` (worker, step) pairs only (read when used)."""
    pairs = kept.select("worker", "step")

    def by_key(name: str) -> pl.DataFrame:
        column, keys = _KEYED[name]
        rows = getattr(run, name)
        worker = pl.lit(getattr(run, keys).get_column("worker")).gather(pl.col(column))
        return (rows.lazy().with_columns(worker_=worker)
                .join(pairs.lazy().rename({"worker": "worker_"}), on=["worker_", "step"],
                      how="semi", maintain_order="left").drop("worker_").collect())

    def by_worker(name: str) -> pl.DataFrame:
        return getattr(run, name).join(pairs, on=["worker", "step"], how="semi",
                                       maintain_order="left")

    frames = {name: (lambda n=name: by_key(n)) for name in _KEYED}
    frames.update({name: (lambda n=name: by_worker(n)) for name in _BY_WORKER_STEP})
    return run.replace(**frames)
