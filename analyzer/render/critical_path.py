"""Render a step's critical path as text or JSON."""

from __future__ import annotations

import json

from ..analysis.graph import CriticalPath
from ..units import fmt_us
from .textcut import distinct_cuts


def critical_path_text(cp: CriticalPath) -> str:
    lines = [
        f"critical path of step {cp.step} ({cp.worker}): {cp.ops.height} ops, "
        f"{fmt_us(cp.length_ns / 1000)} of op time = {100 * cp.share:.1f}% of the step "
        f"({fmt_us(cp.step_ns / 1000)}); spans {fmt_us(cp.span_ns / 1000)}",
        f"{'op':<60} {'kernel':<36} {'time':>9} {'waited':>9}",
    ]
    names = distinct_cuts(cp.ops.get_column("node_name").to_list(), 60)
    for name, r in zip(names, cp.ops.iter_rows(named=True), strict=True):
        lines.append(f"{name:<60} {r['kernel']:<36} {fmt_us(r['busy_ns'] / 1000):>9} "
                     f"{fmt_us(r['wait_ns'] / 1000):>9}")
    lines.append("waited: time between the previous op's end and this op's start that the "
                 "dataflow does not explain (a busy thread, a queue, a loop frame)")
    return "\n".join(lines) + "\n"


def critical_path_json(cp: CriticalPath) -> str:
    return json.dumps({
        "schema": 1,
        "view": "critical_path",
        "step": cp.step,
        "worker": cp.worker,
        "length_us": cp.length_ns / 1000,
        "span_us": cp.span_ns / 1000,
        "step_us": cp.step_ns / 1000,
        "share": round(cp.share, 6),
        "ops": [
            {"name": r["node_name"], "op_type": r["op_type"], "kernel": r["kernel"],
             "device": r["device"],
             "start_us": r["start_ns"] / 1000, "micros": r["busy_ns"] / 1000,
             "waited_us": r["wait_ns"] / 1000}
            for r in cp.ops.iter_rows(named=True)
        ],
    }, indent=1)
