"""RL115 roofline."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import polars as pl

from ..analyzer.analysis.jaxscopes import fold_frame
from ..analyzer.units import device_label, fmt_us
from .base import Analysis, Checker, Finding, Severity, num, pct, register

# NVIDIA peak float ops per SM per clock cycle (FMA = 2), xprof's table
# (openxla/xprof hardware_type_utils.cc, GetNvidiaFlopCapsPerSMPerCycle): compute
# capability -> (FP32 on CUDA cores, TF32/FP32 on tensor cores, FP16/BF16 on tensor cores).
FLOPS_PER_SM_CYCLE = {
    (9, 0): (256, 2048, 4096), (8, 9): (256, 512, 1024), (8, 6): (256, 256, 1024),
    (8, 0): (128, 1024, 2048), (7, 5): (128, 0, 1024), (7, 0): (128, 0, 1024),
    (6, 1): (256, 0, 0), (6, 0): (128, 0, 256), (5, 0): (256, 0, 0), (3, 0): (384, 0, 0),
    (2, 0): (64, 0, 0),
}
FAR_BELOW = 0.10  # achieved / roof under this: far below both roofs
AT_MEMORY_ROOF = 0.50  # achieved bytes/s / peak from this: at the memory roof
INFO_SHARE = 0.10  # the named ops' share of the step for a finding
WARNING_SHARE = 0.25


def peaks(cap_major: int, cap_minor: int, clock_khz: int, cores: int
          ) -> tuple[float, float, float, str] | None:
    """(xprof's peak FLOP/s: the largest of the table's rates; TF32 tensor-core FLOP/s;
    FP32 CUDA-core FLOP/s; the table entry used). xprof takes the first entry at or
    above the device's compute capability (std::map::lower_bound); None above them all."""
    known = sorted(FLOPS_PER_SM_CYCLE)
    at = next((k for k in known if k >= (cap_major, cap_minor)), None)
    if at is None or not clock_khz or not cores:
        return None
    fp32, tf32, f16 = FLOPS_PER_SM_CYCLE[at]
    scale = clock_khz * 1e3 * cores
    return max(fp32, tf32, f16) * scale, tf32 * scale, fp32 * scale, f"{at[0]}.{at[1]}"


def op_work(a: Analysis, fold: bool = True) -> pl.DataFrame:
    """Per (worker, device, folded scope, direction): kernel time (ns), float ops and bytes
    (read + written) of the analysed steps, from the HLO's work per execution
    (`fold` False: per framework op, `node_name`)."""
    work = a.run.hlo_work.group_by("worker", "name").agg(
        execs=pl.col("execs").sum(), f=pl.col("float_ops").sum(),
        b=pl.when(pl.col("in_bytes").is_null().any() | pl.col("out_bytes").is_null().any())
        .then(None).otherwise(pl.col("in_bytes").sum() + pl.col("out_bytes").sum()))
    k = (a.run.nodes.filter((pl.col("lane_kind") == "stream_all") & (pl.col("all_start_us") > 0))
         .group_by("worker", "device", "node_name")
         .agg(ns=pl.col("op_end_rel_ns").sum(), n=pl.len()))
    per = k.join(work, left_on=["worker", "node_name"], right_on=["worker", "name"],
                 how="left").with_columns(
        flops=pl.col("f") / pl.col("execs") * pl.col("n"),
        bytes=pl.col("b") / pl.col("execs") * pl.col("n"))
    if not fold:
        return per.with_columns(known=pl.col("bytes").is_not_null())
    # Float sums in a stable order: the same run gives the same bytes (issue 31).
    per = fold_frame(per.sort("worker", "device", "node_name"), "node_name")
    return (per.group_by("worker", "device", "scope", "direction", maintain_order=True)
            .agg(pl.col("ns", "flops", "bytes").sum(),
                 known=pl.col("bytes").is_not_null().all()))


