"""Engines: who reads a run's parts (its host files, TF1 worker dirs) when there are
several, before the driver merges them (docs/fleet.md).

Each part is one task (`hosttask.read_host`): it reads the part (from its cache, or the
source) with one thread, writes the part's cache (beside the file, or under
$RUNLENS_CACHE_DIR: shared storage when the tasks run on other machines) and returns a
`HostResult` with the host's aggregates (per step, device and op type). The driver then
loads the run from those caches, lazily, as `load.load` always does: the output is the
one a sequential read gives, byte for byte, whichever engine ran the tasks. A task that
fails leaves its host out with one warning naming it; the rest are analysed.

`local` (the default) runs the tasks in a process pool on this machine; `ray` on a Ray
cluster (RAY_ADDRESS, else a local one). registries.ENGINES names them; each module has
`run(tasks, progress) -> list[HostResult]` in the tasks' order.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import load as loading
from .. import registries, sources
from ..model import Run
from ..readfile import shown

Progress = Callable[[int, int], None]
Warn = Callable[[str], None]


@dataclass(frozen=True)
class HostTask:
    """What one task reads: a part of a source, and where caches go (None: the default
    places, which the process running the task decides from its own environment)."""

    kind: str
    part: sources.Part
    cache_dir: str | None
    wants: tuple[str, ...] = ()  # what it computes besides aggregates: "summary" (pieces)
    jobs: int = 1  # ingest's threads/processes inside the task (the local engine shares cores)


@dataclass(frozen=True)
class HostResult:
    """What one task gives back: small, whatever the host's size."""

    worker: str
    path: str
    error: str | None  # one line naming the file; None when the host was read
    aggregates: bytes  # Arrow IPC: step, device, op_type, executions, op_ns (hosttask)
    warnings: tuple[str, ...]
    seconds: float  # the task's own time
    ran_by: str  # the process (pid) or Ray task id that ran it
    lacks: tuple[tuple[str, str], ...] = ()  # what the host's format lacks, and why
    pieces: tuple[tuple[str, bytes], ...] = ()  # analysis.hostsummary's, as Arrow IPC


Each = Callable[[int, "HostResult"], None]
_COMPACT_EVERY = 16  # hosts' summary pieces held before they are put together


def run_tasks(engine: str, tasks: list[HostTask], progress: Progress | None = None,
              each: Each | None = None) -> list[HostResult]:
    """The tasks run by `engine` (a name of registries.ENGINES), results in their order.
    With `each`, each result is given to it as it comes (task index, result) and kept
    without its pieces, so that the driver holds only what `each` keeps of them."""
    return registries.load(registries.ENGINES[engine])(tasks, progress, each)


def handed(index: int, result: HostResult, each: Each | None) -> HostResult:
    """`result` given to `each` (when there is one) and kept without its pieces."""
    if each is None:
        return result
    each(index, result)
    return dataclasses.replace(result, pieces=())


def load_run(path: str | os.PathLike[str], options: loading.LoadOptions, engine: str, *,
             progress: Progress | None = None, on_warning: Warn | None = None,
             on_note: Warn | None = None) -> Run:
    """`load.load`, with a run of several parts read first by `engine`'s tasks (one per
    part); parts whose task failed are left out with a warning. A run of one part, or
    one read without the cache (--no-cache: the tasks could give it back only through
    the cache), is read in this process as before."""
    reader = sources.detect(path, options.source)
    parts = reader.parts(Path(path), options.chosen)
    if len(parts) < 2 or not options.use_cache:
        return loading.load(path, options, progress=progress, on_warning=on_warning)
    cache_dir = os.environ.get(loading.cache.CACHE_DIR_VARIABLE) or None
    tasks = [HostTask(reader.kind, part, cache_dir) for part in parts]
    results = run_tasks(engine, tasks, progress)
    failed = {r.path: r.error for r in results if r.error is not None}
    if on_note is not None:
        on_note(f"{len(parts)} hosts read by the {engine} engine "
                f"({len(parts) - len(failed)} read, {len(failed)} left out); "
                "this command reads every host's events in the driver")
    options = dataclasses.replace(options, left_out={**options.left_out, **failed})
    return loading.load(path, options, progress=None, on_warning=on_warning)


def summary(path: str | os.PathLike[str], options: loading.LoadOptions, engine: str,
            choice: Any, *, progress: Progress | None = None,
            on_note: Warn | None = None) -> dict | None:
    """`analyze summary` of a run of several parts from its hosts' pieces (one task
    each; analysis.hostsummary): the driver holds no host's events. None when the run
    has one part or is read without the cache: then it is loaded as before."""
    import polars as pl

    from ..analysis.hostsummary import compact, summary_of
    from ..errors import RunDirError

    reader = sources.detect(path, options.source)
    parts = reader.parts(Path(path), options.chosen)
    if len(parts) < 2 or not options.use_cache:
        return None
    cache_dir = os.environ.get(loading.cache.CACHE_DIR_VARIABLE) or None
    held: list[Any] = []  # hosts' pieces, compacted as they come (hostsummary.compact)

    def each(_index: int, result: HostResult) -> None:
        if result.error is None:
            held.append({name: pl.read_ipc(data) for name, data in result.pieces})
        if len(held) > _COMPACT_EVERY:
            held[:] = [compact(held)]

    results = run_tasks(engine, [HostTask(reader.kind, p, cache_dir, ("summary",))
                                 for p in parts], progress, each)
    warnings: list[str] = []
    lacks: dict[str, str] = {}
    paths = []
    for part, result in zip(parts, results, strict=True):  # as load.load says them
        warnings.extend(part.warnings)
        if result.error is not None:
            warnings.append(f"{result.error}; worker {part.worker} left out")
            continue
        lacks.update(result.lacks)
        warnings.extend(result.warnings)
        paths.append(shown(part.path))
    if on_note is not None:
        on_note(f"{len(parts)} hosts read by the {engine} engine ({len(paths)} read, "
                f"{len(parts) - len(paths)} left out); the summary is made of their "
                "per-host pieces")
    if not paths:
        raise RunDirError(f"{path}: no worker could be read ({warnings[-1]})")
    return summary_of(held, choice, paths=paths, warnings=warnings, lacks=lacks)


def aggregates_of(results: list[HostResult]) -> Any:
    """The hosts' aggregates as one polars frame (worker first), for scripts and tests."""
    import polars as pl

    frames = [pl.read_ipc(r.aggregates).with_columns(worker=pl.lit(r.worker))
              for r in results if r.error is None]
    return pl.concat(frames).select("worker", pl.exclude("worker")) if frames else None
