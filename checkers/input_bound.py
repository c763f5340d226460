"""RL105 input-bound."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import polars as pl

from checkers.base import Analysis, Checker, Finding, Severity, pct, register

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
    """Steps that wait for input: time of input ops (IteratorGetNext, queue dequeues) on
    the critical path, as a share of step time.

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
        rows: list[dict[str, Any]] = []
        for step in a.sample_steps():
            cp = a.critical_path(step)
            if cp.step_ns == 0:
                continue
            waiting = cp.ops.filter(pl.col("kernel").is_in(INPUT_OPS))
            rows.append({"step": step, "input_ns": int(waiting["busy_ns"].sum()),
                         "step_ns": cp.step_ns,
                         "ops": sorted(set(waiting["node_name"].to_list()))})
        if not rows:
            return
        share = sum(r["input_ns"] for r in rows) / sum(r["step_ns"] for r in rows)
        if share < INFO_SHARE:
            return
        ops = sorted({op for r in rows for op in r["ops"]})
        severity = Severity.WARNING if share >= WARNING_SHARE else Severity.INFO
        level = "highly input-bound" if severity is Severity.WARNING else "partly input-bound"
        yield self.finding(
            f"{level}: {pct(share)} of step time is spent waiting for input "
            f"({', '.join(ops[:3])}) on the critical path",
            severity=severity,
            where={"op": ops[0] if ops else None},
            evidence={"input_share": round(share, 4), "steps_sampled": len(rows),
                      "input_us_per_step": round(sum(r["input_ns"] for r in rows)
                                                 / len(rows) / 1000, 1),
                      "per_step": [{"step": r["step"], "input_us": r["input_ns"] / 1000,
                                    "step_us": r["step_ns"] / 1000} for r in rows]},
            suggestion="Overlap input with compute: dataset.prefetch(tf.data.AUTOTUNE); "
                       "parallelize map with num_parallel_calls=tf.data.AUTOTUNE "
                       "(tf.data.experimental.AUTOTUNE before TF 2.4); cache or pre-process "
                       "data offline; avoid tf.py_function in the pipeline.",
            impact=share,
        )
