"""RL108 critical-path."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from ..analyzer.analysis.graph import no_dataflow
from ..analyzer.model import Run
from ..analyzer.units import fmt_us
from .base import Analysis, Checker, Finding, Severity, pct, register

TOP = 3
MIN_SHARE = 0.30  # the top ops must make up this much of the step to be worth a finding


@register
class CriticalPathOps(Checker):
    """The few ops that make up most of the critical path of the median step: the chain
    of dependent ops that ends the step last.

    Why: only ops on the critical path set the step time; speeding up anything else
    (or adding parallel work) does not help. How to fix: optimize or shrink these ops,
    or break the dependency chain so they overlap with other work.
    """

    code = "RL108"
    name = "critical-path"
    title = "Ops on the critical path"
    severity = Severity.INFO

    def skip_reason(self, run: Run) -> str | None:
        """Skipped without dataflow edges (a run converted from a timeline)."""
        reason = no_dataflow(run)
        return reason.removeprefix("needs ") if reason else super().skip_reason(run)

    def check(self, a: Analysis) -> Iterable[Finding]:
        step = a.median_step
        cp = a.critical_path(step)
        if cp.step_ns == 0 or cp.ops.height == 0:
            return
        per_op = (cp.ops.group_by("node_name", "op_type", "kernel")
                  .agg(busy_ns=pl.col("busy_ns").sum(), runs=pl.len())
                  .sort(["busy_ns", "node_name"], descending=[True, False]))
        top = per_op.head(TOP)
        share = float(top["busy_ns"].sum()) / cp.step_ns
        if share < MIN_SHARE:
            return
        names = ", ".join(f"{r['node_name']} ({r['kernel']}, {fmt_us(r['busy_ns'] / 1000)})"
                          for r in top.iter_rows(named=True))
        yield self.finding(
            f"{top.height} ops make up {pct(share)} of step {step} on its critical path: "
            f"{names}",
            where={"step": step, "op": top["node_name"][0]},
            evidence={"step": step, "path_ops": cp.ops.height,
                      "path_share": round(cp.share, 4), "step_us": cp.step_ns / 1000,
                      "top": [{"name": r["node_name"], "kernel": r["kernel"],
                               "op_type": r["op_type"],
                               "us": r["busy_ns"] / 1000, "runs": r["runs"]}
                              for r in top.iter_rows(named=True)]},
            suggestion="Speed up these ops or take them off the chain; see "
                       f"`analyze graph RUN --critical-path --step {step}`.",
            impact=share,
        )
