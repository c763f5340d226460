"""RL114 fp32-matmul."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from ..analyzer.units import fmt_us
from .base import Analysis, Checker, Finding, Severity, num, pct, register

INFO_SHARE = 0.10  # 32-bit matmul/conv time as a share of the step
WARNING_SHARE = 0.25
# Library matmul/convolution kernels (cuBLAS, cuDNN, CUTLASS, XLA's Triton gemm fusions);
# cuDNN's convertTensor (a layout change) is not one.
_MATMUL = r"(?i)gemm|conv|fprop|dgrad|wgrad|xmma|cutlass|matmul"
_NOT_MATMUL = r"(?i)convertTensor|convert_"
# The precision the kernel's name says (CUDA library naming): 16 bits or fewer; TF32 on
# tensor cores (sm90 xmma `f32f32_tf32f32`, CUTLASS `s1688gemm`); plain FP32.
_LOW = r"(?i)bf16|f16|fp16|half|h884|h1688|h16816|s16816|hgemm|e4m3|e5m2|fp8|int8|i8i8"
_TF32 = r"(?i)tf32|s1688gemm"
_FP32 = r"(?i)f32|sgemm|<float|float,|scudnn|_s\d*gemm"
# A tensor-core GPU's library kernels (Volta and later).
_TENSOR_CORES = r"(?i)sm(7[05]|8\d|9\d|1\d\d)_|tensorop|xmma|hmma|wgmma|tensor16x8"


def _precision(name: pl.Expr) -> pl.Expr:
    return (pl.when(name.str.contains(_LOW)).then(pl.lit("16-bit or less"))
            .when(name.str.contains(_TF32)).then(pl.lit("tf32"))
            .when(name.str.contains(_FP32)).then(pl.lit("fp32"))
            .otherwise(pl.lit("unknown")))


@register
class Fp32Matmul(Checker):
    """Matrix products and convolutions on a tensor-core GPU run in 32-bit floats (FP32,
    or TF32 on tensor cores), by the precision their library kernels' names state
    (cuBLAS/cuDNN/CUTLASS: `f32f32_tf32f32`, `s1688gemm`, `sgemm`, `h884`, `bf16`, ...).
    XLA's own gemm fusions (`gemm_fusion_dot_N`) name no precision: they are counted as
    unknown until kernels are attributed to their HLO instruction.

    Why: tensor cores run 16-bit (bf16, fp16) matmuls at twice TF32's rate and about 16
    times FP32's without tensor cores, and 16-bit activations halve memory traffic; a
    model trained in float32 leaves most of an H100's compute unused (xprof's overview
    says "0.0% of device computation is 16 bit"). How to fix: compute in bfloat16 with
    float32 master weights: in JAX cast parameters and inputs to `jnp.bfloat16` inside
    the step (or a mixed-precision policy such as jmp's); in TF2
    `tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")`. Check the loss still
    converges.
    """

    code = "RL114"
    name = "fp32-matmul"
    title = "32-bit matmuls and convolutions on a tensor-core GPU"
    severity = Severity.WARNING
    severity_note = (f"info when they take less than {WARNING_SHARE:.0%} of the step; none "
                     f"below {INFO_SHARE:.0%}")

    def check(self, a: Analysis) -> Iterable[Finding]:
        k = a.run.nodes.filter(pl.col("lane_kind").is_in(["stream_all", "stream"])
                               & (pl.col("all_start_us") > 0))
        if k.height == 0:
            return
        # The kernel's full name: XSpace keeps it in stat_name (`node:kernel`), TF's
        # timelines in the label (`node = Op(...)@@kernel#...`).
        name = pl.concat_str(pl.col("stat_name"), pl.lit(" "),
                             pl.col("timeline_label").fill_null(""))
        # Named by the kernel's own name (cut to 70 characters) where the profile keeps it.
        short = pl.coalesce(pl.col("stat_name").str.splitn(":", 2).struct.field("field_1"),
                            pl.col("kernel")).str.head(70)
        k = k.with_columns(full=name, kernel_name=short)
        for (worker, device), d in k.group_by("worker", "device", maintain_order=True):
            if not d["full"].str.contains(_TENSOR_CORES).any():
                continue  # no sign of a tensor-core GPU
            mm = d.filter(pl.col("full").str.contains(_MATMUL)
                          & ~pl.col("full").str.contains(_NOT_MATMUL))
            if mm.height == 0:
                continue
            finding = self._finding(a, str(worker), str(device), mm)
            if finding is not None:
                yield finding

    def _finding(self, a: Analysis, worker: str, device: str, mm: pl.DataFrame
                 ) -> Finding | None:
        us = pl.col("op_end_rel_ns").sum() / 1000.0 / max(a.step_times.height, 1)
        per = (mm.with_columns(precision=_precision(pl.col("full")))
               .group_by("precision").agg(us=us, kernels=pl.col("kernel").n_unique())
               .sort(["us", "precision"], descending=[True, False]))
        by = {r["precision"]: r["us"] for r in per.iter_rows(named=True)}
        bits32 = by.get("tf32", 0.0) + by.get("fp32", 0.0)
        total = num(per["us"].sum())
        share = a.per_step(bits32)
        if share < INFO_SHARE:
            return None
        known = total - by.get("unknown", 0.0)
        low = by.get("16-bit or less", 0.0)
        top = (mm.with_columns(precision=_precision(pl.col("full")))
               .filter(pl.col("precision").is_in(["tf32", "fp32"]))
               .group_by("kernel_name", "precision").agg(us=us)
               .sort(["us", "kernel_name"], descending=[True, False]).head(5))
        return self.finding(
            f"{device}: matmul and convolution kernels take {fmt_us(total)} per step; "
            f"{fmt_us(bits32)} of it ({pct(share)} of the step) in 32-bit floats (TF32 "
            f"{fmt_us(by.get('tf32', 0.0))}, FP32 {fmt_us(by.get('fp32', 0.0))}), "
            f"{pct(low / known if known else 0.0)} of those whose kernel names a precision "
            "in 16 bits or less",
            severity=Severity.WARNING if share >= WARNING_SHARE else Severity.INFO,
            where={"worker": worker, "device": device},
            evidence={"per_precision_us": per.to_dicts(),
                      "share_16bit_or_less": round(low / known, 4) if known else 0.0,
                      "top_32bit_kernels": top.to_dicts()},
            suggestion="Compute in bfloat16 with float32 master weights: in JAX cast "
                       "params and inputs to jnp.bfloat16 inside the step; in TF2 "
                       "tf.keras.mixed_precision.set_global_policy('mixed_bfloat16').",
            impact=share,
        )
