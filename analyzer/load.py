"""Load any profile runlens reads into a `Run`: PATH -> its source (analyzer.sources)
-> the source's parts (one per worker) -> each part's frames (from the cache, or read by
the source) -> one Run.

For run directories (analyzer/sources/rundir.py reads them with `_load_run_dir`), step
files are ingested in batches, in parallel threads (C decoder) or processes
(protobuf fallback); a step file that cannot be read is skipped with a one-line warning
naming it, and the other steps still load; likewise a worker of a multi-worker run. A
second load of the same run reads the Parquet cache (analyzer/cache.py); a cache that
cannot be read, even one found damaged only when a frame is first used, means the run
dir is ingested again, with one warning.

Loading computes nothing the analysis derives (per-node numbers, trees: the first view
that needs one computes it, analyzer.products, and the cache keeps it); it gives the Run
an `origin` that says where those products are cached.
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import polars as pl

from . import cache, ingest, sources
from .background import Background, map_in_processes
from .errors import InputFileError, RunDirError
from .model import Run, built, derive_keys
from .productcache import Origin
from .rundir import RunDir
from .schema import (
    ATTRIBUTION_SCHEMA,
    GRAPH_NODE_SCHEMA,
    LACKS_SCHEMA,
    STEP_SPAN_SCHEMA,
    TIMING_SCHEMA,
)

Progress = Callable[[int, int], None]
Warn = Callable[[str], None]
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


def _batches(items: list[ingest.StepItem], jobs: int) -> list[list[ingest.StepItem]]:
    """Contiguous batches, as few as gives every worker the same number (each batch costs
    its own frames, and the run's columns one chunk more: 1M node stats ingested in 20
    batches took ~15% longer than in 4), of at most BATCH_FILES files."""
    count = -(-len(items) // BATCH_FILES)
    count = max(jobs, -(-count // jobs) * jobs)
    size = max(1, -(-len(items) // count))
    return [items[i : i + size] for i in range(0, len(items), size)]


_seen_graphs: set[bytes] = set()  # per worker process: partition graphs already sent back
_parsed_graphs = ingest.PartitionGraphs()  # per worker process


def _ingest_batch_in_process(batch: list[ingest.StepItem], digests: bool) -> ingest.StepBatch:
    """Process-pool worker: a batch, without the partition graphs it already sent."""
    result = ingest.ingest_step_files(batch, partition_graphs=_parsed_graphs,
                                      digests=digests)
    for digest in list(result.graphs):
        if digest in _seen_graphs:
            del result.graphs[digest]
        _seen_graphs.add(digest)
    return result


def _ingest_steps(run: RunDir, jobs: int, progress: Progress | None, digests: bool = False
                  ) -> list[ingest.StepBatch]:
    """Every step file of `run`, in batches, in parallel where it pays (`digests`: with
    each file's content digest, for the cache's key).

    With the C decoder, threads (it releases the GIL; no process start-up, no pickling);
    without it, processes once there is enough to do (the protobuf walk holds the GIL).
    """
    sizes = _manifest_sizes(run)
    items: list[ingest.StepItem] = [(p, s, sizes.get(s)) for s, p in run.steps.items()]
    batches = _batches(items, jobs)
    ingest_batch = functools.partial(ingest.ingest_step_files,
                                     partition_graphs=ingest.PartitionGraphs(), digests=digests)
    if jobs > 1 and len(batches) > 1:
        if ingest.native_decoder_available():
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


def _collect(results: Iterable[ingest.StepBatch], batches: list[list[ingest.StepItem]],
             progress: Progress | None) -> list[ingest.StepBatch]:
    out = []
    total, done = sum(len(b) for b in batches), 0
    for batch, result in zip(batches, results, strict=True):
        out.append(result)
        done += len(batch)
        if progress:
            progress(done, total)
    return out


def _ingest_in_processes(batches: list[list[ingest.StepItem]], jobs: int,
                         progress: Progress | None, digests: bool
                         ) -> list[ingest.StepBatch] | None:
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
        return ingest.ingest_graph_file(run.graph), None
    except InputFileError as e:
        return None, f"{e}; op types come from partition graphs and timeline labels"


def _read_op_log(run: RunDir) -> tuple[tuple[pl.DataFrame, pl.DataFrame], str | None]:
    """op_log.pb's float ops and code traces, or empty ones and the warning why."""
    if run.op_log is None:
        return ingest.empty_op_log(), None
    try:
        return ingest.ingest_op_log_file(run.op_log), None
    except InputFileError as e:
        return ingest.empty_op_log(), f"{e}; float_ops and the code view are unavailable"


