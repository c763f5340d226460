"""An XSpace file as planes of line columns: the C decoder (analyzer/_xplane.c) over the
mapped file where it is compiled, else a protobuf walk (same columns, slower).

A plane's name and metadata are parsed with protobuf (they are small); its lines' events
become int64 columns (metadata_id, offset_ps, duration_ps, and the integer value of a few
wanted stats per event). An event whose wanted stat holds a string, or that a reader
needs whole (memory events, step markers), is read with protobuf through `event(i)`.
"""

from __future__ import annotations

import functools
import mmap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

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


def _stat_int(stat: xplane_pb2.XStat) -> tuple[int, int]:
    """(integer value or OTHER, a nonzero key of a string value or 0)."""
    kind = stat.WhichOneof("value")
    if kind in ("int64_value", "uint64_value", "ref_value"):
        return int(getattr(stat, kind)), 0
    if kind in ("str_value", "bytes_value"):
        return int(OTHER), (hash(getattr(stat, kind)) & 0x3FFF_FFFF_FFFF_FFFF) | 1
    return int(OTHER), 0


def _columns_of(line: xplane_pb2.XLine, wanted: tuple[int, ...]) -> Line:
    events = line.events
    n = len(events)
    stats = {s: np.full(n, ABSENT, np.int64) for s in wanted}
    hashes = {s: np.zeros(n, np.int64) for s in wanted}
    for i, e in enumerate(events):
        for st in e.stats:
            column = stats.get(st.metadata_id)
            if column is not None:
                column[i], hashes[st.metadata_id][i] = _stat_int(st)
    return Line(
        name=line.display_name or line.name, timestamp_ns=line.timestamp_ns,
        mid=np.fromiter((e.metadata_id for e in events), np.int64, n),
        off=np.fromiter((e.offset_ps for e in events), np.int64, n),
        dur=np.fromiter((e.duration_ps for e in events), np.int64, n),
        stats=stats, hashes=hashes, raw=line)


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

    def lines(self, wanted: tuple[int, ...], jobs: int = 2,
              keep: set[int] | None = None) -> Iterator[Line]:
        """Each line's columns, in order. Natively, the next `jobs` lines are decoded
        in threads meanwhile (the decoder releases the GIL); at most `jobs + 1` lines are in
        memory at once. `keep`: the metadata ids of the events the caller reads; natively
        the others are left out of the columns (not decoded at all), else all are."""
        bits = _bitmap(keep)
        if self._buf is None:
            for item in self._lines:
                yield _columns_of(item, wanted)
            return
        decode = functools.partial(self._decode, wanted=wanted, bits=bits)
        with Background(jobs, "runlens-xplane") as pool:
            yield from pool.ahead(decode, self._lines, jobs)

    def _decode(self, item: tuple[int, int], wanted: tuple[int, ...],
                bits: bytes | None) -> Line:
        offset, length = item
        raw = self._buf[offset: offset + length]
        _, ts, name, display, n, mid, off, dur, stats, hashes, at = _xplane.decode_line(
            raw, wanted, bits)
        self._release(offset, length)
        k = len(wanted)
        # The first n rows are filled (the columns have room for every event).
        table = np.frombuffer(stats, np.int64, n * k).reshape(n, k)
        texts = np.frombuffer(hashes, np.int64, n * k).reshape(n, k)
        return Line(
            name=(display or name).decode("utf-8", "replace"), timestamp_ns=ts,
            mid=np.frombuffer(mid, np.int64, n), off=np.frombuffer(off, np.int64, n),
            dur=np.frombuffer(dur, np.int64, n),
            stats={s: table[:, j] for j, s in enumerate(wanted)},
            hashes={s: texts[:, j] for j, s in enumerate(wanted)}, raw=raw,
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
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            mapped = None
            if native and size:
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                buf: Any = memoryview(mapped)
            else:
                f.seek(0)
                buf = f.read()
    except OSError as e:
        raise InputFileError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        if not native or not size:
            space = xplane_pb2.XSpace.FromString(bytes(buf))
            planes = [Plane(p, list(p.lines)) for p in space.planes]
        else:
            planes = []
            for start, length in _plane_spans(buf):
                lines, rest = _xplane.split_plane(buf[start: start + length])
                meta = xplane_pb2.XPlane.FromString(rest)
                planes.append(Plane(meta, [(start + o, n) for o, n in lines], buf, mapped))
    except (DecodeError, RuntimeError, ValueError) as e:
        raise InputFileError(f"{path}: not a readable XSpace profile ({e})"
                             + damage.hint(buf)) from None
    if not planes:
        raise InputFileError(f"{path}: an XSpace with no planes (not a profile?)")
    return planes


def _plane_spans(buf: Any) -> Iterator[tuple[int, int]]:
    """(start, length) of each XSpace.planes value; DecodeError when malformed."""
    return ((start, size) for number, start, size in field_spans(buf) if number == _PLANES)
