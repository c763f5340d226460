"""RL110 memory-peak and RL111 memory-growth."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from ..analyzer.analysis.stepmemory import step_rise_peaks
from ..analyzer.model import Run
from ..analyzer.units import fmt_bytes
from .base import Analysis, Checker, Finding, Severity, num, register

MIN_GROWTH = 0.10  # residual bytes must grow by this share over the run
MIN_STEPS = 4


@register
class MemoryPeak(Checker):
    """Peak memory per device and allocator, and the largest temporary allocations.

    Why: the peak decides whether a bigger batch or model fits; large temporaries
    (workspace of convolutions, intermediate activations) are what to cut first.
    How to fix: the listed ops are the levers: smaller intermediates, recomputation
    (gradient checkpointing), mixed precision, smaller batch.
    """

    code = "RL110"
    name = "memory-peak"
    title = "Peak memory"
    needs = frozenset({"memory"})
    severity = Severity.INFO

    def skip_reason(self, run: Run) -> str | None:
        """Runs without per-op memory (XSpace profiles) are checked on their allocator
        records when they have some: the report draws those, advise says the same."""
        if "memory" in run.lacks and "allocations" not in run.lacks \
                and run.allocations.height:
            return None
        return super().skip_reason(run)

    def check(self, a: Analysis) -> Iterable[Finding]:
        if "memory" in a.run.lacks:
            yield from self._from_allocations(a)
            return
        mem = a.run.memory.join(
            a.run.nodes.select("worker", "step", "exec_idx", "device"),
            on=["worker", "step", "exec_idx"])
        if mem.height == 0 or mem["allocator_bytes_in_use"].max() in (None, 0):
            return
        peaks = (mem.group_by("worker", "device", "allocator_name")
                 .agg(peak=pl.col("allocator_bytes_in_use").max(),
                      peak_step=pl.col("step").filter(pl.col("allocator_bytes_in_use") ==
                                                      pl.col("allocator_bytes_in_use").max())
                      .min())
                 .filter(pl.col("peak") > 0))
        rise = step_rise_peaks(a.run).select(
            "worker", "allocator_name", in_step_peak="peak", in_step_peak_step="peak_step")
        peaks = (peaks.join(rise, on=["worker", "allocator_name"], how="left")
                 .sort(["peak", "worker", "device", "allocator_name"],
                       descending=[True, False, False, False]))
        temps = (a.nodes.filter(pl.col("peak_bytes") > 0)
                 .sort(["peak_bytes", "name"], descending=[True, False]).head(5)
                 .select("name", "kernel", "peak_bytes", "requested_bytes"))
        top = peaks.row(0, named=True)
        rise_text = "" if top["in_step_peak"] is None else (
            f"; allocated within a step, above what was in use when it began: at most "
            f"{fmt_bytes(top['in_step_peak'])} (step {top['in_step_peak_step']}, the "
            "allocation records, as the report and timeline draw them)")
        yield self.finding(
            f"peak memory in use {fmt_bytes(top['peak'])} in allocator {top['allocator_name']}"
            f" on {top['device']} (step {top['peak_step']}, the allocator's bytes in use as "
            f"ops recorded them){rise_text}; largest allocator of {peaks.height}",
            where={"worker": top["worker"], "device": top["device"],
                   "step": top["peak_step"]},
            evidence={"allocators": peaks.to_dicts(), "largest_ops": temps.to_dicts()},
            suggestion="Shrink the largest ops' outputs and temporaries; consider mixed "
                       "precision or gradient checkpointing if the peak limits the batch.",
        )

    def _from_allocations(self, a: Analysis) -> Iterable[Finding]:
        """Peak bytes allocated within a step, per allocator: the running sum of its
        allocation records (+ allocated, - freed) from the step's start, as the report's
        memory chart and the timeline's counters draw them (analysis.stepmemory)."""
        peaks = (step_rise_peaks(a.run).filter(pl.col("peak") > 0)
                 .sort(["peak", "worker", "allocator_name"], descending=[True, False, False]))
        if not peaks.height:
            return
        top = peaks.row(0, named=True)
        yield self.finding(
            f"peak memory allocated within a step {fmt_bytes(top['peak'])} in allocator "
            f"{top['allocator_name']} (step {top['peak_step']}), above what was in use when "
            f"the step began (allocator records: the profile has no per-op memory); "
            f"largest allocator of {peaks.height}",
            where={"worker": top["worker"], "step": top["peak_step"]},
            evidence={"allocators": peaks.to_dicts()},
            suggestion="Shrink the step's largest temporaries (activations kept for the "
                       "backward pass, workspaces); consider mixed precision or gradient "
                       "checkpointing (jax.checkpoint) if the peak limits the batch.",
        )


@register
class MemoryGrowth(Checker):
    """Residual memory (bytes still allocated after ops ran, and allocator bytes in use)
    that grows from step to step.

    Why: memory that grows every step is a leak: training will run out of memory after
    enough steps, or slow down as the allocator fragments. Common causes: a variable or
    queue that grows every step (tf.concat onto state, enqueue without dequeue), ops
    added to the graph inside the loop. How to fix: find the growing node below and make
    its state bounded.
    """

    code = "RL111"
    name = "memory-growth"
    title = "Memory growing across steps"
    needs = frozenset({"memory"})
    severity = Severity.WARNING

    def check(self, a: Analysis) -> Iterable[Finding]:
        n = a.run.nodes.filter(pl.col("lane_kind") == "device")
        per_step = (n.group_by("worker", "step")
                    .agg(residual=(pl.col("mem_live_bytes") + pl.col("persistent_bytes")).sum())
                    .sort("worker", "step"))
        for (worker,), t in per_step.group_by("worker", maintain_order=True):
            if t.height < MIN_STEPS or t["residual"].max() in (None, 0):
                continue
            first, last = int(t["residual"][0]), int(t["residual"][-1])
            rising = num((t["residual"].diff().drop_nulls() > 0).mean())
            growth = (last - first) / first if first else float(last > 0)
            if growth < MIN_GROWTH or rising < 0.75:
                continue
            nodes = (n.filter(pl.col("worker") == worker)
                     .group_by("node_name").agg(
                         first=(pl.col("mem_live_bytes") + pl.col("persistent_bytes"))
                         .sort_by("step").first(),
                         last=(pl.col("mem_live_bytes") + pl.col("persistent_bytes"))
                         .sort_by("step").last())
                     .with_columns(grew=pl.col("last") - pl.col("first"))
                     .filter(pl.col("grew") > 0)
                     .sort(["grew", "node_name"], descending=[True, False]).head(5))
            per_step_growth = (last - first) / (t.height - 1)
            culprit = nodes["node_name"][0] if nodes.height else None
            yield self.finding(
                f"residual memory on {worker} grows in {100 * rising:.0f}% of steps, "
                f"from {fmt_bytes(first)} to {fmt_bytes(last)} over {t.height} steps "
                f"(+{fmt_bytes(per_step_growth)} per step)"
                + (f"; most from {culprit}" if culprit else ""),
                where={"worker": worker, "op": culprit},
                evidence={"per_step": t.to_dicts(), "growth": round(growth, 4),
                          "growing_nodes": nodes.to_dicts()},
                suggestion="Make the growing state bounded (no tf.concat onto a variable or "
                           "enqueue without dequeue each step); check nothing adds ops "
                           "inside the training loop.",
                impact=0.0,
            )
