"""RL103 unfused-batch-norm."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from ..analyzer.units import fmt_us
from .base import Analysis, Checker, Finding, Severity, pct, register

BN_SCOPE = r"(?i)(^|/)(batch_?norm[^/]*)(/|$)"
FIX = ("Use the fused kernel: tf.compat.v1.nn.fused_batch_norm(x, scale, offset, "
       "is_training=True) (TF 1.x and 2.x). Keras 3's BatchNormalization (TF 2.16+) is "
       "not fused; with Keras 2 (TF <= 2.15 or tf_keras) use its BatchNormalization"
       "(fused=True).")
PRIMITIVES = ["Mean", "SquaredDifference", "Rsqrt", "Mul", "Sub", "AddV2", "Add", "Square",
              "Variance", "StopGradient", "Reciprocal", "Sqrt"]


@register
class UnfusedBatchNorm(Checker):
    """Batch normalization built from primitive ops (moments, rsqrt, mul under a
    BatchNorm / batch_norm scope) while no FusedBatchNorm op runs.

    Why: the primitive version launches a dozen small ops forward and more backward, each
    reading and writing the whole activation; the fused kernel does it in one or two
    passes and is several times faster, on GPU and CPU. How to fix: call the fused kernel,
    `tf.compat.v1.nn.fused_batch_norm(x, scale, offset, is_training=True)` (the same call
    in TF 1.x and 2.x, graph mode and tf.function). Keras 3's BatchNormalization layer
    (the Keras of TF 2.16 and later) is itself built from primitive ops, and the compat.v1
    layers API is not available under Keras 3; with Keras 2 (TF 2.15 or older, or the
    tf_keras package) the layer's `fused=True` uses the fused kernel.
    tests/test_advisor_fixes.py checks these claims.
    """

    code = "RL103"
    name = "unfused-batch-norm"
    title = "Batch norm built from primitive ops"
    severity = Severity.WARNING

    def check(self, a: Analysis) -> Iterable[Finding]:
        nodes = a.nodes
        if nodes.filter(pl.col("kernel").str.contains("FusedBatchNorm")
                        & pl.col("executed")).height:
            return
        scoped = nodes.filter(pl.col("executed")).with_columns(
            scope=pl.col("name").str.extract(r"(?i)^(.*?batch_?norm[^/]*)(?:/|$)", 1))
        bn = scoped.filter(pl.col("scope").is_not_null())
        # Gradient ops of a BatchNorm scope count toward it ("gradients/<scope>_grad/...").
        per_scope = (
            bn.with_columns(scope=pl.col("scope").str.replace(r"^.*?gradients/", ""))
            .group_by("scope")
            .agg(micros=pl.col("micros").sum(), ops=pl.len(),
                 types=pl.col("kernel").unique().sort(),
                 primitives=pl.col("kernel").is_in(PRIMITIVES).sum())
            .filter(pl.col("primitives") >= 3)
            .sort(["micros", "scope"], descending=[True, False])
        )
        for r in per_scope.iter_rows(named=True):
            share = a.per_worker_step(r["micros"])
            yield self.finding(
                f"batch norm in {r['scope']} runs as {r['ops']} primitive ops "
                f"({fmt_us(r['micros'])} per step, {pct(share)} of the step, forward and "
                "backward); no FusedBatchNorm runs",
                where={"scope": r["scope"]},
                evidence={"micros_per_step": r["micros"], "ops": r["ops"],
                          "kernels": r["types"]},
                suggestion=FIX,
                impact=share,
            )
