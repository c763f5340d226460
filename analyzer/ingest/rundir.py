"""The run directory's reader (the `rundir` source: analyzer/sources/rundir.py): its
step files ingested in batches, in parallel threads (the C decoder) or spawned processes
(the protobuf fallback, for large runs), graph.pb and op_log.pb read beside them.

A step file that cannot be read is skipped with a one-line warning naming it, and the
other steps still load; a bad partition graph skips only the step file that carries it
(it is parsed with that file).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable
from typing import Any

import polars as pl

from ..background import Background, map_in_processes
from ..errors import InputFileError, RunDirError
from ..rundir import RunDir
from ..schema import (
    ATTRIBUTION_SCHEMA,
    DEVICE_SCHEMA,
    DEVICE_STEP_SCHEMA,
    GRAPH_NODE_SCHEMA,
    HLO_WORK_SCHEMA,
    STEP_SPAN_SCHEMA,
    TIMING_SCHEMA,
)
from . import stepfiles
from .graphs import empty_op_log, ingest_graph_file, ingest_op_log_file
from .stepwalk import StepFrames

Progress = Callable[[int, int], None]

PARALLEL_MIN_BYTES = 16 * 1024 * 1024  # below this, starting processes costs more than it saves


def _manifest_sizes(run: RunDir) -> dict[int, int]:
    """The step files' sizes the manifest lists (rundir checked that `steps` is a list)."""
    sizes: dict[int, int] = {}
    entries = run.manifest.get("steps")
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and _is_int(entry.get("step")):
            if _is_int(entry.get("bytes")):
                sizes[entry["step"]] = entry["bytes"]
    return sizes


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


BATCH_FILES = 512  # at most, per batch