def _load_run_dir(run: RunDir, jobs: int, progress: Progress | None, digests: bool = False
                  ) -> tuple[dict[str, pl.DataFrame], list[str], dict[str, list[Any]]]:
    """The run dir's frames, warnings, and what was read of each step file (stat and
    content digest, for the cache's key)."""
    warnings: list[str] = []
    files: dict[str, list[Any]] = {}
    steps: list[ingest.StepFrames] = []
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
    merged = ingest.concat_step_frames(steps, in_order=True)
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
    }
    frames = {k: v.with_columns(worker) for k, v in out.items()}
    # Executions and outputs are identified by key; the worker is a column of the keys.
    frames["keys"] = merged.keys.select(worker, pl.all())
    frames["output_keys"] = merged.output_keys.select(worker, pl.all())
    frames["executions"] = merged.nodes
    frames["output_rows"] = merged.outputs
    return frames, warnings, files


def _fresh_frames(source: sources.Source, part: sources.Part, jobs: int,
                  progress: Progress | None, cache_key: dict[str, Any] | None
                  ) -> tuple[dict[str, pl.DataFrame], list[str], Future | None]:
    """Read one part: its frames with derived columns (and `lacks`, what its format does
    not hold, as a frame). With a `cache_key`, the cache is written in the background as
    this goes on; the Future gives its data folder once written."""
    read = source.read(part, jobs, progress)
    frames, warnings = sources.raw_frames(read.frames, part.worker), read.warnings
    frames["lacks"] = pl.DataFrame({"what": list(read.lacks), "why": list(read.lacks.values())},
                                   schema=LACKS_SCHEMA)
    frames["keys"] = derive_keys(frames["keys"], frames["graph_nodes"])
    if cache_key is None:
        return frames, warnings, None
    stored = cache.store_in_background(part, cache_key, frames, warnings, read.digests)
    return frames, warnings, stored


_KEYED = {"executions": ("key_id", "keys"), "output_rows": ("out_key", "output_keys")}


def _merged(parts: list[dict[str, Any]], name: str) -> Any:
    """One frame over all run dirs: the part itself for one run dir (kept lazy), else a
    reader that concatenates the parts when first used."""
    if len(parts) == 1:
        return parts[0][name]

    def read(part: dict[str, Any], name: str) -> pl.DataFrame:
        value = part[name] = built(part[name])
        return value

    def concat() -> pl.DataFrame:
        frames = [read(p, name) for p in parts]
        if name in _KEYED:  # each run dir numbers its keys from 0
            column, keys = _KEYED[name]
            offsets = itertools.accumulate((read(p, keys).height for p in parts), initial=0)
            frames = [f.with_columns(pl.col(column) + offset)
                      for f, offset in zip(frames, offsets, strict=False)]
        return pl.concat(frames, how="vertical_relaxed")

    return concat


# A part's frames, its warnings, and where its cache is (a Future of the data folder, and
# what holds it), or None (no cache).
Loaded = tuple[dict[str, Any], list[str], tuple[Future, object] | None]


def _cached_frames(source: sources.Source, part: sources.Part, jobs: int,
                   progress: Progress | None, warn: Warn) -> Loaded:
    """The part's frames from its cache (read when first used), or read (and the cache
    written) when there is none that matches, or it cannot be read."""
    try:
        key: dict[str, Any] | None = cache.fingerprint(part)
    except OSError:  # a file went away since the scan: the source reports it; no cache
        key = None
    cached = cache.load(part, key) if key is not None else None
    if isinstance(cached, cache.CacheDamaged):
        warn(f"{cached}; recomputed")
    elif cached is not None:
        folder: Future = Future()
        folder.set_result(cached.folder)
        return (_guarded(cached.readers, source, part, jobs, key, warn), cached.warnings,
                (folder, cached.lease))
    frames, warnings, stored = _fresh_frames(source, part, jobs, progress, key)
    return frames, warnings, (stored, None) if stored is not None else None


