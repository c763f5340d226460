"""RL106 host-device-copies."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from ..analyzer.units import fmt_bytes, fmt_us
from .base import Analysis, Checker, Finding, Severity, num, pct, register

# TF's kernels (MEMCPYHtoD) and XSpace's device events (MemcpyH2D, MemcpyD2H, ...).
_DIRECTIONS = "HtoD|DtoH|DtoD|PtoP|H2D|D2H|D2D|P2P"
COPY_OPS = (rf"(?i)^(MEMCPY({_DIRECTIONS})|_?(Host)?(Send|Recv)|_HostCast|CopyHost.*)$")


def is_copy() -> pl.Expr:
    """A memory copy or transfer (a node row: lane_kind, kernel, timeline_label)."""
    return ((pl.col("lane_kind") == "memcpy") | pl.col("kernel").str.contains(COPY_OPS)
            | pl.col("timeline_label").str.contains(rf"(?i)MEMCPY({_DIRECTIONS})"))
INFO_SHARE = 0.02
WARNING_SHARE = 0.10


@register
class HostDeviceCopies(Checker):
    """Memory copies between host and device (memcpy HtoD / DtoH) and Send/Recv
    transfers: their time and bytes per step, when above a share of step time.

    Why: copies over PCIe or the network are slow compared with device memory, and a
    copy on the critical path stalls the step; they usually come from ops placed on the
    CPU in a GPU graph (no GPU kernel, or a tf.py_function), from feeding numpy arrays,
    or from fetching tensors every step. How to fix: keep the whole step on the device
    (check placement with log_device_placement), feed with tf.data + prefetch to the
    device, fetch less, use pinned memory.
    """

    code = "RL106"
    name = "host-device-copies"
    title = "Host-device copies"
    severity = Severity.WARNING
    severity_note = f"info when copies take less than {WARNING_SHARE:.0%} of the step"

    def check(self, a: Analysis) -> Iterable[Finding]:
        n = a.run.nodes.filter(pl.col("all_start_us") > 0)
        copies = n.filter(is_copy()).with_columns(
            kind=pl.coalesce(
                pl.col("timeline_label").str.extract(rf"(?i)(MEMCPY(?:{_DIRECTIONS}))", 1),
                pl.col("kernel").str.extract(r"(?i)((?:Host)?(?:Send|Recv))", 1),
                pl.when(pl.col("lane_kind") == "memcpy").then(pl.lit("MEMCPY")),
                pl.col("kernel")).str.to_uppercase())
        if copies.height == 0:
            return
        out_bytes = (
            a.run.outputs.group_by("worker", "step", "exec_idx")
            .agg(bytes=pl.max_horizontal("requested_bytes", "allocated_bytes").sum()))
        copies = copies.join(out_bytes, on=["worker", "step", "exec_idx"], how="left")
        steps = a.step_times.height or 1
        per_kind = (copies.group_by("kind")
                    .agg(us=pl.col("op_end_rel_ns").sum() / 1000 / steps,
                         count=pl.len() / steps, bytes=pl.col("bytes").fill_null(0).sum() / steps)
                    .sort(["us", "kind"], descending=[True, False]))
        us = float(per_kind["us"].sum())
        # Share per step, then the median over steps: robust to a warm-up or straggler step.
        share = num(
            copies.group_by("worker", "step").agg(ns=pl.col("op_end_rel_ns").sum())
            .join(a.step_times, on=["worker", "step"], how="right")
            .select((pl.col("ns").fill_null(0) / pl.col("duration_ns")).median()).item())
        if share < INFO_SHARE:
            return
        total_bytes = float(per_kind["bytes"].sum())
        kinds = ", ".join(f"{r['kind']} {fmt_us(r['us'])}" for r in per_kind.iter_rows(named=True))
        yield self.finding(
            f"copies and transfers take {fmt_us(us)} per step ({pct(share)} of a median step): "
            f"{kinds}" + (f"; {fmt_bytes(total_bytes)} per step" if total_bytes else ""),
            severity=Severity.WARNING if share >= WARNING_SHARE else Severity.INFO,
            where={"op": per_kind["kind"][0]},
            evidence={"per_kind": per_kind.to_dicts(), "share": round(share, 4),
                      "top": copies.group_by("node_name").agg(
                          us=pl.col("op_end_rel_ns").sum() / 1000 / steps)
                      .sort(["us", "node_name"], descending=[True, False]).head(8)
                      .to_dicts()},
            suggestion="Keep the step on the device: check op placement, feed through "
                       "tf.data with prefetch to the device, fetch fewer tensors per step.",
            impact=share,
        )
