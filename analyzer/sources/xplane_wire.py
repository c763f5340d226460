"""An XSpace file as planes of line columns: the C decoder (analyzer/_xplane.c) over the
mapped file where it is compiled, else a protobuf walk (same columns, slower).

A plane's name and metadata are parsed with protobuf (they are small); its lines' events
become int64 columns (metadata_id, offset_ps, duration_ps, and the integer value of a few
wanted stats per event). An event whose wanted stat holds a string, or that a reader
needs whole (memory events, step markers), is read with protobuf through `event(i)`.

Lines come in batches (`Plane.batches`: consecutive lines up to BATCH_BYTES, one C call
and one task each; 100k one-event lines cost a task per line before, ~90 us each). Both
paths refuse the same damage (protobuf's rules; analyzer/_xplane.c says which) and times
that do not fit int64 picoseconds (a line's timestamp_ns x 1000 + offset + duration: 106
days), each as a ValueError naming the line.
"""

from __future__ import annotations

import functools
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from .. import readfile
from ..background import Background
from ..errors import InputFileError
from ..ingest.wire import field_spans
from ..proto import xplane_pb2
from . import damage

try:
    from .. import _xplane
except ImportError:  # not compiled here: the protobuf walk
    _xplane = None  # type: ignore[assignment]

ABSENT = np.iinfo(np.int64).min  # the event has no such stat
OTHER = ABSENT + 1  # its value is a string, bytes or a double: read it with event(i)
_PLANES = 1  # XSpace.planes
_DEPTH = 100  # protobuf's nesting limit, counted from the XSpace
_SPACE_STRINGS = 1 << 2 | 1 << 3 | 1 << 4  # XSpace.errors, warnings, hostnames
BATCH_BYTES = 1 << 20  # lines decoded by one task, at most (or one bigger line)
BATCH_LINES = 4096  # in the protobuf walk
_MAX_NS = (2**63 - 1) // 1000  # a timestamp_ns whose picoseconds fit int64


def native_available() -> bool:
    return _xplane is not None


@dataclass
class Line:
    """One XLine's events as columns."""

    name: str
    timestamp_ns: int
    mid: np.ndarray
    off: np.ndarray
    dur: np.ndarray
    stats: dict[int, np.ndarray]  # wanted stat id -> value per event (ABSENT, OTHER)
    hashes: dict[int, np.ndarray]  # wanted stat id -> a key of its string value (0: none)
    raw: Any = None  # the line's bytes (native) or message (protobuf)
    at: Any = None  # native: (start, length) of each event's bytes in `raw`

    def event(self, i: int) -> xplane_pb2.XEvent:
        if isinstance(self.raw, xplane_pb2.XLine):
            return self.raw.events[int(i)]
        start, length = (int(v) for v in self.at[int(i)])
        return xplane_pb2.XEvent.FromString(bytes(self.raw[start: start + length]))


@dataclass
class Lines:
    """A batch of consecutive lines of a plane: one entry per line (names, timestamp_ns,
    starts: each line's first event row, and the end), the events as one set of Line's
    columns, and `start_ps`, each event's time (checked to fit int64)."""

    first: int  # the plane's number of the batch's first line
    names: list[str]
    timestamp_ns: np.ndarray
    starts: np.ndarray
    mid: np.ndarray
    off: np.ndarray
    dur: np.ndarray
    stats: dict[int, np.ndarray]
    hashes: dict[int, np.ndarray]
    raw: Any  # the file's buffer (native: `at` is into it) or the XLine messages
    at: Any = None

    def __post_init__(self) -> None:
        self.line_of = np.repeat(np.arange(len(self.names)), np.diff(self.starts))
        self.start_ps = _times(self)

    def event(self, i: int) -> xplane_pb2.XEvent:
        if self.at is None:
            j = int(np.searchsorted(self.starts, i, side="right")) - 1
            return self.raw[j].events[int(i) - int(self.starts[j])]
        start, length = (int(v) for v in self.at[int(i)])
        return xplane_pb2.XEvent.FromString(bytes(self.raw[start: start + length]))

    def line(self, j: int) -> Line:
        """Line j of the batch (views of the columns)."""
        a, b = int(self.starts[j]), int(self.starts[j + 1])
        return Line(name=self.names[j], timestamp_ns=int(self.timestamp_ns[j]),
                    mid=self.mid[a:b], off=self.off[a:b], dur=self.dur[a:b],
                    stats={s: v[a:b] for s, v in self.stats.items()},
                    hashes={s: v[a:b] for s, v in self.hashes.items()},
                    raw=self.raw if self.at is not None else self.raw[j],
                    at=self.at[a:b] if self.at is not None else None)


