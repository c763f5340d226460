"""Each device's own step: per (worker, device, step), the span of the device's work in
the step, its busy time, and its idle share of that span (docs/xplane.md "Devices").

Devices do not share one step: two GPUs of one job may compute 650 ms apart, a third may
only copy outside every step, XLA CPU replicas wait for each other in collectives. So
each device's numbers are its own, against its own span; a device that did nothing in a
step has a row with null numbers ("no work in this step"), never "idle 100%".
XSpace profiles give the frame (`Run.device_steps`: events placed by group, launch or
time window, analyzer/sources/xplane_devsteps.py); other inputs derive it here from the
executions (their steps are the input's own).
"""

from __future__ import annotations

import polars as pl

from .. import products
from ..model import Run
from .steps import step_times

NO_WORK = "no work in this step"


def _from_executions(run: Run, workers: list[str]) -> pl.DataFrame:
    """Span, busy time (union of the device's execution intervals over its lanes) and
    events per (worker, device, step), for workers without a device_steps frame."""
    if not workers:
        return pl.DataFrame()
    by = ["worker", "device", "step"]
    # A GPU's canonical lane (/device:GPU:0) holds the host's side of its ops (tfprof
    # counts it as CPU time): a device with `stream:all` lanes is their work (tfprof's
    # accelerator time), else its per-stream lanes' (old timelines), else its own lane's.
    kind = pl.col("lane_kind")
    dev = ["worker", "device"]
    keep = ((kind == "stream_all")
            | ((kind == "stream") & ~(kind == "stream_all").any().over(dev))
            | ~kind.is_in(["stream_all", "stream"]).any().over(dev))
    iv = (run.nodes_lazy().filter(pl.col("worker").is_in(workers)).filter(keep)
          .select(*by, "start_ns", end_ns=pl.col("start_ns") + pl.col("all_end_rel_ns"))
          .collect().sort(*by, "start_ns"))
    blocks = (
        iv.with_columns(new=(pl.col("start_ns") > pl.col("end_ns").cum_max().shift(1)
                             .over(by)).fill_null(True))
        .with_columns(block=pl.col("new").cast(pl.Int64).cum_sum().over(by))
        .group_by(*by, "block").agg(b=pl.col("start_ns").min(), e=pl.col("end_ns").max())
        .group_by(by).agg(busy_ns=(pl.col("e") - pl.col("b")).sum())
    )
    return (iv.group_by(by).agg(start_ns=pl.col("start_ns").min(),
                                end_ns=pl.col("end_ns").max(), events=pl.len())
            .join(blocks, on=by)
            .with_columns(how=pl.lit("step"),
                          modules=pl.lit(None, pl.Int64))
            .select(*by, "start_ns", "end_ns", "busy_ns", "events", "how",
                    "modules"))


def device_work(run: Run) -> pl.DataFrame:
    """The device_steps frame of the run's workers (derived from the executions where the
    input gives none), null steps (work outside every step) included."""
    given = run.device_steps
    have = set(given.get_column("worker").unique().to_list()) if given.height else set()
    derived = _from_executions(run, [w for w in run.workers if w not in have])
    cols = ["worker", "device", "step", "start_ns", "end_ns", "busy_ns", "events",
            "how", "modules"]
    parts = [f.select(cols) for f in (given, derived) if f.height]
    return (pl.concat(parts) if parts else given.select(cols)).sort(
        "worker", "device", "step", nulls_last=True)


def device_steps(run: Run) -> pl.DataFrame:
    """device_steps_of(run), memoised on the run (summary, RL102 and the report read it)."""
    return products.memoised(run, ("device_steps",), lambda: device_steps_of(run))


def device_steps_of(run: Run) -> pl.DataFrame:
    """One row per (worker, device, step) for every device of a worker and every step of
    it: device_step_ns (span of the device's work in the step), busy_ns, idle_share
    (1 - busy/span), events, how (its events' placement), `work` False where the device did nothing
    in the step (numbers null: "no work in this step")."""
    every = device_work(run)
    work = every.filter(pl.col("step").is_not_null())
    devices = pl.concat([run.keys.select("worker", "device"),
                         every.select("worker", "device")]).unique()
    steps = step_times(run).select("worker", "step")
    grid = devices.join(steps, on="worker")
    return (
        grid.join(work, on=["worker", "device", "step"], how="left")
        .with_columns(work=pl.col("events").is_not_null(),
                      device_step_ns=pl.col("end_ns") - pl.col("start_ns"))
        .with_columns(idle_share=pl.when(pl.col("device_step_ns") > 0)
                      .then(1 - pl.col("busy_ns") / pl.col("device_step_ns")))
        .select("worker", "device", "step", "work", "start_ns", "end_ns", "device_step_ns",
                "busy_ns", "idle_share", "events", "how", "modules")
        .sort("worker", "device", "step")
    )


def outside_steps(run: Run) -> pl.DataFrame:
    """Per (worker, device): the work outside every step (events, busy_ns), where the
    input says which events are in no step (a profile the TensorBoard plugin grouped)."""
    return (device_work(run).filter(pl.col("step").is_null())
            .select("worker", "device", "events", "busy_ns"))
