"""Collectives: which executions are communication between devices or workers, and how
much of it was waiting for the peers.

A category of its own, by op type (or kernel): XLA's collectives (all-reduce, all-gather,
reduce-scatter, all-to-all, collective-permute, send/recv, their async `-start`/`-done`
halves; a combined one already shared back to its operands' scopes by the xplane source,
analyzer/sources/hlo_collectives.py), NCCL kernels (`ncclDevKernel_*`, `ncclKernel_*`:
recognised by name, no multi-GPU capture is at hand), TensorFlow's collective and
send/receive ops. The wait for peers:
- XLA:CPU: the `Rendezvous` events inside a collective, read as executions of op type
  `peer-wait` (analyzer/sources/xplane_collectives.py), nested in the collective (whose
  self time is then its own work);
- TF collectives of several workers: the time from an execution's start to the start of
  the same collective (node name, occurrence in the step) on the last worker to arrive,
  at most its duration.

Times are self times (an execution's `op_end_rel_ns`): the wait rows are not in their
collective's time, and `collective_us` below is both (the collective's time with its
wait), `collective_wait_us` the wait alone.
"""

from __future__ import annotations

import polars as pl

from ..model import TIMED_LANES, Run
from ..sources.xplane_collectives import WAIT_TYPE  # the op type of the wait rows

COLLECTIVE, WAIT, COMPUTE = "collective", "collective wait", "compute"
XLA_TYPES = (r"^(all-reduce|all-gather|reduce-scatter|all-to-all|ragged-all-to-all|"
             r"collective-permute|collective-broadcast|send|recv)(-start|-done)?$")
TF_TYPES = (r"^(CollectiveReduce(V2|V3)?|CollectiveGather(V2)?|CollectiveBcast(Send|Recv)(V2)?"
            r"|CollectiveAllToAll(V2|V3)?|NcclAllReduce|NcclReduce|NcclBroadcast)$")
SEND_RECV_TYPES = r"^(_Send|_Recv|_HostSend|_HostRecv)$"
NCCL_KERNELS = r"^(unattributed:)?nccl(Dev)?Kernel_"
PER_DEVICE_STEP = ["worker", "device", "step", "collective_us", "collective_wait_us"]


def category_expr(op_type: pl.Expr, kernel: pl.Expr | None = None) -> pl.Expr:
    """"collective wait", "collective" or "compute" of each execution or op type."""
    op_type = op_type.cast(pl.String)
    is_collective = (op_type.str.contains(XLA_TYPES) | op_type.str.contains(TF_TYPES)
                     | op_type.str.contains(SEND_RECV_TYPES)
                     | op_type.str.contains(NCCL_KERNELS))
    if kernel is not None:
        is_collective = is_collective | kernel.cast(pl.String).str.contains(NCCL_KERNELS)
    return (pl.when(op_type == WAIT_TYPE).then(pl.lit(WAIT))
            .when(is_collective).then(pl.lit(COLLECTIVE)).otherwise(pl.lit(COMPUTE)))


def executions(run: Run) -> pl.DataFrame:
    """The collective and wait executions of `run`: worker, device, step, node_name,
    op_type, category, start_ns, self_ns (op_end_rel_ns) and wait_ns (the part of the
    execution spent waiting for peers: all of a wait row; a TF collective's gap to its
    last worker)."""
    return arrived(own_executions(run))


def own_executions(run: Run) -> pl.DataFrame:
    """`executions` as one host sees them: a TF collective's wait for the other workers
    not yet known (arrived() of every host's rows gives it: analysis/hostsummary)."""
    # tfprof's timed lanes only: a kernel on a per-stream lane is its stream:all run again
    nodes = run.nodes_lazy().filter(pl.col("lane_kind").is_in(TIMED_LANES)).select(
        "worker", "device", "step", "node_name", "op_type", "kernel", "start_ns",
        "op_end_rel_ns")
    # The category of each distinct (op type, kernel): regexes on the few names, not on
    # every execution of a large run.
    kinds = (nodes.select("op_type", "kernel").unique()
             .with_columns(category=category_expr(pl.col("op_type"), pl.col("kernel")))
             .filter(pl.col("category") != COMPUTE))
    rows = nodes.join(kinds, on=["op_type", "kernel"], how="inner", nulls_equal=True).collect()
    wait = pl.when(pl.col("category") == WAIT).then(pl.col("op_end_rel_ns")).otherwise(0)
    return (rows.with_columns(wait_ns=wait.cast(pl.Int64))
            .rename({"op_end_rel_ns": "self_ns"}).drop("kernel")
            .with_columns(pl.col("worker", "device", "node_name", "op_type")
                          .cast(pl.String)))