def _times(lines: Lines) -> np.ndarray:
    """Each event's start in ps (timestamp_ns x 1000 + offset_ps); ValueError naming the
    first line whose start or end (+ duration_ps) does not fit int64."""
    ts = lines.timestamp_ns[lines.line_of]
    bad = (ts > _MAX_NS) | (ts < -_MAX_NS)
    base = np.where(bad, 0, ts) * 1000
    with np.errstate(over="ignore"):
        start = base + lines.off
        end = start + lines.dur
    bad |= ((base ^ start) & (lines.off ^ start)) < 0  # the sum wrapped
    bad |= ((start ^ end) & (lines.dur ^ end)) < 0
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        j = int(lines.line_of[i])
        raise ValueError(f"line {lines.names[j]!r}: timestamp_ns {int(lines.timestamp_ns[j])} "
                         f"+ offset_ps {int(lines.off[i])} + duration_ps {int(lines.dur[i])} "
                         "is beyond what int64 picoseconds hold (106 days)")
    return start


def _stat_int(stat: xplane_pb2.XStat) -> tuple[int, int]:
    """(integer value or OTHER, a nonzero key of a string value or 0); uint64 values as
    int64 bits, as the C decoder has them."""
    kind = stat.WhichOneof("value")
    if kind in ("int64_value", "uint64_value", "ref_value"):
        value = int(getattr(stat, kind))
        return (value - 2**64 if value >= 2**63 else value), 0
    if kind in ("str_value", "bytes_value"):
        return int(OTHER), (hash(getattr(stat, kind)) & 0x3FFF_FFFF_FFFF_FFFF) | 1
    return int(OTHER), 0


def _columns_of(lines: list[xplane_pb2.XLine], first: int, wanted: tuple[int, ...]
                ) -> Lines:
    """The protobuf walk of a batch of lines: the columns the C decoder gives."""
    events = [e for line in lines for e in line.events]
    n = len(events)
    stats = {s: np.full(n, ABSENT, np.int64) for s in wanted}
    hashes = {s: np.zeros(n, np.int64) for s in wanted}
    for i, e in enumerate(events):
        for st in e.stats:
            column = stats.get(st.metadata_id)
            if column is not None:
                column[i], hashes[st.metadata_id][i] = _stat_int(st)
    counts = [len(line.events) for line in lines]
    return Lines(
        first=first, names=[line.display_name or line.name for line in lines],
        timestamp_ns=np.array([line.timestamp_ns for line in lines], np.int64),
        starts=np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64),
        mid=np.fromiter((e.metadata_id for e in events), np.int64, n),
        off=np.fromiter((e.offset_ps for e in events), np.int64, n),
        dur=np.fromiter((e.duration_ps for e in events), np.int64, n),
        stats=stats, hashes=hashes, raw=lines)


