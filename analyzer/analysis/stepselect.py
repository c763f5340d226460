"""The steps an analysis covers, one rule for every command.

Every traced step but those analyzer.analysis.warmup leaves out (warm-up steps at the start of a
run, outlier steps far above the median: its docstring gives the rule and the measured
reason), decided once per worker over all traced steps; `include_warmup` keeps them, and
`first`/`last` (`--steps A:B`) restrict to a range after that. Views at step -1, the
checkers, the critical path's median step and the summary's statistics work on
`analysed(run, choice)`; the summary and the advisor say which steps were left out and
why. tfprof averages over every step: `ViewOptions.tfprof()` sets include_warmup.

The Run of a choice of steps is derived from its whole run (memoised there, not cached):
its products (analyzer.products) are cached under the steps it keeps, so any choice that
keeps the same steps (the default one above all) reads them back, and a warm analysis
aggregates nothing again. Step flags are computed on the whole run and shared.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import polars as pl

from .. import products
from ..errors import RunlensError
from ..model import Run
from .steps import step_times
from .warmup import flag_steps

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
    """Every traced (worker, step): step_us, warmup, outlier, left_out (analyzer.analysis.warmup)
    and `why` ("warm-up", "outlier" or null), computed once over all of the run's steps
    (a product of the whole run: a Run of chosen steps has its whole run's)."""
    return STEP_FLAGS(run)


def _step_flags(run: Run) -> pl.DataFrame:
    times = step_times(run).select("worker", "step", step_us=pl.col("duration_ns") / 1000)
    flags = flag_steps(times)
    return flags.with_columns(
        why=pl.when(~pl.col("left_out")).then(None)
        .when(pl.col("warmup")).then(pl.lit("warm-up")).otherwise(pl.lit("outlier")))


STEP_FLAGS = products.register("step_flags", _step_flags, whole_run=True)


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


def require_traced(steps: list[int], step: int, where: str) -> None:
    """Raise the one error every command gives for a step the run did not trace
    (`steps`: the traced ones, Run.steps)."""
    if step not in steps:
        raise RunlensError(f"{where}: step {step} was not traced "
                           f"(traced steps: {short_steps(steps)})")


def chosen_steps(run: Run, choice: StepChoice) -> pl.DataFrame:
    """step_flags with `in_range` and `analysed` (what `choice` keeps)."""
    return choose(step_flags(run), choice)


def choose(flags: pl.DataFrame, choice: StepChoice) -> pl.DataFrame:
    """`flags` (step_flags' columns, of any workers: each worker's are its own) with
    `in_range` and `analysed`: what `choice` keeps."""
    return flags.with_columns(in_range=_in_range(choice)).with_columns(
        analysed=pl.col("in_range") & (pl.lit(choice.include_warmup) | ~pl.col("left_out")))


def left_out(run: Run, choice: StepChoice) -> list[dict]:
    """The traced steps `choice` leaves out, with why: what summary and advise print."""
    return left_out_rows(chosen_steps(run, choice))


def left_out_rows(chosen: pl.DataFrame) -> list[dict]:
    """`left_out` of `chosen_steps`' frame."""
    flags = chosen.filter(~pl.col("analysed"))
    flags = flags.with_columns(why=pl.when(pl.col("in_range")).then(pl.col("why"))
                               .otherwise(pl.lit("outside --steps")))
    return flags.select("worker", "step", pl.col("step_us").round(1), "why").to_dicts()


def analysed(run: Run, choice: StepChoice | None = None) -> Run:
    """`run` restricted to the steps `choice` keeps (the run itself when it keeps them
    all), memoised on `run` (one Run for choices that keep the same steps)."""
    choice = choice or StepChoice()
    return products.memoised(run, ("analysed", choice), lambda: _analysed(run, choice))


def _analysed(run: Run, choice: StepChoice) -> Run:
    flags = chosen_steps(run, choice)
    keep = flags.get_column("analysed")
    if not keep.any():
        raise RunlensError(f"{', '.join(map(str, run.paths)) or 'run'}: no traced step is "
                           "left to analyse (--steps outside the traced steps?)")
    if keep.all():
        return run
    kept = flags.filter(pl.col("analysed")).select("worker", "step")
    # The steps kept name the Run's rows: its products are cached under them.
    token = "steps:" + hashlib.blake2b(json.dumps(kept.rows()).encode(),
                                       digest_size=16).hexdigest()
    return products.memoised(run, ("kept", token), lambda: _restricted(run, kept, token))


def _restricted(run: Run, kept: pl.DataFrame, token: str) -> Run:
    """A Run with the rows of the `kept` (worker, step) pairs only (read when used), cut
    from `run` (`token` names the pairs)."""
    pairs = kept

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
    origin = run.origin.narrow(token) if run.origin is not None else None
    return run.with_frames(frames, origin=origin, whole=run.whole)
