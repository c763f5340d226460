"""Columnar cache of ingested run dirs: Parquet files keyed by the inputs' size and mtime.

A second analysis of the same run reads columns only. The cache lives in the run dir's
`.runlens/` folder, or in the user cache dir when the run dir is read-only. Any problem
with the cache (missing, stale, unreadable, unwritable) means "no cache", never an error.

The cache is written in a background thread (`store_in_background`) while the analysis
goes on: the ingested frames first, the per-node numbers and trees as they are computed.
It appears at once, complete (a temporary folder renamed), or not at all. The process
waits for it before exiting, and `wait()` (which load_run calls) before reading again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import polars as pl

from analyzer.sources import Part

CACHE_VERSION = 10  # bump whenever ingest's frames change
# The Run's frames (the executions by key, the keys with derived columns), and what views
# need with their default options: the steps' warm-up/outlier flags, step -1's per-node
# numbers over the default steps (analyzer.stepselect), the code paths, the scope and
# code trees. Written in this order: the ones computed last come last.
FRAMES = ("executions", "keys", "output_rows", "output_keys", "memory", "allocations",
          "threads", "graph_nodes", "op_log", "code", "lacks", "step_flags", "node_stats",
          "code_paths", "scopes_tree", "code_tree")
# Numbers only, rows by the million: written uncompressed (1M executions: 0.08 s and
# 0.15 CPU-s for 44 MB, vs snappy's 0.12 s and 0.23 CPU-s for 22 MB).
UNCOMPRESSED = ("executions", "output_rows")


def fingerprint(part: Part) -> dict[str, Any]:
    """What the cache depends on: format version, the source, and every input file's size
    and mtime (the part's files, named relative to its folder)."""
    base = _folder(part)
    root = len(str(base / "x")) - 1
    entries = []
    for name in part.files:
        st = os.stat(name)
        entries.append([name[root:] if name.startswith(str(base)) else name,
                        st.st_size, st.st_mtime_ns])
    return {"cache_version": CACHE_VERSION, "source": part.kind, "worker": part.worker,
            "files": sorted(entries)}


def _folder(part: Part) -> Path:
    """The folder a part's cache goes in (beside a file part)."""
    return part.path if part.path.is_dir() else part.path.parent


def _user_cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "runlens"


def _locations(run: Part) -> list[Path]:
    digest = hashlib.sha256(f"{run.kind}:{run.path.resolve()}".encode()).hexdigest()[:16]
    # A run dir's cache is its own; other parts may share a folder, so theirs are named.
    name = "cache" if run.kind == "rundir" else f"cache-{run.kind}-{digest[:8]}"
    return [_folder(run) / ".runlens" / f"{name}-v{CACHE_VERSION}",
            _user_cache_root() / f"{digest}-v{CACHE_VERSION}"]


def load(run: Part, key: dict[str, Any]
         ) -> tuple[dict[str, Callable[[], pl.DataFrame]], list[str]] | None:
    """Readers of the cached frames and the warnings of `run` if the cache matches `key`.

    Frames are read when first used (a view needs node_stats, not the executions)."""
    for loc in _locations(run):
        try:
            meta = json.loads((loc / "key.json").read_text())
            if meta.get("key") != key:
                continue
            files = {name: loc / f"{name}.parquet" for name in FRAMES}
            if not all(f.is_file() for f in files.values()):
                continue
            readers: dict[str, Callable[[], pl.DataFrame]] = {
                name: functools.partial(pl.read_parquet, f) for name, f in files.items()}
            return readers, list(meta.get("warnings", []))
        except (OSError, ValueError):
            continue
    return None


CacheFrame = pl.DataFrame | Future  # a Future: a frame still being computed


def store(run: Part, key: dict[str, Any], frames: Mapping[str, CacheFrame],
          warnings: list[str]) -> Path | None:
    """Write the cache to the first writable location; returns it, or None if none is
    (or if a frame's Future fails: its computation failed, so there is no cache)."""
    for loc in _locations(run):
        try:
            loc.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=loc.parent))
        except OSError:
            continue
        try:
            for name in FRAMES:
                frame = frames[name]
                if isinstance(frame, Future):
                    try:
                        frame = frame.result()
                    except BaseException:
                        shutil.rmtree(tmp, ignore_errors=True)
                        return None
                # Frames but UNCOMPRESSED ones: snappy, the fastest to write at about
                # lz4's size.
                frame.write_parquet(tmp / f"{name}.parquet", statistics=False,
                                    compression="uncompressed" if name in UNCOMPRESSED
                                    else "snappy")
            (tmp / "key.json").write_text(json.dumps({"key": key, "warnings": warnings}))
            if loc.exists():
                shutil.rmtree(loc, ignore_errors=True)
            os.replace(tmp, loc)
            _remove_other_versions(loc)
            return loc
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            continue
    return None


_writer: ThreadPoolExecutor | None = None
_pending: list[Future] = []


def store_in_background(run: Part, key: dict[str, Any], frames: Mapping[str, CacheFrame],
                        warnings: list[str]) -> Future:
    """`store` in the cache's writer thread; frames given as Futures are written when the
    caller sets them (it must set or fail every one of them, or the writer waits)."""
    global _writer
    if _writer is None:
        # Its thread is joined when the interpreter exits: the cache is finished first.
        _writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="runlens-cache")
    future = _writer.submit(store, run, key, dict(frames), list(warnings))
    _pending.append(future)
    return future


def wait() -> None:
    """Until the caches being written by this process are written (or given up)."""
    while _pending:
        try:
            _pending.pop(0).result()
        except Exception:  # noqa: BLE001 - a cache that could not be written is no cache
            pass


def _remove_other_versions(loc: Path) -> None:
    """Caches that an older (or newer) runlens wrote next to `loc` are never read again."""
    prefix = loc.name.rsplit("-v", 1)[0] + "-v"
    for other in loc.parent.glob(f"{prefix}*"):
        if other != loc and other.is_dir() and other.name[len(prefix):].isdigit():
            shutil.rmtree(other, ignore_errors=True)