class Plane:
    """A plane's metadata (`meta`: an XPlane without lines) and its lines."""

    def __init__(self, meta: xplane_pb2.XPlane, lines: list[Any], buf: Any = None,
                 mapped: mmap.mmap | None = None) -> None:
        self.meta = meta
        self.name = meta.name
        self._lines = lines  # XLine messages (protobuf walk) or (offset, length) in buf
        self._buf = buf
        self._mapped = mapped
        self.stat_names = {k: v.name for k, v in meta.stat_metadata.items()}
        self.stat_ids = {v: k for k, v in self.stat_names.items()}
        self._begun: dict[tuple, Iterator[Lines]] = {}  # decoding started by `begin`

    def begin(self, wanted: tuple[int, ...], jobs: int = 2,
              keep: set[int] | None = None) -> bool:
        """Start decoding the first `jobs` batches now, in threads (natively), for a
        `batches` call with the same arguments later: the caller's work meanwhile (the
        HLO of the metadata plane: Python holding the GIL) overlaps the decoder's.
        Whether it started (natively, a plane with lines)."""
        key = (wanted, jobs, None if keep is None else frozenset(keep))
        if self._buf is None or not self._lines or key in self._begun:
            return False
        self._begun[key] = self._native(wanted, jobs, keep)
        return True

    def lines(self, wanted: tuple[int, ...], jobs: int = 2,
              keep: set[int] | None = None) -> Iterator[Line]:
        """Each line's columns, in order (from `batches`)."""
        for batch in self.batches(wanted, jobs, keep):
            for j in range(len(batch.names)):
                yield batch.line(j)

    def batches(self, wanted: tuple[int, ...], jobs: int = 2,
                keep: set[int] | None = None) -> Iterator[Lines]:
        """The lines in batches, in order. Natively, the next `jobs` batches are decoded
        in threads meanwhile (the decoder releases the GIL); at most `jobs + 1` are in
        memory at once. `keep`: the metadata ids of the events the caller reads; natively
        the others are left out of the columns (walked, not stored), else all are."""
        if self._buf is None:
            for a in range(0, len(self._lines), BATCH_LINES):
                yield _columns_of(self._lines[a: a + BATCH_LINES], a, wanted)
            return
        key = (wanted, jobs, None if keep is None else frozenset(keep))
        yield from self._begun.pop(key, None) or self._native(wanted, jobs, keep)

    def _native(self, wanted: tuple[int, ...], jobs: int, keep: set[int] | None
                ) -> Iterator[Lines]:
        """The decoded batches in order; the first `jobs` are submitted at this call."""
        decode = functools.partial(self._decode, wanted=wanted, bits=_bitmap(keep))
        pool = Background(jobs, "runlens-xplane")
        results = pool.ahead(decode, _spans_in_batches(self._lines), jobs)

        def closing() -> Iterator[Lines]:
            with pool:
                yield from results
        return closing()

    def _decode(self, batch: tuple[int, np.ndarray], wanted: tuple[int, ...],
                bits: bytes | None) -> Lines:
        first, spans = batch
        ids, ts, names, starts, n, mid, off, dur, stats, hashes, at = _xplane.decode_lines(
            self._buf, spans.tobytes(), wanted, bits)
        self._release(int(spans[0, 0]), int(spans[-1, 0] + spans[-1, 1] - spans[0, 0]))
        k = len(wanted)
        # The first n rows are filled (the columns have room for every event).
        table = np.frombuffer(stats, np.int64, n * k).reshape(n, k)
        texts = np.frombuffer(hashes, np.int64, n * k).reshape(n, k)
        return Lines(
            first=first, names=[name.decode() for name in names],
            timestamp_ns=np.frombuffer(ts, np.int64), starts=np.frombuffer(starts, np.int64),
            mid=np.frombuffer(mid, np.int64, n), off=np.frombuffer(off, np.int64, n),
            dur=np.frombuffer(dur, np.int64, n),
            stats={s: table[:, j] for j, s in enumerate(wanted)},
            hashes={s: texts[:, j] for j, s in enumerate(wanted)}, raw=self._buf,
            at=np.frombuffer(at, np.int64, 2 * n).reshape(n, 2))

    def _release(self, offset: int, length: int) -> None:
        """Drop the decoded line's file pages from this process (they are read again if
        an event is asked for): the file never stays mapped whole, so memory stays near
        the size of the columns, not of the file."""
        if self._mapped is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        start = offset - offset % mmap.PAGESIZE
        end = offset + length
        end -= end % mmap.PAGESIZE  # whole pages only: a neighbour may still be read
        if end > start:
            self._mapped.madvise(mmap.MADV_DONTNEED, start, end - start)


def _spans_in_batches(spans: list[tuple[int, int]]) -> Iterator[tuple[int, np.ndarray]]:
    """(number of the first line, its lines' (offset, length) rows) of consecutive lines
    up to BATCH_BYTES each (one line alone when bigger)."""
    if not spans:
        return
    table = np.array(spans, np.int64).reshape(-1, 2)
    ends = np.cumsum(table[:, 1])
    a = 0
    while a < len(table):
        done = int(ends[a - 1]) if a else 0
        b = max(a + 1, int(np.searchsorted(ends, done + BATCH_BYTES, side="right")))
        yield a, table[a:b]
        a = b


