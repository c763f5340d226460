"""RL102 accelerator-utilization."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from .base import Analysis, Checker, Finding, Severity, pct, register
from .intervals import gaps, largest_gaps, merged_busy

LOW = 0.5  # below this share of the step with a kernel running: a warning
INFO = 0.8


@register
class AcceleratorUtilization(Checker):
    """Per accelerator, over all steps: the share of the step during which a kernel
    runs (kernel busy time / step span), and where the idle gaps are.

    Why: an idle GPU is paid for and wasted; low utilization means the device waits for
    the host (input, Python, kernel launches, copies). What tfprof's
    AcceleratorUtilizationChecker meant, over every step instead of the last.
    How to fix: see the gaps' neighbours; typical fixes are input prefetching, larger
    batches, fewer host-device syncs, XLA to cut launches.
    """

    code = "RL102"
    name = "accelerator-utilization"
    title = "Accelerator utilization"
    severity = Severity.WARNING
    severity_note = f"info when a kernel runs {LOW:.0%} of the step or more"

    def check(self, a: Analysis) -> Iterable[Finding]:
        n = a.run.nodes.filter(pl.col("all_start_us") > 0)
        kernels = n.filter(pl.col("lane_kind") == "stream_all")
        if kernels.height == 0:  # tf.timeline-era traces may only have per-stream lanes
            kernels = n.filter(pl.col("lane_kind") == "stream")
        if kernels.height == 0:
            return
        iv = kernels.select("worker", "device", "step", "node_name", "start_ns",
                            end_ns=pl.col("start_ns") + pl.col("op_end_rel_ns"))
        by = ["worker", "device", "step"]
        blocks = merged_busy(iv, by)
        busy = blocks.group_by(by).agg(busy_ns=(pl.col("end_ns") - pl.col("start_ns")).sum())
        spans = a.step_times.select("worker", "step", "duration_ns")
        util = busy.join(spans, on=["worker", "step"]).group_by("worker", "device").agg(
            busy_ns=pl.col("busy_ns").sum(), span_ns=pl.col("duration_ns").sum(),
            steps=pl.len())
        holes = gaps(blocks, by)
        for r in util.sort("worker", "device").iter_rows(named=True):
            share = r["busy_ns"] / r["span_ns"] if r["span_ns"] else 0.0
            if share >= INFO:
                continue
            top = largest_gaps(holes, {"worker": r["worker"], "device": r["device"]})
            yield self.finding(
                f"{r['device']} runs kernels {pct(share)} of the time over {r['steps']} "
                f"step(s); it is idle {pct(1 - share)} of the step",
                severity=Severity.WARNING if share < LOW else Severity.INFO,
                where={"worker": r["worker"], "device": r["device"]},
                evidence={"utilization": round(share, 4), "busy_us": r["busy_ns"] / 1000,
                          "span_us": r["span_ns"] / 1000,
                          "largest_gaps": [_gap(g, iv) for g in top.iter_rows(named=True)]},
                suggestion="Find what the host does in the largest gaps (analyze timeline); "
                           "prefetch input, batch more work per step, avoid host syncs.",
                impact=1 - share,
            )


def _gap(g: dict, iv: pl.DataFrame) -> dict:
    """A gap with the kernels right before and after it."""
    same = iv.filter((pl.col("worker") == g["worker"]) & (pl.col("device") == g["device"])
                     & (pl.col("step") == g["step"]))
    before = same.filter(pl.col("end_ns") <= g["gap_start_ns"]).sort("end_ns", "node_name").tail(1)
    after = same.filter(pl.col("start_ns") >= g["gap_start_ns"] + g["gap_ns"]).sort(
        "start_ns").head(1)
    return {"step": g["step"], "gap_us": g["gap_ns"] / 1000,
            "after": before["node_name"][0] if before.height else None,
            "before": after["node_name"][0] if after.height else None}
