"""RL112 small-ops-overhead."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from ..analyzer.units import fmt_us
from .base import Analysis, Checker, Finding, Severity, num, pct, register
from .host_device_copies import is_copy
from .intervals import gaps, merged_busy

TINY_US = 10.0  # an op this short is mostly scheduling overhead
MIN_EXECUTIONS = 300  # per step
WARNING_SHARE = 0.5  # of the step spent in tiny ops
MIN_KERNELS = 100  # accelerator kernels per step before launch overhead is worth a word


@register
class SmallOpsOverhead(Checker):
    """Many ops per step so short that per-op overhead (scheduling, launch, allocation)
    dominates: the count of tiny executions and the median op time.

    On an accelerator: many kernels per step with a median under 10us, and the device's
    idle gaps between them (launch-bound when the gaps add up to as much as the tiny
    kernels' own time).

    Why: each op costs a few microseconds of executor work (and a kernel launch on GPU)
    whatever its size; a step made of thousands of tiny ops is bound by that overhead,
    not by math. Typical sources: Python-level loops unrolled into the graph, while
    loops over small tensors, element-wise chains. How to fix: let XLA fuse them
    (TF2: `tf.function(jit_compile=True)`; TF1 graphs: `tf.config.optimizer.set_jit(True)`
    or `TF_XLA_FLAGS=--tf_xla_auto_jit=2`), vectorize
    loops (tf.vectorized_map, batch matmuls), or use fused ops (e.g. cuDNN RNNs).
    """

    code = "RL112"
    name = "small-ops-overhead"
    title = "Many tiny ops"
    severity = Severity.INFO
    severity_note = f"warning when tiny ops take {WARNING_SHARE:.0%} of the step or more"

    def check(self, a: Analysis) -> Iterable[Finding]:
        yield from self._host(a)
        yield from self._kernels(a)

    def _kernels(self, a: Analysis) -> Iterable[Finding]:
        """Tiny kernels on each accelerator, and the idle gaps between kernels."""
        k = a.run.nodes.filter((pl.col("lane_kind") == "stream_all")
                               & (pl.col("all_start_us") > 0) & ~is_copy())
        if k.height == 0:
            return
        us = pl.col("op_end_rel_ns") / 1000.0
        by = ["worker", "device", "step"]
        iv = k.select(*by, "start_ns", end_ns=pl.col("start_ns") + pl.col("op_end_rel_ns"))
        between = (gaps(merged_busy(iv, by), by).group_by(by)
                   .agg(gap_us=pl.col("gap_ns").sum() / 1000, gaps=pl.len()))
        per_step = (k.group_by(by).agg(kernels=pl.len(), tiny=(us < TINY_US).sum(),
                                       tiny_us=us.filter(us < TINY_US).sum(),
                                       median_us=us.median())
                    .join(between, on=by, how="left").fill_null(0)
                    .sort(by))  # means over steps in a stable order: the same bytes every run
        for (worker, device), t in per_step.group_by("worker", "device", maintain_order=True):
            n, median = num(t["kernels"].mean()), num(t["median_us"].median())
            if n < MIN_KERNELS or median >= TINY_US:
                continue
            tiny, tiny_us, gap_us = (num(t[c].mean()) for c in ("tiny", "tiny_us", "gap_us"))
            launch_bound = gap_us >= tiny_us
            share = a.per_step(tiny_us + (gap_us if launch_bound else 0.0))
            top = (k.filter((pl.col("device") == device) & (us < TINY_US))
                   .group_by("kernel").agg(n=pl.len())
                   .sort(["n", "kernel"], descending=[True, False]).head(5))
            yield self.finding(
                f"{device}: {n:.0f} kernels per step with a median of "
                f"{fmt_us(round(median, 1))}; {tiny:.0f} under {TINY_US:.0f}us take "
                f"{fmt_us(tiny_us)} per step, and the device idles {fmt_us(gap_us)} per "
                "step between kernels"
                + (" (launch-bound: the gaps cost as much as the tiny kernels)"
                   if launch_bound else ""),
                severity=Severity.WARNING if launch_bound and share >= 0.2 else Severity.INFO,
                where={"worker": worker, "device": device},
                evidence={"kernels_per_step": round(n, 1), "tiny_per_step": round(tiny, 1),
                          "median_kernel_us": round(median, 2),
                          "tiny_us_per_step": round(tiny_us, 1),
                          "gap_us_per_step": round(gap_us, 1),
                          "tiny_kernels": {r["kernel"]: round(r["n"] / t.height, 1)
                                           for r in top.iter_rows(named=True)}},
                suggestion="Fewer, larger kernels: a larger batch, several steps per "
                           "jitted call (jax.lax.scan), no Python loops over small arrays "
                           "inside the step; keep XLA's command buffers (CUDA graphs) on, "
                           "which launch a step's kernels at once.",
                impact=share,
            )

    def _host(self, a: Analysis) -> Iterable[Finding]:
        execs = a.run.nodes.filter(pl.col("lane_kind").is_in(["device", "other"])
                                   & (pl.col("all_start_us") > 0))
        if execs.height == 0:
            return
        us = pl.col("op_end_rel_ns") / 1000.0
        per_step = execs.group_by("worker", "step").agg(
            executions=pl.len(), tiny=(us < TINY_US).sum(), tiny_us=us.filter(us < TINY_US).sum(),
            median_us=us.median()).sort("worker", "step")
        n = num(per_step["executions"].mean())
        if n < MIN_EXECUTIONS:
            return
        tiny = num(per_step["tiny"].mean())
        tiny_us = num(per_step["tiny_us"].mean())
        median = num(per_step["median_us"].median())
        share = a.per_step(tiny_us)
        if median >= TINY_US:
            return
        top = (execs.filter(us < TINY_US).group_by("kernel").agg(n=pl.len())
               .sort(["n", "kernel"], descending=[True, False]).head(5))
        yield self.finding(
            f"{n:.0f} op executions per step with a median of {fmt_us(round(median, 1))}; "
            f"{tiny:.0f} of them are under {TINY_US:.0f}us ({pct(share)} of the step in ops "
            "that are mostly overhead)",
            severity=Severity.WARNING if share >= WARNING_SHARE else Severity.INFO,
            evidence={"executions_per_step": round(n, 1), "tiny_per_step": round(tiny, 1),
                      "median_op_us": round(median, 2), "tiny_us_per_step": round(tiny_us, 1),
                      "tiny_kernels": {r["kernel"]: round(r["n"] / per_step.height, 1)
                                        for r in top.iter_rows(named=True)}},
            suggestion="Fuse them with XLA: tf.function(jit_compile=True) in TF2, "
                       "tf.config.optimizer.set_jit(True) or TF_XLA_FLAGS=--tf_xla_auto_jit=2 "
                       "for TF1 graphs; vectorize loops (tf.vectorized_map, batched "
                       "matmuls); prefer fused ops.",
            impact=share,
        )
