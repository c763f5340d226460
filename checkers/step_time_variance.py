"""RL109 step-time-variance."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from ..analyzer.analysis.steps import median_step_us
from ..analyzer.units import fmt_us
from .base import Analysis, Checker, Finding, Severity, num, pct, register

Z_OUTLIER = 3.5  # Iglewicz and Hoaglin's cut-off for the modified z-score
MIN_RATIO = 1.5  # and a straggler is at least this much slower than the median step
WARNING_LOST = 0.10  # a warning when stragglers cost this share of the run's time
MIN_STEPS = 5
CV_STEPS = 10
CV_UNSTABLE = 0.30


def modified_z(values: pl.Expr) -> pl.Expr:
    """0.6745 (x - median) / MAD, the robust z-score XProf uses for straggler hosts."""
    median = values.median()
    mad = (values - median).abs().median()
    return pl.when(mad > 0).then(0.6745 * (values - median) / mad).otherwise(0.0)


@register
class StepTimeVariance(Checker):
    """Unstable step times: straggler steps (or workers) far slower than the rest, by
    modified z-score (median and MAD, robust to the outliers themselves).

    Why: a few slow steps (a stall reading data, garbage collection, checkpointing, a
    noisy neighbour) cost wall time without showing in averages, and in synchronous
    multi-worker training the slowest worker sets the pace for all. Warm-up steps at the
    start of a run (analyzer.analysis.warmup's rule) are slow by nature and not counted.
    How to fix: look at what the straggler steps do differently (`analyze timeline RUN
    --step N`); for data stalls, prefetch; for a slow worker, check its host.
    """

    code = "RL109"
    name = "step-time-variance"
    title = "Straggler steps and unstable step times"
    severity = Severity.WARNING
    severity_note = f"info when stragglers cost less than {WARNING_LOST:.0%} of the run's time"

    def check(self, a: Analysis) -> Iterable[Finding]:
        times = a.checked_step_times  # warm-up steps are not stragglers
        if (a.step_times["kind"] == "dispatch").any():
            return  # markers that cover only the dispatch time no step (xplane_async)
        for (worker,), t in times.group_by("worker", maintain_order=True):
            if t.height < MIN_STEPS:
                continue
            t = t.with_columns(z=modified_z(pl.col("us")))
            # The median step the header and summary print (outliers left out), said once.
            analysed = a.step_times.filter(pl.col("worker") == worker).height
            median = median_step_us(a.run, worker) or num(t["us"].median())
            slow = t.filter((pl.col("z") > Z_OUTLIER) & (pl.col("us") >= MIN_RATIO * median)
                            ).sort(["us", "step"], descending=[True, False])
            cv = num(t["us"].std()) / (num(t["us"].mean()) or 1.0)
            if slow.height:
                lost = float((slow["us"] - median).sum())
                total = float(t["us"].sum())
                lost_share = lost / total if total else 0.0
                yield self.finding(
                    f"{slow.height} straggler step(s) on {worker}: step "
                    f"{slow['step'][0]} took {fmt_us(slow['us'][0])}, "
                    f"{slow['us'][0] / median:.1f}x the median step {fmt_us(median)} "
                    f"of the {analysed} analysed ({pct(lost_share)} of the run's time lost)",
                    severity=Severity.WARNING if lost_share >= WARNING_LOST else Severity.INFO,
                    where={"worker": worker, "step": int(slow["step"][0])},
                    evidence={"median_us": round(median, 1), "cv": round(cv, 3),
                              "stragglers": slow.select("step", "us", "z").to_dicts(),
                              "time_lost_us": round(lost, 1)},
                    suggestion="Compare a straggler with a median step "
                               f"(analyze timeline RUN --step {slow['step'][0]}).",
                    impact=lost_share,
                )
            elif cv >= CV_UNSTABLE and t.height >= CV_STEPS:
                yield self.finding(
                    f"step times on {worker} vary by {pct(cv)} (coefficient of variation) "
                    "without clear stragglers",
                    severity=Severity.INFO,
                    where={"worker": worker},
                    evidence={"median_us": round(median, 1), "cv": round(cv, 3)},
                    suggestion="Trace more steps; look for periodic work (summaries, "
                               "checkpoints) or contention on the host.",
                    impact=0.0,
                )
        yield from self._workers(a, times)

    def _workers(self, a: Analysis, times: pl.DataFrame) -> Iterable[Finding]:
        per_worker = times.group_by("worker").agg(median_us=pl.col("us").median()).sort(
            "worker")
        if per_worker.height < 3:
            return
        per_worker = per_worker.with_columns(z=modified_z(pl.col("median_us")))
        slow = per_worker.filter(pl.col("z") > Z_OUTLIER).sort(["median_us", "worker"],
                                                                 descending=[True, False])
        overall = num(per_worker["median_us"].median())
        for r in slow.iter_rows(named=True):
            yield self.finding(
                f"straggler worker {r['worker']}: median step {fmt_us(r['median_us'])} vs "
                f"{fmt_us(overall)} across workers",
                where={"worker": r["worker"]},
                evidence={"workers": per_worker.to_dicts()},
                suggestion="Check that worker's host: CPU contention, input pipeline, "
                           "network.",
                impact=(r["median_us"] - overall) / r["median_us"] if r["median_us"] else 0.0,
            )
