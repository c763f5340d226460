"""One host's task: read one part (a host file, a TF1 worker dir), write its cache, and
give back its aggregates. The same function runs in the local engine's processes and in
Ray's workers; whatever goes wrong is the task's one-line error, never an exception out
of it (the driver leaves that host out and reads the rest)."""

from __future__ import annotations

import os
import time

import polars as pl

from .. import cache, registries
from ..errors import RunlensError
from ..load import read_part
from ..model import built
from . import HostResult, HostTask


def read_host(task: HostTask, ran_by: str | None = None) -> HostResult:
    """Read `task.part` with one thread (the engines run one task per core) and wait
    until its cache is written: the driver reads it from there."""
    if task.cache_dir:
        os.environ[cache.CACHE_DIR_VARIABLE] = task.cache_dir
    start = time.perf_counter()
    part = task.part
    warnings: list[str] = []
    error, aggregates = None, b""
    try:
        source = registries.load(registries.SOURCES[task.kind])
        frames, part_warnings = read_part(source, part, 1, warnings.append)
        warnings.extend(part_warnings)
        aggregates = _aggregates(frames)
        cache.wait()
    except RunlensError as e:
        error = str(e)
    except Exception as e:  # noqa: BLE001 - a task's failure is its host's, not the driver's
        error = f"{part.path}: cannot be read ({type(e).__name__}: {e})"
    return HostResult(worker=part.worker, path=str(part.path), error=error,
                      aggregates=aggregates, warnings=tuple(warnings),
                      seconds=time.perf_counter() - start,
                      ran_by=ran_by or f"pid {os.getpid()}")


def _aggregates(frames: dict) -> bytes:
    """Per step, device and op type: executions and their op time (ns), as Arrow IPC."""
    keys = built(frames["keys"]).select("device", "op_type").with_row_index("key_id")
    executions = built(frames["executions"])
    keys = keys.with_columns(pl.col("key_id").cast(executions.schema["key_id"]))
    table = (
        executions.select("key_id", "step", "op_end_rel_ns")
        .join(keys, on="key_id", how="left")
        .group_by("step", "device", "op_type")
        .agg(executions=pl.len(), op_ns=pl.col("op_end_rel_ns").sum())
        .sort("step", "device", "op_type", nulls_last=True)
    )
    buffer = table.write_ipc(None)
    return buffer.getvalue()
