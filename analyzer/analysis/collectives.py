"""Collectives per (worker, device, step): their time and the part spent waiting for
peers (issue 30 point 4 builds the full category; this is the per-device-step numbers
`summary` needs, recognised by name only).

A collective is an execution whose op type or kernel is one: XLA's all-reduce,
all-gather, reduce-scatter, all-to-all, collective-permute, send, recv and their async
-start/-done halves (GPU/TPU kernels and HLO ops), JAX's collective primitives (the op
type of an XLA CPU thunk: psum, all_gather, ppermute...), NCCL kernels (ncclDevKernel_*,
ncclKernel_*), TF's CollectiveReduceV2, NcclAllReduce, _Send, _Recv, _HostRecv. Its time
is its whole duration; its wait is the time of the XLA CPU `Rendezvous` events inside it
(the replica waiting for the others: the device_steps frame's wait_ns).
"""

from __future__ import annotations

import polars as pl

from ..model import Run
from .devicesteps import device_work

_XLA = (r"(?:all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|send|recv)"
        r"(?:-start|-done)?(?:[._]\d+)*")
_JAX = r"(?:psum|pmean|pmax|pmin|psum_scatter|reduce_scatter|all_gather|all_to_all|ppermute)"
_TF = r"(?:CollectiveReduceV\d|CollectiveGather(?:V\d)?|NcclAllReduce|_Send|_Recv|_HostRecv)"
COLLECTIVE = rf"^(?:{_XLA}|{_JAX}|{_TF})$"
NCCL = r"^nccl(?:Dev)?Kernel_"


def is_collective() -> pl.Expr:
    """Whether an execution (a row of Run.nodes) is a collective, by its names."""
    return (pl.col("op_type").str.contains(COLLECTIVE)
            | pl.col("kernel").str.contains(COLLECTIVE)
            | pl.col("kernel").str.contains(NCCL)
            | pl.col("stat_name").str.split(":").list.last().str.contains(NCCL))


def per_device_step(run: Run) -> pl.DataFrame:
    """worker, device, step, collective_us (the collectives' time on the device in the
    step), collective_wait_us (the part waiting for peers); a row per (worker, device,
    step) with work, 0 where it ran no collective."""
    by = ["worker", "device", "step"]
    time = (run.nodes_lazy().filter(is_collective())
            .group_by(by).agg(collective_ns=pl.col("all_end_rel_ns").sum()).collect())
    work = device_work(run).filter(pl.col("step").is_not_null()).select(*by, "wait_ns")
    return (
        work.join(time, on=by, how="left")
        .select(*by, collective_us=pl.col("collective_ns").fill_null(0) / 1000,
                collective_wait_us=pl.col("wait_ns").fill_null(0) / 1000)
        .sort(by)
    )
