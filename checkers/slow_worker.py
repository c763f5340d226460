"""RL116 slow-worker."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from ..analyzer.analysis import collectives
from ..analyzer.model import TIMED_LANES
from ..analyzer.units import fmt_us
from .base import Analysis, Checker, Finding, Severity, num, pct, register

WARNING_WAIT = 0.10  # a warning when the others wait this share of their step, or more
LAST_SHARE = 0.75  # and the same one reached them last in this share of the steps, or more
MIN_STEPS = 4
# and its own numbers explain at least this share of the wait (the cause's excess over
# its peers): two balanced workers also take turns arriving last by scheduling jitter
EXPLAINED = 0.5
UNIT = ["worker", "device"]


def collective_expr() -> pl.Expr:
    """Time in collectives, waits included: the collectives category's (one list of
    collective op types and kernels, analysis/collectives.py)."""
    return (collectives.category_expr(pl.col("op_type"), pl.col("kernel"))
            != collectives.COMPUTE).fill_null(False)


def per_unit_step(a: Analysis) -> pl.DataFrame:
    """Per (worker, device, step) of the devices that ran collectives: the step's time
    (the worker's step), time in collectives, host time from the step's start to the
    device's first op, op time outside collectives and its executions."""
    nodes = a.run.nodes.filter(pl.col("lane_kind").is_in(TIMED_LANES))
    coll = collective_expr()
    units = nodes.filter(coll).select(*UNIT).unique()
    steps = a.step_times.select("worker", "step", "start_ns", step_us=pl.col("duration_ns") / 1e3)
    us = pl.col("op_end_rel_ns") / 1e3
    return (nodes.join(units, on=UNIT).group_by(*UNIT, "step")
            .agg(collective_us=us.filter(coll).sum(), op_us=us.filter(~coll).sum(),
                 ops=(~coll).sum(), first_ns=pl.col("start_ns").min())
            .join(steps, on=["worker", "step"])
            .with_columns(before_us=((pl.col("first_ns") - pl.col("start_ns")) / 1e3).clip(0))
            .drop("first_ns", "start_ns").sort(*UNIT, "step"))


def last_per_step(per: pl.DataFrame) -> pl.DataFrame:
    """Per step, the unit that arrived last at the collectives (the one that waited
    least in them: its peers waited for it) and how long the others waited for it:
    their collective time beyond its own, as a share of their step."""
    shared = per.filter(pl.len().over("step") >= 2)
    ranked = shared.sort("step", "collective_us", *UNIT).with_columns(
        last=pl.int_range(pl.len()).over("step") == 0)
    slowest = ranked.filter("last").select(
        "step", slow_worker="worker", slow_device="device", slow_coll="collective_us")
    others = ranked.filter(~pl.col("last")).join(slowest, on="step").with_columns(
        wait_us=(pl.col("collective_us") - pl.col("slow_coll")).clip(0))
    return (others.group_by("step", "slow_worker", "slow_device")
            .agg(wait_us=pl.col("wait_us").mean(),
                 wait_share=(pl.col("wait_us") / pl.col("step_us")).mean(),
                 peers=pl.len())
            .sort("step"))


def causes(per: pl.DataFrame, last: pl.DataFrame, worker: str, device: str
           ) -> dict[str, float]:
    """What made the slow unit slow, median over the steps it was last, against the
    median of its peers in the same step: host time before its first op, op time
    outside collectives, executions."""
    steps = last.filter((pl.col("slow_worker") == worker) & (pl.col("slow_device") == device))
    per = per.filter(pl.col("step").is_in(steps["step"].implode()))
    mine = (pl.col("worker") == worker) & (pl.col("device") == device)
    cols = ["before_us", "op_us", "ops"]
    slow = per.filter(mine).select("step", *cols)
    peers = per.filter(~mine).group_by("step").agg(pl.col(c).median().alias(f"peer_{c}")
                                                   for c in cols)
    both = slow.join(peers, on="step")
    return {k: num(both[k].median()) for k in both.columns if k != "step"}


def slower_op(a: Analysis, worker: str, device: str, steps: list[int]) -> tuple[str, float]:
    """The op (outside collectives) whose time per step exceeds its peers' most on the
    slow unit, and by how much (us per step)."""
    nodes = a.run.nodes.filter(pl.col("step").is_in(steps)
                               & pl.col("lane_kind").is_in(["device", "stream_all"])
                               & ~collective_expr())
    mine = (pl.col("worker") == worker) & (pl.col("device") == device)
    per = (nodes.group_by(mine.alias("mine"), "worker", "device", "node_name")
           .agg(us=(pl.col("op_end_rel_ns") / 1e3).sum() / len(steps)))
    slow = per.filter("mine").select("node_name", "us")
    peer = per.filter(~pl.col("mine")).group_by("node_name").agg(peer_us=pl.col("us").median())
    diff = (slow.join(peer, on="node_name").with_columns(excess=pl.col("us") - pl.col("peer_us"))
            .sort(["excess", "node_name"], descending=[True, False]))
    if not diff.height:
        return "", 0.0
    top = diff.row(0, named=True)
    return str(top["node_name"]), float(top["excess"])


@register
class SlowWorker(Checker):
    """A slow worker (or device) in synchronous training: per step, the one that reached
    the collectives last (it waited least in them), how long the others waited for it
    there, and what made it slow from its own numbers against its peers': host time
    before its first op (input, Python: JAX's Python events of the step are in it), an
    op slower there, or more work. Unlike RL109 (steps far slower than the others), every
    step may be as long as the next: the others' time goes to waiting.

    Why: in synchronous data-parallel training every step lasts as long as the slowest
    worker's; the others' wait in all-reduce is time the whole job loses. How to fix:
    what the cause names on that worker: its input pipeline (prefetch, more reader
    threads, a faster disk or host), the slower op (a different device, thermal limits,
    a noisy neighbour), or an uneven split of work (batch or shard sizes).
    """

    code = "RL116"
    name = "slow-worker"
    title = "A worker or device the others wait for in collectives"
    severity = Severity.WARNING
    severity_note = (f"only reported when the others wait {WARNING_WAIT:.0%} of their step "
                     f"or more in the typical step, for the same one in {LAST_SHARE:.0%} of "
                     "the steps or more")

    def check(self, a: Analysis) -> Iterable[Finding]:
        per = per_unit_step(a)
        last = last_per_step(per)
        n_steps = last["step"].n_unique()
        if n_steps < MIN_STEPS:
            return
        for row in (last.group_by("slow_worker", "slow_device").agg(steps=pl.len())
                    .sort(["steps", "slow_worker", "slow_device"],
                          descending=[True, False, False]).iter_rows(named=True)):
            finding = self._finding(a, per, last, row, n_steps)
            if finding is not None:
                yield finding

    def _finding(self, a: Analysis, per: pl.DataFrame, last: pl.DataFrame, row: dict,
                 n_steps: int) -> Finding | None:
        worker, device, count = row["slow_worker"], row["slow_device"], row["steps"]
        mine = last.with_columns(
            pl.when((pl.col("slow_worker") == worker) & (pl.col("slow_device") == device))
            .then(pl.col(c)).otherwise(0.0) for c in ("wait_share", "wait_us"))
        share, wait_us = num(mine["wait_share"].median()), num(mine["wait_us"].median())
        if share < WARNING_WAIT or count < LAST_SHARE * n_steps:
            return None
        c = causes(per, last, worker, device)
        steps = last.filter(pl.col("slow_worker") == worker)["step"].to_list()
        op, op_excess = slower_op(a, worker, device, steps)
        cause, key, excess = _cause(c, op, op_excess)
        if excess < EXPLAINED * wait_us:
            return None  # nothing of its own makes it slow: jitter, not a slow worker
        # the device is named where a worker has several (one per worker: its own name)
        several = per.group_by("worker").agg(pl.col("device").n_unique()).get_column(
            "device").max()
        who = worker if several == 1 else f"{worker} {device}"
        return self.finding(
            f"{who} reached the collectives last in {count} of {n_steps} steps; the others "
            f"waited {fmt_us(wait_us)} a step for it ({pct(share)} of their step): {cause}",
            where={"worker": worker, "device": device},
            evidence={"steps_last": count, "steps": n_steps, "wait_us_per_step":
                      round(wait_us, 1), "wait_share": round(share, 4), "cause": key,
                      "cause_excess_us": round(excess, 1),
                      **{k: round(v, 1) for k, v in c.items()},
                      **({"slower_op": op, "slower_op_excess_us": round(op_excess, 1)}
                         if op else {}),
                      "per_step": [{"step": r["step"], "last": r["slow_worker"]
                                    + ("" if who == worker else f" {r['slow_device']}"),
                                    "wait_us": round(r["wait_us"], 1)}
                                   for r in last.iter_rows(named=True)]},
            suggestion=_FIXES[key], impact=share)


def _cause(c: dict[str, float], op: str, op_excess: float) -> tuple[str, str, float]:
    """The largest of the slow unit's excesses over its peers: in words, its key and
    its size (us per step)."""
    before = c.get("before_us", 0.0) - c.get("peer_before_us", 0.0)
    work = c.get("op_us", 0.0) - c.get("peer_op_us", 0.0)
    more_ops = c.get("ops", 0.0) - c.get("peer_ops", 0.0)
    if before >= max(work, op_excess, 0.0):
        return (f"host time before its first op {fmt_us(c.get('before_us', 0.0))} against "
                f"{fmt_us(c.get('peer_before_us', 0.0))} on its peers (input or Python "
                "work inside the step)", "host_before_first_op", before)
    if more_ops > 0 and work > op_excess:
        return (f"more work: {c.get('ops', 0.0):.0f} ops taking {fmt_us(c.get('op_us', 0.0))} "
                f"against {c.get('peer_ops', 0.0):.0f} taking "
                f"{fmt_us(c.get('peer_op_us', 0.0))} on its peers", "more_work", work)
    return (f"{op} takes {fmt_us(op_excess)} a step longer there than on its peers",
            "slower_op", op_excess)


_FIXES = {
    "host_before_first_op": "Look at that worker's input pipeline and Python work before "
                            "the step's first op (`analyze timeline RUN --step N`): prefetch "
                            "(tf.data `prefetch`, more reader threads), a faster disk or "
                            "host, no per-step Python work on that worker only.",
    "more_work": "Split the work evenly: the same batch and shard sizes on every worker.",
    "slower_op": "Compare that op on the slow worker with its peers: a slower device, "
                 "thermal throttling, or a noisy neighbour on its host.",
}
