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
    wants: tuple[str, ...] = ()  # what it computes besides aggregates: "summary", "views"
    jobs: int = 1  # ingest's threads/processes inside the task (the local engine shares cores)
    view: Any = None  # "views": the ViewOptions its pieces are for (analysis.hostviews)


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


@dataclass
class Gathered:
    """What the driver says of a run's hosts' tasks: the files read, the warnings in
    load.load's order, and what the hosts lack (their pieces are `keep`'s)."""

    paths: list[str]
    warnings: list[str]
    lacks: dict[str, str]


def gather(path: str | os.PathLike[str], options: loading.LoadOptions, engine: str,
           want: str, keep: Callable[[sources.Part, dict[str, Any] | None], None], *,
           view: Any = None, start: Callable[[list[sources.Part]], None] | None = None,
           progress: Progress | None = None, on_note: Warn | None = None) -> Gathered | None:
    """Run one task per part of the run at `path`, each computing its `want` pieces
    ("summary": analysis.hostsummary; "views": analysis.hostviews for ViewOptions
    `view`), given to `keep(part, pieces)` as they come (None: the part's task failed),
    so that the driver holds only what `keep` keeps; `start(parts)` is told the parts
    before their tasks run. None when the run has one part or is read without the cache
    (the tasks could give it back only through the cache): then it is loaded as before."""
    import polars as pl

    from ..errors import RunlensError

    reader = sources.detect(path, options.source)
    parts = reader.parts(Path(path), options.chosen)
    if len(parts) < 2 or not options.use_cache:
        return None
    cache_dir = os.environ.get(loading.cache.CACHE_DIR_VARIABLE) or None
    if start is not None:
        start(parts)

    def each(index: int, result: HostResult) -> None:
        keep(parts[index], None if result.error is not None else
             {name: pl.read_ipc(data) for name, data in result.pieces})

    tasks = [HostTask(reader.kind, p, cache_dir, (want,), view=view) for p in parts]
    results = run_tasks(engine, tasks, progress, each)
    gathered = Gathered([], [], {})
    for part, result in zip(parts, results, strict=True):  # as load.load says them
        gathered.warnings.extend(part.warnings)
        if result.error is not None:
            gathered.warnings.append(f"{result.error}; worker {part.worker} left out")
            continue
        gathered.lacks.update(result.lacks)
        gathered.warnings.extend(result.warnings)
        gathered.paths.append(shown(part.path))
    if on_note is not None:
        what = "summary" if want == "summary" else "view"
        on_note(f"{len(parts)} hosts read by the {engine} engine ({len(gathered.paths)} "
                f"read, {len(parts) - len(gathered.paths)} left out); the {what} is made of "
                "their per-host pieces")
    if not gathered.paths:
        raise RunlensError(f"{path}: no worker could be read ({gathered.warnings[-1]})")
    return gathered


def summary(path: str | os.PathLike[str], options: loading.LoadOptions, engine: str,
            choice: Any, *, progress: Progress | None = None,
            on_note: Warn | None = None) -> dict | None:
    """`analyze summary` of a run of several parts from its hosts' pieces (one task
    each; analysis.hostsummary): the driver holds no host's events. None when the run
    has one part or is read without the cache: then it is loaded as before."""
    from ..analysis.hostsummary import compact, summary_of

    held: list[Any] = []

    def keep(_part: sources.Part, pieces: dict[str, Any] | None) -> None:
        if pieces is not None:
            held.append(pieces)
        if len(held) > _COMPACT_EVERY:  # the hosts' node names kept once
            held[:] = [compact(held)]

    got = gather(path, options, engine, "summary", keep, progress=progress, on_note=on_note)
    if got is None:
        return None
    return summary_of(held, choice, paths=got.paths, warnings=got.warnings, lacks=got.lacks)


def views(path: str | os.PathLike[str], options: loading.LoadOptions, engine: str,
          view: Any, *, progress: Progress | None = None,
          on_note: Warn | None = None) -> tuple[Any, list[str]] | None:
    """`analyze ops|scopes` of a run of several parts: (analysis.hostviews.HostViews of
    its hosts' pieces for ViewOptions `view`, the warnings). The driver holds the hosts'
    node stats folded into one row per node (analysis.nodefold), never a host's events.
    None as `gather`, and when the hosts' workers cannot be folded in order (a worker in
    two parts, a part of several workers): then the run is loaded."""
    from ..analysis.hostviews import HostViews

    made = HostViews()
    got = gather(path, options, engine, "views", made.give, view=view, start=made.start,
                 progress=progress, on_note=on_note)
    if got is None or made.folder.mixed:
        return None
    made.lacks = got.lacks
    return made, got.warnings


def aggregates_of(results: list[HostResult]) -> Any:
    """The hosts' aggregates as one polars frame (worker first), for scripts and tests."""
    import polars as pl

    frames = [pl.read_ipc(r.aggregates).with_columns(worker=pl.lit(r.worker))
              for r in results if r.error is None]
    return pl.concat(frames).select("worker", pl.exclude("worker")) if frames else None