@register
class Roofline(Checker):
    """Time per op against the device's roofline, where the HLO gives the op's work (GPU
    profiles of XLA programs: float ops of its matrix products and convolutions, bytes
    its instructions read and write; docs/xplane.md "Work of HLO instructions"). Per
    framework op folded into the user's scope (forward and backward apart): arithmetic
    intensity (float ops per byte), achieved FLOP/s and bytes/s against the device's
    peaks, from the GPU plane (SMs x clock x xprof's float ops per SM per cycle for its
    compute capability; memory bandwidth as the driver reports it). The compute roof is
    xprof's: the device's largest rate (16-bit tensor cores; the finding gives the TF32
    and FP32 ones beside it). Elementwise float ops are not counted. Names the ops far
    below both roofs (under 10% of the roof at their intensity: latency- or launch-bound)
    and those at the memory roof (half the peak bandwidth or more at an intensity below
    the ridge: memory-bound).

    Why: an op far below both roofs is not limited by the hardware but by launches,
    synchronization or too little parallel work: a faster GPU will not help it. An op at
    the memory roof moves bytes as fast as the memory allows: only moving fewer bytes
    helps. How to fix: far below both roofs: fuse small ops, batch more work per kernel
    (a larger batch, fewer small convolutions), keep XLA's command buffers on to cut
    launch overhead; memory-bound: let XLA fuse elementwise ops into their producers (no
    host round trip between them), compute in bfloat16 to halve the bytes.
    """

    code = "RL115"
    name = "roofline"
    title = "Ops against the device's roofline"
    severity = Severity.INFO
    severity_note = (f"warning when the ops named take {WARNING_SHARE:.0%} of the step or "
                     f"more; none below {INFO_SHARE:.0%}")

    def check(self, a: Analysis) -> Iterable[Finding]:
        facts = a.run.device_facts
        if not a.run.hlo_work.height or not facts.height:
            return
        ops = op_work(a)
        steps = max(a.step_times.height, 1)
        for row in facts.iter_rows(named=True):
            got = peaks(row["compute_cap_major"] or 0, row["compute_cap_minor"] or 0,
                        row["clock_khz"] or 0, row["cores"] or 0)
            bw = row["memory_bandwidth"] or 0.0
            row["device"] = device_label(str(row["device"]))  # the Run's spelling
            mine = ops.filter((pl.col("worker") == row["worker"])
                              & (pl.col("device") == row["device"]))
            if got is None or bw <= 0 or not mine.height:
                continue
            finding = self._finding(a, row, got, bw, mine, steps)
            if finding is not None:
                yield finding

    def _judged(self, ops: pl.DataFrame, peak: float, bw: float) -> pl.DataFrame:
        s = pl.col("ns") / 1e9
        ai = pl.col("flops") / pl.col("bytes")
        roof = pl.min_horizontal(pl.lit(peak), ai * bw)
        judged = ops.filter(pl.col("known") & (pl.col("bytes") > 0) & (pl.col("ns") > 0)
                            ).with_columns(
            ai=ai, flop_s=pl.col("flops") / s, byte_s=pl.col("bytes") / s)
        judged = judged.with_columns(
            roof_share=pl.when(pl.col("flops") > 0).then(pl.col("flop_s") / roof)
            .otherwise(pl.col("byte_s") / bw),
            bandwidth_share=pl.col("byte_s") / bw, compute_share=pl.col("flop_s") / peak)
        return judged.with_columns(
            kind=pl.when((pl.col("ai") < peak / bw) & (pl.col("bandwidth_share") >= AT_MEMORY_ROOF))
            .then(pl.lit("memory-bound")).when(pl.col("roof_share") < FAR_BELOW)
            .then(pl.lit("far below both roofs")).otherwise(None))

    def _finding(self, a: Analysis, dev: dict[str, Any], got: tuple, bw: float,
                 ops: pl.DataFrame, steps: int) -> Finding | None:
        peak, tf32, fp32, entry = got
        judged = self._judged(ops, peak, bw)
        named = judged.filter(pl.col("kind").is_not_null()).sort(  # ties: by name
            ["ns", "scope", "direction"], descending=[True, False, False])
        us = num(named["ns"].sum()) / 1000.0 / steps
        share = a.per_step(us)
        if share < INFO_SHARE:
            return None
        label = pl.when(pl.col("direction") != "").then(
            pl.col("scope") + " (" + pl.col("direction") + ")").otherwise(pl.col("scope"))
        rows = named.with_columns(
            op=label, us_per_step=pl.col("ns") / 1000.0 / steps,
            flops_per_step=pl.col("flops") / steps, moved_per_step=pl.col("bytes") / steps
        ).select("op", "kind", "us_per_step", "flops_per_step", "moved_per_step", "ai",
                 "flop_s", "byte_s", "roof_share", "compute_share", "bandwidth_share")
        kinds = {k: a.per_step(num(named.filter(pl.col("kind") == k)["ns"].sum()) / 1000.0
                               / steps) for k in ("memory-bound", "far below both roofs")}
        words = "; ".join(
            f"{r['op']} {fmt_us(r['us_per_step'])}/step {r['kind']}: "
            f"{r['ai']:.1f} flop/B, {r['flop_s'] / 1e12:.1f} TFLOP/s, "
            f"{r['byte_s'] / 1e9:.0f} GB/s ({pct(r['bandwidth_share'])} of the memory "
            f"bandwidth, {pct(r['roof_share'])} of its roof)"
            for k in ("memory-bound", "far below both roofs")
            for r in rows.filter(pl.col("kind") == k).head(2).to_dicts())
        return self.finding(
            f"{dev['device']} ({dev['name'] or 'GPU'}): {named.height} op(s) taking "
            f"{fmt_us(us)} per step ({pct(share)} of the step) are far below both roofs "
            f"({pct(kinds['far below both roofs'])}) or at the memory roof "
            f"({pct(kinds['memory-bound'])}); peaks {peak / 1e12:.0f} TFLOP/s (16-bit "
            f"tensor cores, xprof's peak; TF32 {tf32 / 1e12:.0f}, FP32 CUDA cores "
            f"{fp32 / 1e12:.1f}), {bw / 1e9:.0f} GB/s, ridge {peak / bw:.0f} flop/B. "
            f"First: {words}",
            severity=Severity.WARNING if share >= WARNING_SHARE else Severity.INFO,
            where={"worker": dev["worker"], "device": dev["device"]},
            evidence={"peak_flop_s": peak, "tf32_flop_s": tf32, "fp32_flop_s": fp32,
                      "memory_byte_s": bw, "compute_capability_table": entry,
                      "ops": rows.to_dicts(), "judged_ops": judged.height},
            suggestion="Far below both roofs (latency/launch-bound): fuse small ops, give "
                       "each kernel more work (larger batch), keep XLA's command buffers "
                       "on. At the memory roof: move fewer bytes: let XLA fuse elementwise "
                       "ops, compute in bfloat16.",
            impact=share,
        )
