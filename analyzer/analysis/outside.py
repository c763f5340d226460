"""Work outside the steps: executions of a run whose steps are step markers that began
outside their step's marker (host threads, eager ops or an input wait between markers,
work before the first marker), or that ran on tf.data's background threads (no step
launched them: xprof's grouping gives them no step either).

A source gives every execution a step (the marker begun last before it, the first one's
for work before any: sources/xplane_read.py), so that nothing is lost; but that work is
not the step's, and counted into it, it is "a share of the step" above 100% (a
background tf.data map of 1991% of a 0.9 ms step). The per-step numbers (views, RL101,
RL105) leave it out and show it as its own row, "outside steps". Only steps spanned by
their marker (`step_spans.kind` "marker") have an outside; other steps' spans are their
work's (device, work) or are no step time at all (dispatch).
"""

from __future__ import annotations

import polars as pl

from .. import products
from ..model import Run

ROW = "outside steps"  # the row's name wherever it is shown
# tf.data's own threads (its pools: tf_data_private_threadpool, tf_data_iterator_resource):
# background work no step launched, even while a step runs; not the thread a step's
# function waits on for its batch (tf_data_iterator_get_next), which is the step's.
BACKGROUND = "tf_data"
STEP_THREADS = ("tf_data_iterator_get_next",)


def outside(run: Run) -> pl.Series:
    """Per row of run.executions: whether it began outside its step's marker or ran on
    a tf.data background thread (steps spanned by markers only). Once per Run (the
    per-node numbers and the view's note both ask: ~20 ms each on 176k executions)."""
    return products.memoised(run, "outside", lambda: _outside(run))


def _outside(run: Run) -> pl.Series:
    spans = run.step_spans.filter(pl.col("kind") == "marker")
    if not spans.height or not run.executions.height:
        return pl.repeat(False, run.executions.height, dtype=pl.Boolean, eager=True).alias(
            "outside")  # (not a Python list of a million False: 10 ms)
    key = run.executions.get_column("key_id")
    ex = run.executions.select("step", "start_ns", "thread_id").with_columns(
        worker=run.keys.get_column("worker").gather(key),
        lane=run.keys.get_column("lane").gather(key))
    name = pl.col("name")
    background = run.threads.filter(
        name.str.starts_with(BACKGROUND) & ~pl.any_horizontal(
            [name.str.starts_with(t) for t in STEP_THREADS])
    ).select("worker", "step", "lane", "thread_id").unique().with_columns(
        background=pl.lit(True))
    joined = (ex.join(spans.select("worker", "step", lo="start_ns", hi="end_ns"),
                      on=["worker", "step"], how="left", maintain_order="left")
              .join(background, on=["worker", "step", "lane", "thread_id"], how="left",
                    maintain_order="left"))
    out = pl.col("lo").is_not_null() & (
        (pl.col("start_ns") < pl.col("lo")) | (pl.col("start_ns") >= pl.col("hi"))
        | pl.col("background").fill_null(False))
    return joined.select(out.fill_null(False).alias("outside")).to_series()


_EMPTY = {"worker": pl.String, "op_type": pl.String, "ns": pl.Int64, "executions": pl.UInt32}


def outside_ops(run: Run) -> pl.DataFrame:
    """worker, op_type, ns, executions: the op time outside the steps, most first (a
    product: a warm view reads no executions for it; none without marker steps)."""
    if not run.step_spans.filter(pl.col("kind") == "marker").height:
        return pl.DataFrame(schema=_EMPTY)
    return OUTSIDE_OPS(run)


def _outside_ops(run: Run) -> pl.DataFrame:
    mask = outside(run)
    if not mask.any():
        return pl.DataFrame(schema=_EMPTY)
    return (run.nodes.filter(mask)
            .group_by("worker", "op_type")
            .agg(ns=pl.col("op_end_rel_ns").sum(), executions=pl.len())
            .sort(["worker", "ns", "op_type"], descending=[False, True, False])
            .cast(_EMPTY))  # type: ignore[arg-type]


def outside_note(run: Run) -> str | None:
    """One line for a view: how much op time lay outside the steps, and of what."""
    return note_of(outside_ops(run))


def note_of(ops: pl.DataFrame) -> str | None:
    """outside_note of outside rows (op_type, ns: outside_ops, or by_step's of some steps)."""
    if not ops.height:
        return None
    total = int(ops["ns"].sum())
    top = ops.group_by("op_type").agg(pl.col("ns").sum()).sort(
        ["ns", "op_type"], descending=[True, False]).head(3)
    what = ", ".join(f"{t} {ns / 1e6:.2f}ms" for t, ns in top.iter_rows())
    return (f"{ROW}: {total / 1e6:.2f}ms of op time ran outside the steps (before or "
            f"between step markers, or on tf.data's background threads: {what}); in no "
            "step's numbers")


def by_step(run: Run) -> pl.DataFrame:
    """worker, step, op_type, ns: the op time outside the steps by the step each
    execution was given (so that a choice of steps can be made of one host's rows)."""
    empty = {"worker": pl.String, "step": pl.Int64, "op_type": pl.String, "ns": pl.Int64}
    if not run.step_spans.filter(pl.col("kind") == "marker").height:
        return pl.DataFrame(schema=empty)
    mask = outside(run)
    if not mask.any():
        return pl.DataFrame(schema=empty)
    return (run.nodes.filter(mask).group_by("worker", "step", "op_type")
            .agg(ns=pl.col("op_end_rel_ns").sum())
            .sort("worker", "step", "op_type").cast(empty))  # type: ignore[arg-type]


OUTSIDE_OPS = products.register("outside_ops", _outside_ops)
