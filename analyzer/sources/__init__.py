"""Sources: each input format runlens reads is one module here plus a line in
analyzer/registries.py SOURCES.

A source says whether a path is its kind (`accepts`), splits it into parts (one per
worker: the unit that is read, cached and merged), names the files a part's result
depends on (the cache key covers them), and reads a part into the raw frames that
analyzer.load turns into a Run. What a format does not hold stays empty and is named in
`lacks` (what -> why), so that views and checkers can say what they skipped instead of
inventing it.

Raw frames (SourceFrames.frames); `raw_frames` below adds the `worker` column where it
belongs (keys, output_keys and the per-worker frames) and the frames a source leaves out:
- `executions` (schema.NODE_SCHEMA: numbers and a key_id) and `keys` (worker, lane,
  node_name, timeline_label), or, simpler for a new source, `nodes`: one row per
  execution with NODE_SCHEMA's numbers (no key_id) and lane, node_name, timeline_label;
  `raw_frames` splits it (`split_nodes`);
- `output_rows` + `output_keys`, `memory`, `allocations`, `threads`, `graph_nodes`,
  `op_log`, `code`: analyzer/schema.py's schemas; `empty_frames` gives the empty ones.
How to add a source: docs/sources.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import polars as pl

from .. import registries, schema
from ..errors import RunDirError
from ..registries import SOURCES

Progress = Callable[[int, int], None]



@dataclass(frozen=True)
class Part:
    """One worker's input, read as one unit."""

    kind: str
    path: Path  # the file or folder this part was found at
    worker: str
    files: tuple[str, ...]  # every file its frames depend on (the cache key covers them)
    detail: Any = None  # the source's own description of the part (e.g. a RunDir)
    # What finding the part could not read (one line each, naming the file): reported on
    # every load, cached or not.
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Selection:
    """What the user picked among what a path holds (command-line flags)."""

    workers: bool = False  # merge the parts as workers even when they are not one job
    profile_run: str | None = None  # a TensorBoard logdir's profile run (default: newest)


@dataclass
class SourceFrames:
    """A part, read: raw frames (see the module docstring), warnings, what it lacks."""

    frames: dict[str, pl.DataFrame]
    warnings: list[str] = field(default_factory=list)
    lacks: dict[str, str] = field(default_factory=dict)
    # Per file read: [size, mtime_ns, ctime_ns, inode, analyzer.digest.of(its bytes)], for
    # the cache's key (files not here are read again by the cache writer).
    digests: dict[str, list[Any]] = field(default_factory=dict)


class Source(Protocol):
    kind: str  # the --source name
    description: str  # one line: what files these are
    files: str  # a few words: the file names it looks for (the not-a-profile error)

    def accepts(self, path: Path) -> bool: ...

    def parts(self, path: Path, chosen: Selection) -> list[Part]: ...

    def read(self, part: Part, jobs: int, progress: Progress | None) -> SourceFrames: ...


def registered() -> list[Source]:
    """Every source, in detection order (modules are imported on first use)."""
    return [registries.load(target) for target in SOURCES.values()]


def detect(path: str | os.PathLike[str], kind: str | None = None) -> Source:
    """The source that reads `path` (`kind` forces one); RunDirError naming what runlens
    reads when none does."""
    p = Path(path)
    if kind is not None:
        by_kind = {s.kind: s for s in registered()}
        if kind not in by_kind:
            raise RunDirError(f"unknown source {kind!r}; runlens reads: "
                              + ", ".join(sorted(by_kind)))
        return by_kind[kind]
    try:
        p.stat()
    except FileNotFoundError:
        raise RunDirError(f"{p}: no such file or directory") from None
    except OSError as e:  # a folder on the way that cannot be searched, a loop...
        raise RunDirError(f"{p}: cannot read ({e.strerror or e})") from None
    # Each source's module is imported only when the ones before it refused the path: a
    # run dir's command imports no XSpace reader.
    for target in SOURCES.values():
        source = registries.load(target)
        if source.accepts(p):
            return source
    sources = registered()
    if p.is_file():  # a damaged copy of a profile: say how it was damaged, not what we read
        from . import damage
        try:
            with p.open("rb") as f:
                why = damage.hint(f.read(65536))
        except OSError:
            why = ""
        if why:
            raise RunDirError(f"{p}: not a profile runlens reads{why}")
    # One short line (it used to list every source's description: ~900 characters).
    raise RunDirError(f"{p}: not a profile runlens reads (found none of: "
                      + ", ".join(getattr(s, "files", s.kind) for s in sources)
                      + "; --source KIND forces a reader, docs/sources.md)")


# Key columns of the raw `keys` frame, and the per-worker frames every part gives.
RAW_KEY_COLUMNS = ["worker", "lane", "node_name", "timeline_label"]


def empty_frames(worker: str) -> dict[str, pl.DataFrame]:
    """Every raw frame, empty (analyzer/schema.py's, with the worker column): a source
    replaces those its format holds."""
    lit = pl.lit(worker).alias("worker")

    def empty(schema: dict) -> pl.DataFrame:
        return pl.DataFrame(schema=schema)

    frames = {name: empty(columns).with_columns(lit)
              for name, columns in schema.PLAIN_FRAMES.items()}
    frames["executions"] = empty(schema.NODE_SCHEMA)
    frames["keys"] = empty({"worker": pl.String, **schema.KEY_SCHEMA})
    frames["output_rows"] = empty(schema.OUTPUT_SCHEMA)
    frames["output_keys"] = empty({"worker": pl.String, **schema.OUTPUT_KEY_SCHEMA})
    return frames


def split_nodes(nodes: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A plain `nodes` frame (NODE_SCHEMA's numbers but key_id, plus RAW_KEY_COLUMNS) ->
    (executions, keys): each distinct key once, numbered in order of appearance."""
    from ..model import split_keys

    numbers = [c for c in schema.NODE_SCHEMA if c != "key_id"]
    rows = nodes.select(*numbers, *RAW_KEY_COLUMNS).cast(
        {c: schema.NODE_SCHEMA[c] for c in numbers})  # type: ignore[arg-type]
    executions, keys = split_keys(rows, RAW_KEY_COLUMNS)
    return executions.select(list(schema.NODE_SCHEMA)), keys


def raw_frames(frames: dict[str, pl.DataFrame], worker: str) -> dict[str, pl.DataFrame]:
    """A source's frames completed into the raw frames load.py expects: `nodes` split
    into executions and keys, missing frames empty, a worker column where it belongs."""
    out = empty_frames(worker)
    for name, frame in frames.items():
        if name == "nodes":
            if "worker" not in frame.columns:
                frame = frame.with_columns(pl.lit(worker).alias("worker"))
            out["executions"], out["keys"] = split_nodes(frame)
        elif name in out:
            if name in schema.PLAIN_FRAMES and "worker" not in frame.columns:
                frame = frame.with_columns(pl.lit(worker).alias("worker"))
            out[name] = frame
        else:
            raise ValueError(f"unknown raw frame {name!r}")
    return out