def _bitmap(ids: set[int] | None) -> bytes | None:
    """`ids` as a byte per metadata id (1: kept), None (keep all) when they are too
    sparse for that."""
    if ids is None or (ids and (min(ids) < 0 or max(ids) >= 1 << 24)):
        return None
    bits = bytearray(max(ids, default=-1) + 1)
    for i in ids:
        bits[i] = 1
    return bytes(bits)


def read_planes(path: Path, native: bool | None = None) -> list[Plane]:
    """The planes of `path`; InputFileError (one line) when it is not an XSpace."""
    native = native_available() if native is None else native
    name = readfile.shown(path)
    mapped = None
    if native:  # mapped, not read: any size (a regular file only: never a FIFO)
        fd = readfile.open_checked(path)
        try:
            with os.fdopen(fd, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size:
                    mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            raise InputFileError(f"{name}: cannot read ({getattr(e, 'strerror', 0) or e})"
                                 ) from None
        buf: Any = memoryview(mapped) if mapped is not None else b""
    else:  # protobuf parses no message of 2 GiB or more
        buf = readfile.read_bytes(path, what="XSpace")
        size = len(buf)
    try:
        if not native or not size:
            for number, start, length in _spans(buf):
                if number == _PLANES:
                    _check_crowded(length, buf[start: start + length])
            space = xplane_pb2.XSpace.FromString(bytes(buf))
            planes = [Plane(p, list(p.lines)) for p in space.planes]
        else:
            # The XSpace's strings (errors, warnings, hostnames) are checked in C, the
            # rest by protobuf, as a whole parse would; none is made into objects (20 MB
            # of empty strings took 0.5 GB parsed).
            spans, rest = _xplane.split_plane(buf, _PLANES, _DEPTH, _SPACE_STRINGS)
            xplane_pb2.XSpace.FromString(rest)
            planes = []
            for start, length in spans:
                lines, rest = _xplane.split_plane(buf[start: start + length])
                _check_crowded(length, rest)
                meta = xplane_pb2.XPlane.FromString(rest)
                planes.append(Plane(meta, [(start + o, n) for o, n in lines], buf, mapped))
    except (DecodeError, RuntimeError, ValueError) as e:
        raise InputFileError(f"{name}: not a readable XSpace profile ({e})"
                             + damage.hint(buf)) from None
    if not planes:
        raise InputFileError(f"{name}: an XSpace with no planes (not a profile?)")
    return planes


_CROWDED = 1_000_000  # metadata entries any plane may hold
_ENTRY_BYTES = 16  # of the plane per entry, at least, for a plane of more


def _check_crowded(plane_len: int, fields: Any) -> None:
    """ValueError for a plane of more than _CROWDED metadata entries (event and stat
    metadata, plane stats) averaging under _ENTRY_BYTES bytes of the plane each: protobuf
    makes each an object of ~100 bytes (20 MB of empty entries took 0.9 GB), while a real
    entry holds a name. The same rule on both paths: `fields` is the plane's bytes (the
    protobuf walk) or all but its lines (the C path); lines are never counted."""
    if len(fields) < 2 * _CROWDED:  # an entry takes 2 bytes at least
        return
    count = 0
    try:  # counted, never listed (10M tuples would be the GB this avoids)
        for number, _, _ in field_spans(fields):
            count += number != 3  # XPlane.lines
    except (DecodeError, IndexError):
        return  # the wire cannot be followed here (groups): protobuf decides
    if count > _CROWDED and plane_len < _ENTRY_BYTES * count:
        raise ValueError(f"a plane of {count:,} metadata entries in {plane_len:,} bytes "
                         f"(under {_ENTRY_BYTES} each: entries without names)")


def _spans(buf: Any) -> list[tuple[int, int, int]]:
    """The XSpace's top-level fields (few: planes and strings), or none where the wire
    cannot be followed (groups): protobuf decides."""
    try:
        return [span for span in field_spans(buf) if span[0] == _PLANES]
    except (DecodeError, IndexError):
        return []
