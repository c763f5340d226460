"""RL104 nhwc-on-gpu."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from ..analyzer.units import fmt_us
from .base import Analysis, Checker, Finding, Severity, num, pct, register

LAYOUT_OPS = r"^(Conv2D|Conv2DBackprop(Input|Filter)|Conv3D.*|DepthwiseConv2dNative.*|MaxPool.*" \
             r"|AvgPool.*|FusedBatchNorm.*|BiasAdd.*)$"
# TensorFlow's layout optimizer inserts these around NHWC convolutions on GPU.
LAYOUT_TRANSPOSE = r"(?i)(NHWCToNCHW|NCHWToNHWC).*LayoutOptimizer|LayoutOptimizer.*Transpose"


@register
class NhwcOnGpu(Checker):
    """Convolution or pooling in NHWC layout placed on a GPU.

    Why: cuDNN's fast convolution kernels (and Tensor Cores before mixed precision)
    prefer NCHW; with NHWC, TensorFlow either runs slower kernels or its layout optimizer
    wraps every conv in Transpose ops that copy the activation twice. How to fix: build
    the model with data_format="NCHW" (channels_first) on GPU, or use mixed precision
    where NHWC is native.
    """

    code = "RL104"
    name = "nhwc-on-gpu"
    title = "NHWC convolutions on GPU"
    # The data formats come from graph.pb; the layout optimizer's transposes from the
    # executions' names alone, so it runs without a graph (the lacks line says so).
    severity = Severity.WARNING

    def check(self, a: Analysis) -> Iterable[Finding]:
        on_gpu = pl.col("device").str.contains("gpu")
        formats = a.run.graph_nodes.filter(pl.col("data_format").is_not_null()).select(
            "worker", "name", "data_format").unique(subset=["worker", "name"], keep="first",
                                                    maintain_order=True)
        nhwc = (
            a.nodes.filter(on_gpu.fill_null(False) & pl.col("kernel").str.contains(LAYOUT_OPS))
            .join(formats, on=["worker", "name"])
            .filter(pl.col("data_format").str.starts_with("NHWC")
                    | pl.col("data_format").str.starts_with("NDHWC"))
            .sort(["micros", "name"], descending=[True, False])  # the same order every run
        )
        if nhwc.height:
            us = float(nhwc["micros"].sum())
            yield self.finding(
                f"{nhwc.height} convolution/pooling ops run on GPU in NHWC layout "
                f"({fmt_us(us)} per step, {pct(a.per_worker_step(us))} of the step)",
                where={"device": nhwc["device"][0], "op": nhwc["kernel"][0]},
                evidence={"ops": nhwc.head(10).select("name", "kernel", "data_format", "micros")
                          .to_dicts()},
                suggestion='Use data_format="NCHW" (channels_first) for GPU convolutions.',
                impact=a.per_worker_step(us),
            )
        transposes = a.run.nodes.filter(
            pl.col("node_name").str.contains(LAYOUT_TRANSPOSE)
            & pl.col("device").str.contains("gpu"))
        if transposes.height:
            per_step = transposes.group_by("step").agg(
                pl.col("op_end_rel_ns").sum() / 1000).sort("step")["op_end_rel_ns"].mean()
            us = num(per_step)
            names = transposes["node_name"].unique().sort()
            yield self.finding(
                f"TensorFlow's layout optimizer transposes NHWC activations to NCHW and back "
                f"around GPU convolutions: {names.len()} transpose ops, {fmt_us(us)} per step "
                f"({pct(a.per_worker_step(us))} of the step)",
                where={"device": transposes["device"][0]},
                evidence={"transposes": names.head(10).to_list(), "micros_per_step": us},
                suggestion='Build the model in NCHW (data_format="channels_first") so no '
                           "transposes are needed.",
                impact=a.per_worker_step(us),
            )