def _batches(items: list[stepfiles.StepItem], jobs: int) -> list[list[stepfiles.StepItem]]:
    """Contiguous batches, as few as gives every worker the same number (each batch costs
    its own frames, and the run's columns one chunk more: 1M node stats ingested in 20
    batches took ~15% longer than in 4), of at most BATCH_FILES files."""
    count = -(-len(items) // BATCH_FILES)
    count = max(jobs, -(-count // jobs) * jobs)
    size = max(1, -(-len(items) // count))
    return [items[i : i + size] for i in range(0, len(items), size)]


_seen_graphs: set[bytes] = set()  # per worker process: partition graphs already sent back
_parsed_graphs = stepfiles.PartitionGraphs()  # per worker process


def _ingest_batch_in_process(batch: list[stepfiles.StepItem], digests: bool) -> stepfiles.StepBatch:
    """Process-pool worker: a batch, without the partition graphs it already sent."""
    result = stepfiles.ingest_step_files(batch, partition_graphs=_parsed_graphs,
                                      digests=digests)
    for digest in list(result.graphs):
        if digest in _seen_graphs:
            del result.graphs[digest]
        _seen_graphs.add(digest)
    return result


def _ingest_steps(run: RunDir, jobs: int, progress: Progress | None, digests: bool = False
                  ) -> list[stepfiles.StepBatch]:
    """Every step file of `run`, in batches, in parallel where it pays (`digests`: with
    each file's content digest, for the cache's key).

    With the C decoder, threads (it releases the GIL; no process start-up, no pickling);
    without it, processes once there is enough to do (the protobuf walk holds the GIL).
    """
    sizes = _manifest_sizes(run)
    items: list[stepfiles.StepItem] = [(p, s, sizes.get(s)) for s, p in run.steps.items()]
    batches = _batches(items, jobs)
    ingest_batch = functools.partial(stepfiles.ingest_step_files,
                                     partition_graphs=stepfiles.PartitionGraphs(), digests=digests)
    if jobs > 1 and len(batches) > 1:
        if stepfiles.native_decoder_available():
            with Background(jobs, "runlens-ingest") as pool:
                return _collect(pool.map(ingest_batch, batches), batches, progress)
        total_bytes = sum(_size(p) for p, _, _ in items)
        if total_bytes >= PARALLEL_MIN_BYTES:
            results = _ingest_in_processes(batches, jobs, progress, digests)
            if results is not None:
                return results
    return _collect(map(ingest_batch, batches), batches, progress)


def _size(path: str | os.PathLike[str]) -> int:
    try:
        return os.stat(path).st_size
    except OSError:  # reported when the file is read
        return 0


def _collect(results: Iterable[stepfiles.StepBatch], batches: list[list[stepfiles.StepItem]],
             progress: Progress | None) -> list[stepfiles.StepBatch]:
    out = []
    total, done = sum(len(b) for b in batches), 0
    for batch, result in zip(batches, results, strict=True):
        out.append(result)
        done += len(batch)
        if progress:
            progress(done, total)
    return out


def _ingest_in_processes(batches: list[list[stepfiles.StepItem]], jobs: int,
                         progress: Progress | None, digests: bool
                         ) -> list[stepfiles.StepBatch] | None:
    """Batches in a pool of processes; None when no pool can run here (serial ingest
    gives the same frames)."""
    return map_in_processes(functools.partial(_ingest_batch_in_process, digests=digests),
                            batches, jobs,
                            functools.partial(_collect, batches=batches, progress=progress))


def _concat(frames: list[pl.DataFrame], schema: dict) -> pl.DataFrame:
    return pl.concat(frames, how="vertical") if frames else pl.DataFrame(schema=schema)


def _read_graph(run: RunDir) -> tuple[pl.DataFrame | None, str | None]:
    """graph.pb's nodes, or the warning that says why not."""
    if run.graph is None:
        return None, None
    try:
        return ingest_graph_file(run.graph), None
    except InputFileError as e:
        return None, f"{e}; op types come from partition graphs and timeline labels"


def _read_op_log(run: RunDir) -> tuple[tuple[pl.DataFrame, pl.DataFrame], str | None]:
    """op_log.pb's float ops and code traces, or empty ones and the warning why."""
    if run.op_log is None:
        return empty_op_log(), None
    try:
        return ingest_op_log_file(run.op_log), None
    except InputFileError as e:
        return empty_op_log(), f"{e}; float_ops and the code view are unavailable"


def read_run_dir(run: RunDir, jobs: int, progress: Progress | None, digests: bool = False
                 ) -> tuple[dict[str, pl.DataFrame], list[str], dict[str, list[Any]],
                            frozenset[str]]:
    """The run dir's frames, warnings, what was read of each step file (stat and content
    digest, for the cache's key), and which of graph.pb and op_log.pb are there but could
    not be read (what the run lacks then says "could not be read", not "holds none")."""
    warnings: list[str] = []
    files: dict[str, list[Any]] = {}
    steps: list[StepFrames] = []
    seen: set[bytes] = set()
    partition_graphs: list[pl.DataFrame] = []
    # graph.pb and op_log.pb (Python walks) are read beside the step files, whose
    # decoding leaves the main thread idle. Partition graphs are parsed with the step file
    # that first holds them, so that a bad one skips that file only.
    with Background(1, "runlens-side") as side:
        graph_read = side.submit(_read_graph, run)
        op_log_read = side.submit(_read_op_log, run)
        for batch in _ingest_steps(run, jobs, progress, digests):
            warnings.extend(batch.errors)
            files.update(batch.files)
            if batch.frames is not None:
                steps.append(batch.frames)
            partition_graphs += [g for digest, g in batch.graphs.items() if digest not in seen]
            seen.update(batch.graphs)
        graph, graph_warning = graph_read.result()
        (op_log, code), op_log_warning = op_log_read.result()
    if not steps:
        problems = [*run.warnings, *warnings]
        raise RunDirError(
            f"{run.path}: no readable step file ({len(problems)} skipped; first: "
            f"{problems[0] if problems else 'none'})"
        )
    warnings += [w for w in (graph_warning, op_log_warning) if w]
    graph_frames = ([graph] if graph is not None else []) + partition_graphs
    graph_nodes = _concat(graph_frames, GRAPH_NODE_SCHEMA).unique(
        subset=["name", "source", "device"], keep="first", maintain_order=True)
    worker = pl.lit(run.worker).alias("worker")
    merged = stepfiles.concat_step_frames(steps, in_order=True)
    out = {
        "memory": merged.memory,
        "allocations": merged.allocations,
        "threads": merged.threads,
        "graph_nodes": graph_nodes,
        "op_log": op_log,
        "code": code,
        "step_spans": pl.DataFrame(schema=STEP_SPAN_SCHEMA),
        "attribution": pl.DataFrame(schema=ATTRIBUTION_SCHEMA),
        "timing": pl.DataFrame(schema=TIMING_SCHEMA),
        "hlo_work": pl.DataFrame(schema=HLO_WORK_SCHEMA),
        "device_facts": pl.DataFrame(schema=DEVICE_SCHEMA),
        "device_steps": pl.DataFrame(schema=DEVICE_STEP_SCHEMA),
    }
    frames = {k: v.with_columns(worker) for k, v in out.items()}
    # Executions and outputs are identified by key; the worker is a column of the keys.
    frames["keys"] = merged.keys.select(worker, pl.all())
    frames["output_keys"] = merged.output_keys.select(worker, pl.all())
    frames["executions"] = merged.nodes
    frames["output_rows"] = merged.outputs
    unreadable = frozenset(name for name, why in (("graph.pb", graph_warning),
                                                  ("op_log.pb", op_log_warning)) if why)
    return frames, warnings, files, unreadable
