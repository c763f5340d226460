"""Load any profile runlens reads into a `Run`: PATH -> its source (analyzer.sources)
-> the source's parts (one per worker) -> each part's frames (from the cache, or read by
the source) -> one Run.

What each source reads is its own (a run directory's reader: analyzer/ingest/rundir.py);
here, for any source: a part that cannot be read is left out with a one-line warning
when there are others. A second load of the same run reads the Parquet cache
(analyzer/cache.py); a cache that cannot be read, even one found damaged only when a
frame is first used, means the part is read again, with one warning.

Loading computes nothing the analysis derives (per-node numbers, trees: the first view
that needs one computes it, analyzer.products, and the cache keeps it); it gives the Run
an `origin` that says where those products are cached.
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from . import cache, sources
from .errors import InputFileError, RunDirError
from .model import Run, built, derive_keys
from .origin import Origin
from .readfile import shown
from .schema import LACKS_SCHEMA

Progress = Callable[[int, int], None]
Warn = Callable[[str], None]
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


def read_part(source: sources.Source, part: sources.Part, jobs: int) -> Run:
    """One part as a Run of its own (from its cache, else read and the cache written),
    its warnings as `load` gives them for it: what an engine's task (analyzer/engines)
    does for one host."""
    warnings: list[str] = []
    frames, part_warnings, _ = _cached_frames(source, part, jobs, None, warnings.append)
    lacking = built(frames["lacks"])
    lacks = dict(zip(lacking.get_column("what").to_list(),
                     lacking.get_column("why").to_list(), strict=True))
    return Run.from_frames(frames, paths=[part.path], warnings=warnings + part_warnings,
                           lacks=lacks)


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


@dataclass(frozen=True)
class LoadOptions:
    """How to read a PATH: what the command line's shared flags chose, as one typed
    object passed from the CLI to loading (--no-cache, --source, --workers,
    --profile-run; --engine: analyzer/engines)."""

    use_cache: bool = True
    source: str | None = None  # a kind of analyzer.registries.SOURCES; None: detect it
    chosen: sources.Selection = field(default_factory=sources.Selection)
    jobs: int | None = None  # threads/processes of ingest; None: one per core
    # parts (by path) not to read, each with why (an engine's task failed on it)
    left_out: dict[str, str] = field(default_factory=dict)


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
    """`load` with the options as keywords (the engine's API for scripts and tests)."""
    options = LoadOptions(use_cache, source, chosen or sources.Selection(), jobs)
    return load(path, options, progress=progress, on_warning=on_warning)


def load(path: str | os.PathLike[str], options: LoadOptions, *,
         progress: Progress | None = None, on_warning: Warn | None = None) -> Run:
    """Read the profile at `path` into one Run (worker is a column): the source that
    accepts it (`options.source`, a kind, forces one) splits it into parts, each read (or
    taken from its cache) on its own.

    A cached part is read lazily: only the frames an analysis touches are loaded.
    `options.chosen`: what the user picked among what the path holds (e.g. `workers`
    merges run dirs that do not look like one job). Raises RunDirError when no source
    reads the path or nothing in it can be read.
    A part that cannot be read is left out with a warning when there are others. Warnings
    found after this returns (a cache damaged under a frame read later) are added to
    `Run.warnings` and given to `on_warning`.
    """
    use_cache = options.use_cache
    reader = sources.detect(path, options.source)
    parts = reader.parts(Path(path), options.chosen)
    jobs = options.jobs or os.cpu_count() or 1
    cache.wait()  # a cache this process is still writing is read once written
    frames_of: list[dict[str, Any]] = []
    warnings: list[str] = []
    lacks: dict[str, str] = {}
    loaded: list[sources.Part] = []
    loading = True

    def warn(message: str) -> None:
        message = shown(message)  # a name in any bytes, as \xNN (readfile.shown)
        warnings.append(message)
        if on_warning is not None and not loading:
            on_warning(message)

    stored: list[tuple[Future, object] | None] = []
    for part in parts:
        warnings.extend(map(shown, part.warnings))  # what finding the parts could not read
        frames: dict[str, Any]
        if str(part.path) in options.left_out:
            warnings.append(f"{options.left_out[str(part.path)]}; worker {part.worker} left out")
            continue
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
            warnings.append(shown(f"{e}; worker {part.worker} left out"))
            continue
        lacking = built(frames["lacks"])
        lacks.update(zip(lacking.get_column("what").to_list(),
                         lacking.get_column("why").to_list(), strict=True))
        frames_of.append(frames)
        stored.append(where)
        loaded.append(part)
        warnings.extend(map(shown, part_warnings))
    if not frames_of:
        raise RunDirError(f"{shown(path)}: no worker could be read ({warnings[-1]})")
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
