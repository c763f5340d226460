"""Write a timeline (analyzer/timeline.py) as a Chrome Trace JSON file, streamed.

The document is never held as one string: the header and metadata go first, then each
part's events in chunks of rows, each chunk rendered by analyzer/timeline/jsonrows.py (one JSON
object per row, prefixed by the comma that separates it from the one before; C when
built, else polars) and appended to the file, gzip-compressed when the name ends in .gz,
by a writer thread while the next chunk is rendered. The file appears under its name only when it
is complete (written to a temporary name in the same directory, then renamed).
"""

from __future__ import annotations

import gzip
import json
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, cast

from ..background import Background
from ..errors import RunlensError
from ..model import Run
from ..output import open_output
from ..rundir import check_output, check_output_dir
from ..timeline import TimelineOptions, Trace, build_trace

Progress = Callable[[int, int], None]



WARN_BYTES = 200 * 1000 * 1000
CHUNK_ROWS = 4_000  # ~1.4 MB of op events: rendered in cache, no fresh pages per chunk
GZIP_LEVEL = 3  # fast; level 6 saves ~15% more and takes ~2.5x the time


@dataclass
class Written:
    path: Path
    steps: list[int]
    events: int
    json_bytes: int  # uncompressed
    warnings: list[str] = field(default_factory=list)


class _Writer:
    """Writes rendered chunks to `out` in a background thread (analyzer.background), so
    that the next chunk is rendered while this one is written (and compressed). At most
    `depth` chunks wait; a failed write's error is raised by a later `put` or by `close`."""

    def __init__(self, out: IO[bytes], depth: int = 4) -> None:
        self.out = out
        self.depth = depth
        self.pool = Background(1, "trace-writer")
        self.pending: deque[Future[int]] = deque()

    def put(self, chunk: bytes) -> None:
        while len(self.pending) >= self.depth:
            self.pending.popleft().result()  # raises what writing it raised
        self.pending.append(self.pool.submit(self.out.write, chunk))

    def close(self) -> None:
        """Wait for every chunk to be written; raise what writing raised."""
        try:
            while self.pending:
                self.pending.popleft().result()
        finally:
            self.pool.close()


class _Counted:
    """A binary file that counts what is written (a FIFO or gzip cannot tell())."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self.count = 0

    def write(self, data: bytes) -> int:
        self.count += len(data)
        return self._out.write(data)


def _stream(trace: Trace, raw: IO[bytes], progress: Progress | None) -> int:
    out = _Counted(raw)
    meta = [json.dumps(m, separators=(",", ":")) for m in trace.metadata]
    out.write(('{"traceEvents":[\n' + "\n,".join(meta) + "\n").encode())
    total = None  # known once every part is built (the last ones may still be building)
    done = 0
    writer = _Writer(cast(IO[bytes], out))
    try:
        for part in trace.parts:
            # One JSON object per row, each after the comma that separates it from the one
            # before (the very first event has none).
            first = "" if not meta and not done else None
            for rows, text in part.rows.chunks(CHUNK_ROWS, first_prefix=first):
                writer.put(text)
                done += rows
                if progress and total is None and all(p.ready for p in trace.parts):
                    total = sum(p.frame.height for p in trace.parts)
                if progress and total is not None:
                    progress(done, total)
    finally:
        writer.close()
    other = json.dumps(trace.other, separators=(",", ":"))
    out.write(f'],"displayTimeUnit":"ms","otherData":{other}}}\n'.encode())
    return out.count  # gzip: the uncompressed size


def write_trace(trace: Trace, path: Path, progress: Progress | None = None) -> int:
    """Write `trace` to `path` (analyzer/output.py: atomically to a file, streamed to a
    FIFO, a device or -); returns the bytes of JSON written."""
    with open_output(path) as raw:
        if path.name.endswith(".gz"):
            with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=GZIP_LEVEL,
                               mtime=0) as gz:
                return _stream(trace, cast(IO[bytes], gz), progress)
        return _stream(trace, raw, progress)


def _written(path: Path, options: TimelineOptions, trace: Trace, size: int) -> Written:
    w = Written(path, list(options.steps), trace.events, size)
    if size > WARN_BYTES:
        w.warnings.append(
            f"{path}: {size / 1e6:.0f} MB of JSON; trace viewers get slow above "
            f"{WARN_BYTES // 10**6} MB: export fewer steps (--steps A:B, --step N) or "
            "leave out the memory counters (--no-memory) or the arrows (--no-dataflow)")
    return w


def export(run: Run, path: str | os.PathLike[str], options: TimelineOptions,
           progress: Progress | None = None) -> Written:
    """Build the timeline of options.steps and write it to `path` (.gz: compressed)."""
    p = check_output(path)
    trace = build_trace(run, options)
    return _written(p, options, trace, write_trace(trace, p, progress))


def export_per_step(run: Run, directory: str | os.PathLike[str], options: TimelineOptions,
                    progress: Progress | None = None) -> list[Written]:
    """One file per step, DIR/timeline-<step>.json, as tf.train.ProfilerHook wrote them."""
    d = check_output_dir(directory)
    try:
        d.mkdir(exist_ok=True)
    except OSError as e:
        raise RunlensError(f"{d}: cannot create ({e.strerror or e})") from None
    out = []
    for i, step in enumerate(options.steps):
        one = TimelineOptions(**{**options.__dict__, "steps": (step,)})
        trace = build_trace(run, one)
        path = d / f"timeline-{step}.json"
        out.append(_written(path, one, trace, write_trace(trace, path)))
        if progress:
            progress(i + 1, len(options.steps))
    return out