def arrived(rows: pl.DataFrame) -> pl.DataFrame:
    """`rows` of one or more workers with each TF collective's wait for the last worker."""
    if rows.select(pl.col("worker").n_unique()).item() > 1:
        return _arrival_waits(rows)
    return rows


def _arrival_waits(rows: pl.DataFrame) -> pl.DataFrame:
    """TF collectives on several workers: each execution waits from its start until the
    last worker's execution of the same collective (node, step, occurrence) started."""
    tf = pl.col("op_type").cast(pl.String).str.contains(TF_TYPES)
    occurrence = pl.col("start_ns").rank("ordinal").over("worker", "node_name", "step")
    rows = rows.with_columns(occ=occurrence)
    last = pl.col("start_ns").max().over("node_name", "step", "occ")
    count = pl.col("worker").n_unique().over("node_name", "step", "occ")
    gap = pl.min_horizontal(last - pl.col("start_ns"), pl.col("self_ns"))
    return rows.with_columns(
        wait_ns=pl.when(tf & (count > 1)).then(gap).otherwise(pl.col("wait_ns"))
        .cast(pl.Int64)).drop("occ")


def per_device_step(run: Run) -> pl.DataFrame:
    """Per (worker, device, step): the time of its collectives with their waits
    (`collective_us`) and the part spent waiting for peers (`collective_wait_us`)."""
    return per_device_step_of(executions(run))


def per_device_step_of(rows: pl.DataFrame) -> pl.DataFrame:
    """per_device_step of `executions` rows."""
    return (rows.group_by("worker", "device", "step")
            .agg(collective_us=pl.col("self_ns").sum() / 1000.0,
                 collective_wait_us=pl.col("wait_ns").sum() / 1000.0)
            .sort("worker", "device", "step")
            .select(PER_DEVICE_STEP))


def summary(run: Run) -> dict | None:
    """What `summary` says of the run's collectives (summary_of its executions)."""
    steps = run.nodes_lazy().select(pl.col("step").n_unique()).collect().item()
    return summary_of(executions(run), steps)


def summary_of(rows: pl.DataFrame, steps: int) -> dict | None:
    """What `summary` says of collectives `rows` (executions) over `steps` steps: medians
    over the steps of their time and wait (summed over the devices and workers, said how
    many), the wait's share, and the time per kind; None when there are none."""
    if not rows.height:
        return None
    per_step = (rows.group_by("step").agg(
        total=pl.col("self_ns").sum() / 1000.0, wait=pl.col("wait_ns").sum() / 1000.0))
    total, wait = (per_step.select(pl.col(c).median()).item() or 0.0 for c in ("total", "wait"))
    devices = rows.select(pl.struct("worker", "device").n_unique()).item()
    kinds = (rows.filter(pl.col("category") == COLLECTIVE)
             .group_by(pl.col("op_type").cast(pl.String))
             .agg(us=pl.col("self_ns").sum() / 1000.0 / max(steps, 1)).sort("op_type"))
    return {"collective_us": round(total, 1), "collective_wait_us": round(wait, 1),
            "wait_share": round(wait / total, 4) if total else 0.0,
            "summed_over_devices": devices,
            "by_kind_us": {k: round(v, 1) for k, v in kinds.iter_rows()}}


def views_note(run: Run) -> str | None:
    """What the views say of a run with collectives: how the category shows in them."""
    # The op types of the keys that ran (a key's id per execution, not its strings: the
    # executions' op types gathered and hashed took ~18 ms of a 176k-row profile)
    ran = run.keys.get_column("op_type").cast(pl.String).gather(
        run.executions.get_column("key_id").unique())
    used = pl.DataFrame({"op_type": ran}).unique()
    kinds = (used.filter(category_expr(pl.col("op_type")) == COLLECTIVE).sort("op_type")
             .get_column("op_type").to_list())
    waits = used.filter(pl.col("op_type") == WAIT_TYPE).height
    if not kinds and not waits:
        return None
    return ("collectives: op types " + (", ".join(kinds) or "none")
            + (f"; their wait for peers is op type {WAIT_TYPE} (scope {WAIT_TYPE}/<kind>), "
               "apart from the collective's own time" if waits
               else "; their wait for peers: summary, advise RL117")
            + " (docs/views.md \"Collectives\")")
