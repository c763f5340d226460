"""RL102 accelerator-utilization."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from ..analyzer.analysis.devicesteps import device_steps
from ..analyzer.units import fmt_us
from .base import Analysis, Checker, Finding, Severity, num, pct, register
from .host_device_copies import is_copy
from .intervals import gaps, largest_gaps, merged_busy

IDLE_WARNING = 0.25  # idle share of the step from which the finding is a warning
IDLE_INFO = 0.20  # below this, no finding


@register
class AcceleratorUtilization(Checker):
    """Per accelerator, over all steps: the share of the step during which no kernel or
    copy runs, and where that idle time is: before the step's first device event (the
    host had not launched the step's work yet: Python, dispatch, input), between device
    events (launch gaps, host syncs inside the step), after the last one (the host ends
    the step later: sync, logging). Also the idle share within the device's own span of
    the step (first to last device event), which is how xprof counts a GPU step. Each
    device is measured on its own: where its work in a step lies wholly outside the step's
    span (another device's: two GPUs of one job 650 ms apart), in its own span; a device
    with no work in a step has no finding for it ("no work in this step" in summary).

    Why: an idle GPU is paid for and wasted; low utilization means the device waits for
    the host. Where the idle time sits says which fix helps. What tfprof's
    AcceleratorUtilizationChecker meant, over every step instead of the last.
    How to fix: idle before the first kernel: the host is late (dispatch takes longer
    than the device's work, or input is prepared inside the step): prefetch input to the
    device (double-buffer with `jax.device_put` / tf.data prefetch), run more work per
    dispatch (larger batch, several steps per call with `jax.lax.scan`/`fori_loop`), do
    not block on results each step. Between kernels: fewer host syncs, fuse small ops.
    """

    code = "RL102"
    name = "accelerator-utilization"
    title = "Accelerator utilization"
    severity = Severity.WARNING
    severity_note = (f"info when idle for less than {IDLE_WARNING:.0%} of the step; none "
                     f"below {IDLE_INFO:.0%}")

    def check(self, a: Analysis) -> Iterable[Finding]:
        n = a.run.nodes.filter(pl.col("all_start_us") > 0)
        kernels = n.filter(pl.col("lane_kind") == "stream_all")
        if kernels.height == 0:  # tf.timeline-era traces may only have per-stream lanes
            kernels = n.filter(pl.col("lane_kind") == "stream")
        if kernels.height == 0:
            return
        # Gaps name their neighbours by node, or by kernel where no node is known.
        label = (pl.when(pl.col("node_name").str.starts_with("unattributed"))
                 .then(pl.col("kernel")).otherwise(pl.col("node_name")))
        iv = kernels.select("worker", "device", "step", "kernel", "start_ns", node_name=label,
                            end_ns=pl.col("start_ns") + pl.col("op_end_rel_ns"),
                            copy=is_copy())
        by = ["worker", "device", "step"]
        blocks = merged_busy(iv, by)
        first_kernel = iv.filter(~pl.col("copy")).group_by(by).agg(
            first_kernel_ns=pl.col("start_ns").min())
        windows = _windows(a)
        per_step = _placement(blocks, windows, first_kernel, by)
        # Gaps inside each device's window only (not between its step's work and copies
        # of no step that a grouped profile leaves out: 368 ms on BERT's gpu:6).
        inside = blocks.join(windows.select(*by, w0="start_ns", w1="end_ns"), on=by).filter(
            (pl.col("end_ns") > pl.col("w0")) & (pl.col("start_ns") < pl.col("w1")))
        holes = gaps(inside.drop("w0", "w1"), by)
        for r in _totals(per_step).sort("worker", "device").iter_rows(named=True):
            idle = r["idle_ns"] / r["span_ns"] if r["span_ns"] else 0.0
            if idle < IDLE_INFO:
                continue
            rows = per_step.filter((pl.col("worker") == r["worker"])
                                   & (pl.col("device") == r["device"]))
            top = largest_gaps(holes, {"worker": r["worker"], "device": r["device"]})
            yield self.finding(
                _message(r, idle, rows),
                severity=Severity.WARNING if idle >= IDLE_WARNING else Severity.INFO,
                where={"worker": r["worker"], "device": r["device"]},
                evidence=_evidence(r, idle, rows, [_gap(g, iv) for g in
                                                   top.iter_rows(named=True)]),
                suggestion=_suggestion(r),
                impact=idle,
            )


def _windows(a: Analysis) -> pl.DataFrame:
    """The window each device's step is measured in, per (worker, device, step) in which
    the device worked (a device with no work in a step has no row: "no work in this
    step", never "idle 100%"): the step's span; or, where the device's work in the step
    lies wholly outside it (the step's span is another device's: two GPUs of one job
    650 ms apart), the device's own span of the step (`own`)."""
    steps = a.step_times.select("worker", "step", s0="start_ns", s1="end_ns")
    work = device_steps(a.run).filter(pl.col("work"))
    own = (pl.col("end_ns") <= pl.col("s0")) | (pl.col("start_ns") >= pl.col("s1"))
    return (work.join(steps, on=["worker", "step"])
            .select("worker", "device", "step", "device_step_ns", own=own,
                    device_work_ns="busy_ns",
                    start_ns=pl.when(own).then("start_ns").otherwise("s0"),
                    end_ns=pl.when(own).then("end_ns").otherwise("s1")))


def _within(w0: pl.Expr, w1: pl.Expr) -> pl.Expr:
    """A busy block's time inside the window [w0, w1)."""
    return (pl.min_horizontal("end_ns", w1) - pl.max_horizontal("start_ns", w0)).clip(0)


def _placement(blocks: pl.DataFrame, spans: pl.DataFrame, first_kernel: pl.DataFrame,
               by: list[str]) -> pl.DataFrame:
    """Per (worker, device, step): the step span, busy time inside it, and its idle time
    before the first kernel (copies then, such as the input's, are busy, not idle),
    between the first kernel and the end of the last device event, and after it; also
    the device's own span (first device event to last) and its busy time."""
    s0, s1, k0 = pl.col("step_start_ns"), pl.col("step_end_ns"), pl.col("first_kernel_ns")
    last = pl.col("end_ns").max()
    return (
        blocks.join(spans.rename({"start_ns": "step_start_ns", "end_ns": "step_end_ns"}),
                    on=by)
        .join(first_kernel, on=by, how="left")
        .with_columns(k0.fill_null(s1))  # a step of copies only: all "before"
        .group_by(by)
        .agg(span_ns=(s1 - s0).first(), busy_ns=_within(s0, s1).sum(),
             busy_before_ns=_within(s0, pl.min_horizontal(k0, s1)).sum(),
             device_busy_ns=pl.col("device_work_ns").first(),
             device_span_ns=pl.col("device_step_ns").first(),
             first_ns=pl.col("start_ns").min(), last_ns=last,
             first_kernel_ns=k0.first(), step_start_ns=s0.first(), step_end_ns=s1.first(),
             own=pl.col("own").first())
        # Device work can lie outside the step's span (a multi-GPU profile whose step is
        # spanned by another GPU's work): the first kernel and the last event are clipped
        # to the span, so that the parts add up to the span's idle time.
        .with_columns(
            k0_in=pl.col("first_kernel_ns").clip(pl.col("step_start_ns"), pl.col("step_end_ns")),
            last_in=pl.col("last_ns").clip(pl.col("step_start_ns"), pl.col("step_end_ns")))
        .with_columns(
            kernel_delay_ns=pl.col("k0_in") - pl.col("step_start_ns"),
            after_ns=pl.when(pl.col("k0_in") < pl.col("last_in"))
            .then(pl.col("step_end_ns") - pl.col("last_in")).otherwise(0))
        .with_columns(before_ns=pl.when(pl.col("busy_ns") > 0)
                      .then((pl.col("kernel_delay_ns") - pl.col("busy_before_ns")).clip(0))
                      .otherwise(pl.col("span_ns")))  # nothing ran inside the span
        .with_columns(between_ns=(pl.col("span_ns") - pl.col("busy_ns") - pl.col("before_ns")
                                  - pl.col("after_ns")).clip(0))
        .drop("k0_in", "last_in")
        .sort(by)
    )


def _totals(per_step: pl.DataFrame) -> pl.DataFrame:
    return per_step.group_by("worker", "device").agg(
        steps=pl.len(), span_ns=pl.col("span_ns").sum(),
        busy_ns=pl.col("busy_ns").sum(),
        before_ns=pl.col("before_ns").sum(), between_ns=pl.col("between_ns").sum(),
        busy_before_ns=pl.col("busy_before_ns").sum(),
        after_ns=pl.col("after_ns").sum(), device_span_ns=pl.col("device_span_ns").sum(),
        own=pl.col("own").all(),
        device_busy_ns=pl.col("device_busy_ns").sum(),
    ).with_columns(idle_ns=pl.col("before_ns") + pl.col("between_ns") + pl.col("after_ns"))


def _message(r: dict, idle: float, rows: pl.DataFrame) -> str:
    steps = r["steps"]
    parts = [f"{fmt_us(r[k] / steps / 1000)} {what}"
             for k, what in (("before_ns", "before the first kernel"),
                             ("between_ns", "between kernels"),
                             ("after_ns", "after the last"))]
    of = ("of its own step (its work lies outside the step's span, which is another "
          "device's)" if r["own"] else "of the step")
    text = (f"{r['device']} is idle {pct(idle)} {of} "
            f"({fmt_us(r['idle_ns'] / steps / 1000)} per step: {', '.join(parts)})")
    if (rows["busy_ns"] == 0).all() or (rows["kernel_delay_ns"] >= rows["span_ns"]).all():
        return text + "; no kernel ran inside the step's span (its device work lies outside)"
    if r["before_ns"] >= max(r["between_ns"], r["after_ns"]):
        delays = rows["kernel_delay_ns"]
        lo, hi = num(delays.min()), num(delays.max())
        copies = (f", {fmt_us(r['busy_before_ns'] / steps / 1000)} of it copying"
                  if r["busy_before_ns"] else "")
        text += (f"; each step's first kernel starts {fmt_us(lo / 1000)}-"
                 f"{fmt_us(hi / 1000)} after the step begins{copies}: the device waits "
                 "for the host (dispatch, input)")
    return text


def _evidence(r: dict, idle: float, rows: pl.DataFrame, largest: list[dict]) -> dict:
    steps = r["steps"]
    dev_idle = (1 - r["device_busy_ns"] / r["device_span_ns"]) if r["device_span_ns"] else 0.0
    return {
        "idle_share": round(idle, 4), "steps": steps,
        # Means over the analysed steps (summary's "mean"), named so beside its median.
        "mean_step_us": r["span_ns"] / steps / 1000,
        "idle_before_first_us": r["before_ns"] / steps / 1000,
        "idle_between_us": r["between_ns"] / steps / 1000,
        "idle_after_last_us": r["after_ns"] / steps / 1000,
        "busy_before_first_us": r["busy_before_ns"] / steps / 1000,
        "first_kernel_delay_us": [round(v / 1000, 1)
                                  for v in rows["kernel_delay_ns"].to_list()],
        # As xprof counts a GPU step: from its first device event to its last.
        "mean_device_step_us": r["device_span_ns"] / steps / 1000,
        "idle_share_of_device_step": round(max(dev_idle, 0.0), 4),
        "device_busy_us": r["device_busy_ns"] / steps / 1000,
        "largest_gaps": largest,
    }


def _suggestion(r: dict) -> str:
    if r["before_ns"] >= max(r["between_ns"], r["after_ns"]):
        return ("The host is late: move input preparation out of the step and prefetch "
                "it to the device, dispatch more work per call (larger batch, several steps "
                "per jitted call with jax.lax.scan / fori_loop), avoid blocking on results "
                "every step (see the host threads in analyze timeline).")
    if r["between_ns"] >= r["after_ns"]:
        return ("Gaps between kernels: remove host syncs inside the step (reading values "
                "back with .numpy()/.item(), printing, host callbacks) and fuse small ops "
                "(XLA: jax.jit, tf.function(jit_compile=True)).")
    return ("The step ends long after the device's last kernel: the host does work after "
            "the step's results are ready (logging, syncs, checkpointing); overlap it "
            "with the next step.")


def _gap(g: dict, iv: pl.DataFrame) -> dict:
    """A gap with the kernels right before and after it."""
    same = iv.filter((pl.col("worker") == g["worker"]) & (pl.col("device") == g["device"])
                     & (pl.col("step") == g["step"]))
    before = same.filter(pl.col("end_ns") <= g["gap_start_ns"]).sort("end_ns", "node_name").tail(1)
    after = same.filter(pl.col("start_ns") >= g["gap_start_ns"] + g["gap_ns"]).sort(
        "start_ns", "node_name").head(1)  # ties: by name, the same every run
    return {"step": g["step"], "gap_us": g["gap_ns"] / 1000,
            "after": before["node_name"][0] if before.height else None,
            "before": after["node_name"][0] if after.height else None}
