"""The input pipeline of a TF2 profile (tf.data), as xprof's input pipeline analyzer sees it.

The training thread waits for its batch inside `Iterator::Root` (the root of the
pipeline's TraceMe events, nested in `IteratorGetNextOp::DoCompute` and, in eager code, in
`EagerLocalExecute: IteratorGetNext`): the xplane source reads it as the Dataset op
`Iterator/Root`. Its span is the wait; the union of those spans in a step, as a share of
the step, is xprof's "waiting for input" (its infeed time, the same events). The stage
the wait goes to is the one with the most self time (xprof's table of input ops); what
ran on tf.data's own threads (`tf_data_*` lines) says why it is slow (a py_function).
"""

from __future__ import annotations

import polars as pl

from ..model import Run

ROOT = "Iterator/Root"  # the consumer's GetNext: Iterator::Root with '::' as '/'
DATA_THREADS = "tf_data"  # tf.data's own thread pools: tf_data_private_threadpool, ...


def has_iterator(run: Run) -> bool:
    """Whether the run holds tf.data's consumer events (a TF2 profile of a tf.data run)."""
    return bool(run.nodes.filter((pl.col("op_type") == "Dataset")
                                 & (pl.col("node_name") == ROOT)).height)


def iterator_waits(run: Run) -> pl.DataFrame:
    """worker, step, start_ns, end_ns: every wait of the training thread for a batch."""
    return run.nodes.filter((pl.col("op_type") == "Dataset") & (pl.col("node_name") == ROOT)
                            ).select("worker", "step", "start_ns",
                                     end_ns=pl.col("start_ns") + pl.col("all_end_rel_ns"))


def clipped_waits(run: Run, steps: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """The waits within each step's span (`steps`: worker, step, start_ns, end_ns, as
    analysis.steps.step_times), as worker, step, start_ns, end_ns; and the wait outside
    every step (ns: before or between step markers, where the user's loop fetched the
    batch outside the marker), which is no share of any step."""
    waits = iterator_waits(run)
    total = int((waits["end_ns"] - waits["start_ns"]).sum()) if waits.height else 0
    inside = (waits.join(steps.select("worker", "step", lo="start_ns", hi="end_ns"),
                         on=["worker", "step"], how="inner")
              .with_columns(start_ns=pl.max_horizontal("start_ns", "lo"),
                            end_ns=pl.min_horizontal("end_ns", "hi"))
              .filter(pl.col("end_ns") > pl.col("start_ns"))
              .select("worker", "step", "start_ns", "end_ns"))
    kept = int((inside["end_ns"] - inside["start_ns"]).sum()) if inside.height else 0
    return inside, total - kept


def slowest_stage(run: Run) -> tuple[str, float] | None:
    """The tf.data stage (`Iterator::...` name) with the most self time, and its time in
    us per analysed step; None without stages."""
    stages = (run.nodes.filter(pl.col("op_type") == "Dataset")
              .group_by("node_name").agg(ns=pl.col("op_end_rel_ns").sum())
              .sort(["ns", "node_name"], descending=[True, False]))
    if not stages.height or not run.steps:
        return None
    name = str(stages["node_name"][0]).replace("/", "::")
    return name, int(stages["ns"][0]) / 1000 / len(run.steps)


def pipeline_ops(run: Run) -> pl.DataFrame:
    """op_type, ns: what ran on tf.data's threads (the map functions' ops), most first."""
    threads = run.threads.filter(pl.col("name").str.starts_with(DATA_THREADS)).select(
        "worker", "step", "thread_id").unique()
    return (run.nodes.filter(pl.col("op_type") != "Dataset")
            .join(threads, on=["worker", "step", "thread_id"], how="semi")
            .group_by("op_type").agg(ns=pl.col("op_end_rel_ns").sum())
            .sort(["ns", "op_type"], descending=[True, False]))


def pipeline_fix(run: Run) -> str:
    """What to change in the pipeline, from its stages and the ops of its threads."""
    stages = run.nodes.filter(pl.col("op_type") == "Dataset").get_column(
        "node_name").unique().to_list()
    ops = pipeline_ops(run)
    total = int(ops["ns"].sum()) if ops.height else 0
    fixes = []
    py = ops.filter(pl.col("op_type").is_in(["EagerPyFunc", "PyFunc", "PyFuncStateless"]))
    if total and py.height and int(py["ns"].sum()) >= total / 2:
        fixes.append("move the tf.py_function out of the pipeline (TF ops, or pre-process "
                     "offline): it holds the Python GIL and runs one element at a time")
    if any("Map" in s.rsplit("/", 1)[-1] and "Parallel" not in s.rsplit("/", 1)[-1]
           for s in stages):
        fixes.append("map(..., num_parallel_calls=tf.data.AUTOTUNE)")
    if not any("Prefetch" in s for s in stages):
        fixes.append("end the pipeline with .prefetch(tf.data.AUTOTUNE)")
    fixes.append("cache() decoded data that fits in memory")
    return "; ".join(fixes)
