"""RL103 unfused-batch-norm."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from checkers.base import Analysis, Checker, Finding, Severity, pct, register

BN_SCOPE = r"(?i)(^|/)(batch_?norm[^/]*)(/|$)"
PRIMITIVES = ["Mean", "SquaredDifference", "Rsqrt", "Mul", "Sub", "AddV2", "Add", "Square",
              "Variance", "StopGradient", "Reciprocal", "Sqrt"]


@register
class UnfusedBatchNorm(Checker):
    """Batch normalization built from primitive ops (moments, rsqrt, mul under a
    BatchNorm / batch_norm scope) while no FusedBatchNorm op runs.

    Why: the primitive version launches a dozen small ops forward and more backward, each
    reading and writing the whole activation; the fused kernel does it in one or two
    passes and is several times faster, on GPU and CPU. How to fix: use
    `tf.compat.v1.layers.batch_normalization(..., fused=True)`,
    `tf.keras.layers.BatchNormalization` (fused by default) or `tf.nn.fused_batch_norm`.
    """

    code = "RL103"
    name = "unfused-batch-norm"
    title = "Batch norm built from primitive ops"
    severity = Severity.WARNING

    def check(self, a: Analysis) -> Iterable[Finding]:
        nodes = a.nodes
        if nodes.filter(pl.col("op_type").str.starts_with("FusedBatchNorm")
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
                 types=pl.col("op_type").unique().sort(),
                 primitives=pl.col("op_type").is_in(PRIMITIVES).sum())
            .filter(pl.col("primitives") >= 3)
            .sort(["micros", "scope"], descending=[True, False])
        )
        for r in per_scope.iter_rows(named=True):
            share = a.per_step(r["micros"])
            yield self.finding(
                f"batch norm in {r['scope']} runs as {r['ops']} primitive ops "
                f"({r['micros']:.0f}us per step, {pct(share)} of the step, forward and "
                "backward); no FusedBatchNorm runs",
                where={"scope": r["scope"]},
                evidence={"micros_per_step": r["micros"], "ops": r["ops"],
                          "op_types": r["types"]},
                suggestion="Use a fused batch norm: tf.compat.v1.layers.batch_normalization"
                           "(fused=True), tf.keras.layers.BatchNormalization, or "
                           "tf.nn.fused_batch_norm.",
                impact=share,
            )
