"""RL107 device-idle."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from ..analyzer.units import fmt_us
from .base import Analysis, Checker, Finding, Severity, pct, register
from .intervals import gaps, largest_gaps, merged_busy

IDLE_INFO = 0.25
IDLE_WARNING = 0.5
MIN_GAP_US = 100.0
MIN_OPS_PER_STEP = 10  # a lane with fewer ops is a host lane that only launches work


@register
class DeviceIdle(Checker):
    """Idle gaps on a CPU device's op lanes inside the step span: time when no op runs
    on the device although the step is not over. (Accelerator kernel lanes are the
    accelerator-utilization checker's.)

    Why: gaps are time the step could be shorter; on CPU they show the executor waiting
    (on Python, on a queue, on another device), on GPU the host not feeding the device.
    How to fix: look at what ends before and starts after the largest gaps; overlap
    input, copies and compute; remove host round-trips inside the step.
    """

    code = "RL107"
    name = "device-idle"
    title = "Idle gaps on a device"
    severity = Severity.INFO
    severity_note = f"warning when idle for {IDLE_WARNING:.0%} of the step or more"

    def check(self, a: Analysis) -> Iterable[Finding]:
        n = a.run.nodes_lazy().filter(
            (pl.col("all_start_us") > 0) & (pl.col("lane_kind") == "device")
            & pl.col("device").str.contains("cpu")
        ).select("worker", "device", "lane_kind", "step", "node_name", "start_ns",
                 "op_end_rel_ns").collect()  # only the columns used: not all of `nodes`
        busy_lanes = (n.group_by("worker", "device", "step").len()
                      .group_by("worker", "device").agg(ops=pl.col("len").mean())
                      .filter(pl.col("ops") >= MIN_OPS_PER_STEP))
        n = n.join(busy_lanes.select("worker", "device"), on=["worker", "device"], how="semi")
        if n.height == 0:
            return
        iv = n.select("worker", "device", "lane_kind", "step", "node_name", "start_ns",
                      end_ns=pl.col("start_ns") + pl.col("op_end_rel_ns"))
        by = ["worker", "device", "lane_kind", "step"]
        blocks = merged_busy(iv, by)
        spans = a.step_times.select("worker", "step", "start_ns", "end_ns")
        # Idle = step span minus busy blocks (before the first op and after the last too).
        busy = blocks.group_by(by).agg(busy_ns=(pl.col("end_ns") - pl.col("start_ns")).sum())
        idle = (busy.join(spans, on=["worker", "step"])
                .with_columns(idle_ns=pl.col("end_ns") - pl.col("start_ns") - pl.col("busy_ns"))
                .group_by("worker", "device", "lane_kind")
                .agg(idle_ns=pl.col("idle_ns").sum(),
                     span_ns=(pl.col("end_ns") - pl.col("start_ns")).sum(), steps=pl.len()))
        holes = gaps(blocks, by).filter(pl.col("gap_ns") >= MIN_GAP_US * 1000)
        for r in idle.sort("worker", "device", "lane_kind").iter_rows(named=True):
            share = r["idle_ns"] / r["span_ns"] if r["span_ns"] else 0.0
            if share < IDLE_INFO:
                continue
            top = largest_gaps(holes, {"worker": r["worker"], "device": r["device"],
                                       "lane_kind": r["lane_kind"]})
            yield self.finding(
                f"{r['device']} has no ops running for {pct(share)} of the step "
                f"({fmt_us(r['idle_ns'] / r['steps'] / 1000)} per step)",
                severity=Severity.WARNING if share >= IDLE_WARNING else Severity.INFO,
                where={"worker": r["worker"], "device": r["device"]},
                evidence={"idle_share": round(share, 4), "steps": r["steps"],
                          "largest_gaps_us": [round(g / 1000, 1) for g in top["gap_ns"]],
                          "gap_steps": top["step"].to_list()},
                suggestion="See what runs elsewhere during the gaps (analyze timeline); "
                           "overlap input, copies and compute.",
                impact=share,
            )
