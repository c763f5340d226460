"""RL113 float64-ops."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from ..analyzer.units import fmt_us
from .base import Analysis, Checker, Finding, Severity, pct, register

CPU_WARNING_SHARE = 0.20
CPU_INFO_SHARE = 0.05


@register
class Float64Ops(Checker):
    """Double-precision (float64) ops on an accelerator, or taking much of the CPU time.

    Why: GPUs run float64 at 1/2 to 1/64 of float32 speed, and float64 doubles memory
    traffic everywhere; it usually creeps in from numpy defaults (np.float64 arrays fed
    to placeholders, tf.constant of Python floats with dtype=float64). How to fix: cast
    inputs to float32 at the edge of the graph (`tf.cast(x, tf.float32)`), create
    variables and placeholders with dtype tf.float32.
    """

    code = "RL113"
    name = "float64-ops"
    title = "Double-precision ops"
    needs = frozenset({"outputs"})
    severity = Severity.WARNING
    severity_note = (f"info on a CPU when float64 ops take less than {CPU_WARNING_SHARE:.0%} "
                     "of op time")

    def check(self, a: Analysis) -> Iterable[Finding]:
        run = a.run
        out_dtype = (
            run.outputs.join(run.nodes.select("worker", "step", "exec_idx", "node_name"),
                             on=["worker", "step", "exec_idx"])
            .group_by("worker", "node_name").agg(dtype=pl.col("dtype").first())
            .rename({"node_name": "name"})
        )
        graph_dtype = run.graph_nodes.filter(pl.col("source") == "graph").select(
            "worker", "name", gdtype="dtype").unique(subset=["worker", "name"])
        nodes = (
            a.nodes.filter(pl.col("executed"))
            .join(out_dtype, on=["worker", "name"], how="left")
            .join(graph_dtype, on=["worker", "name"], how="left")
            .with_columns(dtype=pl.coalesce("dtype", "gdtype"))
        )
        doubles = nodes.filter(pl.col("dtype") == "double")
        if doubles.height == 0:
            return
        total = float(nodes["micros"].sum()) or 1.0
        for device, group in doubles.sort("device", "name").group_by("device",
                                                                    maintain_order=True):
            dev = str(device[0])
            us = float(group["micros"].sum())
            share = us / total
            accel = "gpu" in dev or "tpu" in dev
            if not accel and share < CPU_INFO_SHARE:
                continue
            severity = Severity.WARNING if accel or share >= CPU_WARNING_SHARE else Severity.INFO
            top = group.sort(["micros", "name"], descending=[True, False]).head(8)
            yield self.finding(
                f"{group.height} float64 ops on {dev} take {pct(share)} of op time "
                f"({fmt_us(us)} per step)",
                severity=severity,
                where={"device": dev, "op": top["kernel"][0]},
                evidence={"ops": top.select("name", "kernel", "micros").to_dicts(),
                          "share_of_op_time": round(share, 4)},
                suggestion="Use float32: cast inputs with tf.cast(x, tf.float32) and create "
                           "variables and placeholders as tf.float32.",
                impact=a.per_worker_step(us),
            )
