"""xprof's framework op stats of an .xplane.pb, as a polars frame (the oracle of the
xplane tests).

xprof (dev extra, no TensorFlow needed) converts a copy of the file (it writes cache files
beside its input); its JSON table is capped at 500 rows, so the per-op numbers are read
from the OpStats proto it caches beside the copy (`ALL_HOSTS.op_stats_v2.pb`), which is
not.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path
from typing import Any

import polars as pl


@functools.cache
def op_stats(path: Path) -> Any:
    """xprof's OpStats proto of the file (converted once per test process)."""
    from xprof.convert import raw_to_tool_data
    from xprof.protobuf import op_stats_pb2

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        shutil.copy(path, copy)
        raw_to_tool_data.xspace_to_tool_data([str(copy)], "framework_op_stats", {})
        cached = list(Path(tmp).glob("*.op_stats_v2.pb"))
        assert cached, f"xprof wrote no op_stats for {path}"
        return op_stats_pb2.OpStats.FromString(cached[0].read_bytes())


def step_db(path: Path) -> pl.DataFrame:
    """xprof's steps (OpStats.step_db, what its overview and input pipeline pages show):
    one row per (step, core) in xprof's order: step_num (xprof's count from 0), name (the
    step marker's, "" on a GPU step), begin_ps, duration_ps."""
    rows = [(s.step_num, core, info.step_name, info.begin_ps, info.duration_ps)
            for s in op_stats(path).step_db.step_sequence
            for core, info in sorted(s.step_info_per_core.items())]
    return pl.DataFrame(rows, orient="row", schema={
        "step_num": pl.Int64, "core": pl.Int64, "name": pl.String, "begin_ps": pl.Int64,
        "duration_ps": pl.Int64})


def framework_op_stats(path: Path) -> pl.DataFrame:
    """One row per (host_or_device, name, type): occurrences, time_ps, self_time_ps."""
    stats = op_stats(path)
    rows = []
    for where, db in (("Host", stats.host_op_metrics_db), ("Device", stats.device_op_metrics_db)):
        for m in db.metrics_db:
            if m.category == "IDLE":
                continue
            rows.append((where, m.name, m.category, m.occurrences, m.time_ps, m.self_time_ps))
    return pl.DataFrame(rows, orient="row", schema={
        "where": pl.String, "name": pl.String, "type": pl.String, "occurrences": pl.Int64,
        "time_ps": pl.Int64, "self_time_ps": pl.Int64})


def hlo_op_stats(path: Path) -> pl.DataFrame:
    """xprof's HLO op stats of a device profile (OpStats.device_op_metrics_db, what its
    hlo_stats and op_profile pages show): one row per (program_id, HLO op): framework op
    (`provenance` less its trailing ':'), category, occurrences, time_ps, self_time_ps."""
    rows = [(m.hlo_module_id, m.name, m.provenance.removesuffix(":"), m.category,
             m.occurrences, m.time_ps, m.self_time_ps)
            for m in op_stats(path).device_op_metrics_db.metrics_db if m.category != "IDLE"]
    return pl.DataFrame(rows, orient="row", schema={
        "program_id": pl.UInt64, "hlo_op": pl.String, "op_name": pl.String,
        "category": pl.String, "occurrences": pl.Int64, "time_ps": pl.Int64,
        "self_time_ps": pl.Int64})


def hlo_op_work(path: Path) -> pl.DataFrame:
    """xprof's work of each HLO op of a device profile (its HloCostAnalysis, summed over
    the op's kernels): one row per HLO op: occurrences (kernels), flops, bytes_accessed."""
    rows = [(m.name, m.occurrences, m.flops, m.bytes_accessed)
            for m in op_stats(path).device_op_metrics_db.metrics_db if m.category != "IDLE"]
    return pl.DataFrame(rows, orient="row", schema={
        "hlo_op": pl.String, "occurrences": pl.Int64, "flops": pl.Float64,
        "bytes_accessed": pl.Float64})
