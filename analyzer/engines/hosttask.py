"""One host's task: read one part (a host file, a TF1 worker dir), write its cache, and
give back its aggregates. The same function runs in the local engine's processes and in
Ray's workers; whatever goes wrong is the task's one-line error, never an exception out
of it (the driver leaves that host out and reads the rest)."""

from __future__ import annotations

import os
import time

import polars as pl

from .. import cache, registries
from ..analysis import hostsummary, hostviews
from ..errors import RunlensError
from ..load import read_part
from ..model import Run
from . import HostResult, HostTask


def read_host(task: HostTask, ran_by: str | None = None) -> HostResult:
    """Read `task.part` with `task.jobs` threads or processes (one unless the local
    engine has more cores than parts) and wait until its cache is written: the driver
    reads it from there."""
    if task.cache_dir:
        os.environ[cache.CACHE_DIR_VARIABLE] = task.cache_dir
    start = time.perf_counter()
    part = task.part
    warnings: tuple[str, ...] = ()
    error, aggregates = None, b""
    lacks: tuple[tuple[str, str], ...] = ()
    pieces: tuple[tuple[str, bytes], ...] = ()
    try:
        source = registries.load(registries.SOURCES[task.kind])
        run = read_part(source, part, task.jobs)
        warnings, lacks = tuple(run.warnings), tuple(run.lacks.items())
        aggregates = _ipc(_aggregates(run))
        made = {}
        if "summary" in task.wants:
            made = hostsummary.pieces(run)
        if "views" in task.wants:
            made = hostviews.pieces(run, task.view)
        pieces = tuple((name, _ipc(frame)) for name, frame in made.items())
        cache.wait()
    except RunlensError as e:
        error = str(e)
    except Exception as e:  # noqa: BLE001 - a task's failure is its host's, not the driver's
        error = f"{part.path}: cannot be read ({type(e).__name__}: {e})"
    return HostResult(worker=part.worker, path=str(part.path), error=error,
                      aggregates=aggregates, warnings=warnings,
                      seconds=time.perf_counter() - start,
                      ran_by=ran_by or f"pid {os.getpid()}", lacks=lacks, pieces=pieces)


def _aggregates(run: Run) -> pl.DataFrame:
    """Per step, device and op type: executions and their op time (ns)."""
    executions = run.executions
    keys = run.keys.select("device", "op_type").with_row_index("key_id")
    keys = keys.with_columns(pl.col("key_id").cast(executions.schema["key_id"]))
    return (
        executions.select("key_id", "step", "op_end_rel_ns")
        .join(keys, on="key_id", how="left")
        .group_by("step", "device", "op_type")
        .agg(executions=pl.len(), op_ns=pl.col("op_end_rel_ns").sum())
        .sort("step", "device", "op_type", nulls_last=True)
    )


def _ipc(frame: pl.DataFrame) -> bytes:
    """A frame as Arrow IPC bytes: what crosses from a task to the driver."""
    return frame.write_ipc(None).getvalue()
