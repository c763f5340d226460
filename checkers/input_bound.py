"""RL105 input-bound."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import polars as pl

from ..analyzer.analysis import tfdata
from ..analyzer.analysis.graph import no_dataflow
from ..analyzer.units import fmt_us
from .base import Analysis, Checker, Finding, Severity, pct, register
from .intervals import merged_busy

# Ops that wait for the input pipeline (tf.data iterators, queues, readers).
INPUT_OPS = [
    "IteratorGetNext", "IteratorGetNextSync", "IteratorGetNextAsOptional",
    "MultiDeviceIteratorGetNextFromShard", "QueueDequeue", "QueueDequeueV2",
    "QueueDequeueMany", "QueueDequeueManyV2", "QueueDequeueUpTo", "QueueDequeueUpToV2",
    "ReaderRead", "ReaderReadV2", "ReaderReadUpTo", "ReaderReadUpToV2",
]
WARNING_SHARE = 0.20  # XProf: "highly input-bound"
INFO_SHARE = 0.05


@register
class InputBound(Checker):
    """Steps that wait for input: on TF2 profiles of tf.data, the training thread's wait
    for its batch within the step (`Iterator::Root` spans: xprof's input time), with the
    slowest tf.data stage and a fix read from the pipeline, and a finding of its own when
    the loop waits outside the step markers; elsewhere, time of input ops
    (IteratorGetNext, queue dequeues) on the critical path, as a share of step time
    (without a dataflow graph, as from a timeline, their own time on their threads, and
    the finding says so).

    Why: while the model waits for the next batch, the device does nothing; a faster
    model will not make training faster. XProf's bands: at least 20% of the step is
    "highly input-bound", at least 5% is worth a look. A model fed by placeholders
    (feed_dict) is not input-bound by this measure. How to fix: in tf.data, add
    `.prefetch(tf.data.AUTOTUNE)`, use `num_parallel_calls=tf.data.AUTOTUNE` in `map`
    (`tf.data.experimental.AUTOTUNE` before TF 2.4), cache decoded data, move Python
    (tf.py_function) work out of the pipeline.
    """

    code = "RL105"
    name = "input-bound"
    title = "Input-bound steps"
    severity = Severity.WARNING
    severity_note = f"info when input takes less than {WARNING_SHARE:.0%} of the step"

    def check(self, a: Analysis) -> Iterable[Finding]:
        if tfdata.has_iterator(a.run):
            rows, outside_ns = self._iterator_wait(a)
            yield from self._finding(a, rows, "iterator wait")
            yield from self._outside(a, rows, outside_ns)
            return
        on_path = no_dataflow(a.run) is None
        rows = self._on_path(a) if on_path else self._op_time(a)
        yield from self._finding(a, rows, "critical path" if on_path else "op time")

    def _iterator_wait(self, a: Analysis) -> tuple[list[dict[str, Any]], int]:
        """TF2 profiles of tf.data: the training thread's waits for a batch
        (`Iterator::Root` spans within the step's span, merged per step) as a share of
        the step: xprof's input time of the same events; and the wait outside the steps
        (ns)."""
        waits, outside_ns = tfdata.clipped_waits(a.run, a.step_times)
        busy = merged_busy(waits, ["worker", "step"]).group_by("worker", "step").agg(
            input_ns=(pl.col("end_ns") - pl.col("start_ns")).sum())
        steps = a.step_times.join(busy, on=["worker", "step"], how="left")
        return [{"step": r["step"], "input_ns": int(r["input_ns"] or 0),
                 "step_ns": int(r["duration_ns"]), "ops": ["IteratorGetNext"]}
                for r in steps.iter_rows(named=True) if r["duration_ns"]], outside_ns

    def _outside(self, a: Analysis, rows: list[dict[str, Any]], outside_ns: int
                 ) -> Iterable[Finding]:
        """The batch fetched outside the step markers: the steps look fast while the
        training loop waits between them, which no share of a step shows."""
        t = a.step_times
        if not rows or not t.height:
            return
        wall = int(t.select(pl.col("end_ns").max() - pl.col("start_ns").min()).item())
        share = outside_ns / wall if wall else 0.0
        if share < INFO_SHARE:
            return
        severity = Severity.WARNING if share >= WARNING_SHARE else Severity.INFO
        stage = tfdata.slowest_stage(a.run)
        yield self.finding(
            f"the training loop waits for input outside the step markers: "
            f"{fmt_us(outside_ns / 1000 / len(rows))} per step, {pct(share)} of the time "
            "from the first marker to the last, in no step's time (the markers leave out "
            "next(iterator))",
            severity=severity, where={"op": "IteratorGetNext"},
            evidence={"outside_steps_share": round(share, 4),
                      "outside_us_per_step": round(outside_ns / 1000 / len(rows), 1),
                      "steps_sampled": len(rows), "measured": "iterator wait",
                      **({"slowest_stage": stage[0]} if stage else {})},
            suggestion="Put next(iterator) inside the step (or pass the iterator into the "
                       "tf.function) so that step times hold the wait; then: "
                       + _sentence(tfdata.pipeline_fix(a.run)),
            impact=0.0,  # no share of a step: the wait lies in none
        )

    def _on_path(self, a: Analysis) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for cp in a.critical_paths(a.sample_steps()):
            step = cp.step
            if cp.step_ns == 0:
                continue
            waiting = cp.ops.filter(pl.col("kernel").is_in(INPUT_OPS))
            rows.append({"step": step, "input_ns": int(waiting["busy_ns"].sum()),
                         "step_ns": cp.step_ns,
                         "ops": sorted(set(waiting["node_name"].to_list()))})
        return rows

    def _op_time(self, a: Analysis) -> list[dict[str, Any]]:
        """Without dataflow edges (a run converted from a timeline), no critical path: the
        time input ops run on their threads (merged per step) as a share of the step. An
        iterator's op time is time the step waits for its batch, unless other work
        overlaps it; the critical path, where there is one, says which."""
        x = a.run.nodes_lazy().filter(
            pl.col("kernel").is_in(INPUT_OPS) & pl.col("lane_kind").is_in(["device", "other"])
            & (pl.col("all_start_us") > 0)
        ).select("worker", "step", "node_name", "start_ns",
                 end_ns=pl.col("start_ns") + pl.col("op_end_rel_ns")).collect()
        busy = merged_busy(x, ["worker", "step"]).group_by("worker", "step").agg(
            input_ns=(pl.col("end_ns") - pl.col("start_ns")).sum())
        ops = x.group_by("worker", "step").agg(ops=pl.col("node_name").unique().sort())
        steps = a.step_times.join(busy, on=["worker", "step"], how="left").join(
            ops, on=["worker", "step"], how="left")
        return [{"step": r["step"], "input_ns": int(r["input_ns"] or 0),
                 "step_ns": int(r["duration_ns"]), "ops": r["ops"] or []}
                for r in steps.iter_rows(named=True) if r["duration_ns"]]

    def _finding(self, a: Analysis, rows: list[dict[str, Any]], measured: str
                 ) -> Iterable[Finding]:
        if not rows:
            return
        share = sum(r["input_ns"] for r in rows) / sum(r["step_ns"] for r in rows)
        if share < INFO_SHARE:
            return
        ops = sorted({op for r in rows for op in r["ops"]})
        severity = Severity.WARNING if share >= WARNING_SHARE else Severity.INFO
        level = "highly input-bound" if severity is Severity.WARNING else "partly input-bound"
        where_measured = _MEASURED[measured]
        stage = tfdata.slowest_stage(a.run)
        said = (f"; slowest tf.data stage {stage[0]} ({fmt_us(stage[1])} self time per step)"
                if stage else "")
        yield self.finding(
            f"{level}: {pct(share)} of step time is spent waiting for input "
            f"({', '.join(ops[:3])}) {where_measured}{said}",
            severity=severity,
            where={"op": ops[0] if ops else None},
            evidence={"input_share": round(share, 4), "steps_sampled": len(rows),
                      "measured": measured,
                      **({"slowest_stage": stage[0]} if stage else {}),
                      "input_us_per_step": round(sum(r["input_ns"] for r in rows)
                                                 / len(rows) / 1000, 1),
                      "per_step": [{"step": r["step"], "input_us": r["input_ns"] / 1000,
                                    "step_us": r["step_ns"] / 1000} for r in rows]},
            suggestion=(_sentence(tfdata.pipeline_fix(a.run)) if stage else _FIX),
            impact=share,
        )


_FIX = ("Overlap input with compute: dataset.prefetch(tf.data.AUTOTUNE); parallelize map "
        "with num_parallel_calls=tf.data.AUTOTUNE (tf.data.experimental.AUTOTUNE before TF "
        "2.4); cache or pre-process data offline; avoid tf.py_function in the pipeline.")
_MEASURED = {
    "critical path": "on the critical path",
    "op time": "(input ops' own time: no dataflow graph for a critical path)",
    "iterator wait": "(the training thread waiting in Iterator::Root, xprof's input time)",
}


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."