def _guarded(readers: cache.Readers, source: sources.Source, part: sources.Part, jobs: int,
             key: dict[str, Any] | None, warn: Warn) -> dict[str, Callable[[], pl.DataFrame]]:
    """Readers of cached frames that, if the cache turns out damaged when a frame is read,
    read the part again (once, rewriting the cache) and give the frame from there."""
    fresh: list[dict[str, pl.DataFrame]] = []
    lock = threading.Lock()  # views may read frames from several threads

    def read(name: str) -> pl.DataFrame:
        if not fresh:
            try:
                return readers[name]()
            except cache.CacheDamaged as e:
                with lock:
                    if not fresh:
                        warn(f"{part.path}: cache damaged ({e}); recomputed")
                        fresh.append(_fresh_frames(source, part, jobs, None, key)[0])
        return fresh[0][name]

    return {name: functools.partial(read, name) for name in readers}


def load_run(
    path: str | os.PathLike[str],
    *,
    use_cache: bool = True,
    jobs: int | None = None,
    progress: Progress | None = None,
    source: str | None = None,
    chosen: sources.Selection | None = None,
    on_warning: Warn | None = None,
) -> Run:
    """Read the profile at `path` into one Run (worker is a column): the source that
    accepts it (`source`, a kind, forces one) splits it into parts, each read (or taken
    from its cache) on its own.

    A cached part is read lazily: only the frames an analysis touches are loaded.
    `chosen`: what the user picked among what the path holds (e.g. `workers` merges run
    dirs that do not look like one job). Raises RunDirError when no source reads the path
    or nothing in it can be read.
    A part that cannot be read is left out with a warning when there are others. Warnings
    found after this returns (a cache damaged under a frame read later) are added to
    `Run.warnings` and given to `on_warning`.
    """
    reader = sources.detect(path, source)
    parts = reader.parts(Path(path), chosen or sources.Selection())
    jobs = jobs or os.cpu_count() or 1
    cache.wait()  # a cache this process is still writing is read once written
    frames_of: list[dict[str, Any]] = []
    warnings: list[str] = []
    lacks: dict[str, str] = {}
    loaded: list[sources.Part] = []
    loading = True

    def warn(message: str) -> None:
        warnings.append(message)
        if on_warning is not None and not loading:
            on_warning(message)

    stored: list[tuple[Future, object] | None] = []
    for part in parts:
        warnings.extend(part.warnings)  # what finding the parts could not read
        frames: dict[str, Any]
        try:
            if use_cache:
                frames, part_warnings, where = _cached_frames(reader, part, jobs, progress,
                                                              warn)
            else:
                frames, part_warnings, _ = _fresh_frames(reader, part, jobs, progress, None)
                where = None
        except (RunDirError, InputFileError) as e:
            if len(parts) == 1:
                raise
            warnings.append(f"{e}; worker {part.worker} left out")
            continue
        lacking = built(frames["lacks"])
        lacks.update(zip(lacking.get_column("what").to_list(),
                         lacking.get_column("why").to_list(), strict=True))
        frames_of.append(frames)
        stored.append(where)
        loaded.append(part)
        warnings.extend(part_warnings)
    if not frames_of:
        raise RunDirError(f"{path}: no worker could be read ({warnings[-1]})")
    loading = False
    frames = {name: _merged(frames_of, name) for name in Run.FRAMES}
    # What is derived from the Run is cached (analyzer.products) when every part is.
    origin = None
    if use_cache and all(s is not None for s in stored):
        origin = Origin.of([s[0] for s in stored if s is not None],
                           holds=tuple(s[1] for s in stored if s is not None and s[1]))
    # The same list of warnings: those found later appear in it.
    return Run.from_frames(frames, paths=[p.path for p in loaded], warnings=warnings,
                           lacks=lacks, origin=origin)
