"""RL117 collective-wait."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from ..analyzer.analysis.collectives import per_device_step
from ..analyzer.units import fmt_us
from .base import Analysis, Checker, Finding, Severity, pct, register

SHARE_INFO = 0.10  # collectives' share of the step (medians per device)
WAIT_WARNING = 0.10  # the wait's share of the step


@register
class CollectiveWait(Checker):
    """Collectives (all-reduce, all-gather, NCCL kernels, TF collective ops; docs/views.md
    "Collectives") per device: their share of its worker's step (of the device's op time
    where that is longer: replicas summed on one device) and the part spent waiting for
    the other devices or workers to arrive (XLA:CPU's Rendezvous events; a TF
    collective's gap to the last worker). Medians over the steps, of the device's own
    executions, never of work summed over devices against one device's step.

    Why: the time a device waits in a collective is time its peers made it lose: a slower
    device, a late worker, unequal work per replica. The collective's own time (the
    transfer) grows with the bytes exchanged.
    How to fix: a large wait: find what made the last device late (analyze timeline:
    its work before the collective; unequal batches, input, host work); a large transfer:
    fewer or larger collectives (gradient bucketing), overlap them with the backward pass,
    lower-precision gradients.
    """

    code = "RL117"
    name = "collective-wait"
    title = "Time in collectives, and waiting for peers"
    severity = Severity.INFO
    severity_note = (f"info when collectives take {SHARE_INFO:.0%} of a device's step; "
                     f"warning when the wait alone takes {WAIT_WARNING:.0%}")

    def check(self, a: Analysis) -> Iterable[Finding]:
        comm = per_device_step(a.run)
        if not comm.height:
            return
        ops = (a.run.nodes_lazy().group_by("worker", "device", "step")
               .agg(op_us=pl.col("op_end_rel_ns").sum() / 1000.0).collect())
        steps = a.step_times.select("worker", "step", step_us=pl.col("duration_ns") / 1000.0)
        rows = (comm.join(ops, on=["worker", "device", "step"], how="left")
                .join(steps, on=["worker", "step"], how="left")
                .group_by("worker", "device")
                .agg(pl.col("collective_us", "collective_wait_us", "op_us", "step_us")
                     .median(), steps=pl.len())
                .sort("worker", "device"))
        several = rows.get_column("worker").n_unique() > 1
        for r in rows.iter_rows(named=True):
            # Against the step, or against the device's op time where that is longer
            # (replicas of one CPU device summed: docs/advisor.md).
            stake = max(r["step_us"] or 0.0, r["op_us"] or 0.0)
            if not stake:
                continue
            share, wait = r["collective_us"] / stake, r["collective_wait_us"] / stake
            if share < SHARE_INFO:
                continue
            of_comm = r["collective_wait_us"] / r["collective_us"] if r["collective_us"] else 0
            who = f"{r['worker']} {r['device']}" if several else r["device"]
            of = ("the step" if stake == r["step_us"]
                  else "its op time (longer than the step: work of parallel threads summed)")
            yield self.finding(
                f"{who}: collectives take {pct(share)} of {of} "
                f"({fmt_us(r['collective_us'])}), {pct(of_comm)} of that waiting for peers "
                f"({fmt_us(r['collective_wait_us'])})",
                severity=Severity.WARNING if wait >= WAIT_WARNING else Severity.INFO,
                where={"worker": r["worker"], "device": r["device"]},
                evidence={"collective_us": round(r["collective_us"], 1),
                          "collective_wait_us": round(r["collective_wait_us"], 1),
                          "op_us": round(r["op_us"] or 0.0, 1),
                          "step_us": round(r["step_us"] or 0.0, 1), "steps": r["steps"]},
                suggestion="A large wait: see what made the last device late (analyze "
                           "timeline); a large transfer: fewer, larger collectives "
                           "overlapped with the backward pass.",
                impact=wait,
            )
