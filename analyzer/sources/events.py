"""TensorBoard event files (`events.out.tfevents.*`) holding tagged run metadata, as
`tf.compat.v1.summary.FileWriter.add_run_metadata` (and ProfilerHook) write them: each
tag is a step; the graph comes from the same file(s).

Read without TensorFlow: a small reader of the TFRecord framing (uint64 length, masked
CRC-32C of the length, the record, masked CRC-32C of the record) and our vendored
event.proto. A record whose CRC does not match, or a file cut short, is reported with its
file and offset; the records before it are kept. A tag's step is the last number in the
tag ("step_12"), else the event's step, else its order.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path

from google.protobuf.message import DecodeError

from .. import ingest, readfile
from ..errors import InputFileError, RunDirError
from ..proto import event_pb2
from . import Part, Progress, Selection, SourceFrames
from .stepnumbers import distinct_steps, number_in
from .stepstats import frames_from_run_metadata

_META_GRAPH_GRAPH_DEF = 2  # MetaGraphDef.graph_def


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as TFRecord uses; google_crc32c's C code when installed."""
    try:
        import google_crc32c  # type: ignore[import-not-found]

        return int(google_crc32c.value(data))
    except ImportError:
        pass
    crc = 0xFFFFFFFF
    table = _TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path: Path) -> Iterator[bytes]:
    """The records of a TFRecord file, read one at a time (a regular file only: never a
    FIFO or a device); InputFileError (after the good ones) at the first bad one, naming
    the file and the offset. A record's length is trusted only once its CRC matches and
    it fits in the file, so a damaged length never allocates more than the file holds."""
    name = readfile.shown(path)
    fd = readfile.open_checked(path)
    try:
        with os.fdopen(fd, "rb") as f:
            end = os.fstat(f.fileno()).st_size
            pos = 0
            while pos < end:
                yield _record(f, pos, end, name)
                pos = f.tell()
    except OSError as e:
        raise InputFileError(f"{name}: cannot read ({e.strerror or e})") from None


def _record(f: object, pos: int, end: int, name: str) -> bytes:
    read = f.read  # type: ignore[attr-defined]
    head = read(12)
    if len(head) < 12:
        raise InputFileError(f"{name}: truncated record header at byte {pos}")
    header = head[:8]
    (length,) = struct.unpack("<Q", header)
    (length_crc,) = struct.unpack("<I", head[8:12])
    if masked_crc(header) != length_crc:
        raise InputFileError(f"{name}: not a TFRecord file (bad length CRC at byte {pos})")
    if pos + 12 + length + 4 > end:
        raise InputFileError(f"{name}: truncated record at byte {pos}")
    data = read(length)
    tail = read(4)
    if len(data) < length or len(tail) < 4:
        raise InputFileError(f"{name}: truncated record at byte {pos}")
    (data_crc,) = struct.unpack("<I", tail)
    if masked_crc(data) != data_crc:
        raise InputFileError(f"{name}: corrupt record at byte {pos} (CRC mismatch)")
    return data


def _events_name(name: str) -> bool:
    return "tfevents" in name


def _is_events_file(path: Path) -> bool:
    return _events_name(path.name) and readfile.regular(path)


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return readfile.scan(path, _events_name)[0]
    return [path]


def _graph_of_meta_graph(raw: bytes) -> bytes | None:
    try:
        return next((bytes(p) for n, p in ingest.split_fields(raw)
                     if n == _META_GRAPH_GRAPH_DEF), None)
    except DecodeError:
        return None


class EventsSource:
    kind = "events"
    files = "events.out.tfevents.*"  # what the not-a-profile error names
    description = ("TensorBoard event files (events.out.tfevents.*) with run metadata "
                   "written by FileWriter.add_run_metadata or ProfilerHook, or their folder")

    def accepts(self, path: Path) -> bool:
        return bool(_files(path)) and all(_is_events_file(p) for p in _files(path))

    def parts(self, path: Path, chosen: Selection) -> list[Part]:
        if not path.exists():
            raise RunDirError(f"{readfile.shown(path)}: no such file or directory")
        files, problems = readfile.scan(path, _events_name) if path.is_dir() else ([path], [])
        if not files:
            raise RunDirError(f"{readfile.shown(path)}: no events.out.tfevents.* file"
                              + (f" ({problems[0]})" if problems else ""))
        return [Part(self.kind, path, "worker:0", tuple(str(f) for f in files),
                     warnings=tuple(problems))]

    def read(self, part: Part, jobs: int, progress: Progress | None) -> SourceFrames:
        warnings: list[str] = []
        # (tag step, event step, run metadata, tag, file): names are made one at a time,
        # as the steps are read (a crafted file of a million tiny records)
        tagged: list[tuple[int | None, int, bytes, str, str]] = []
        graphs: list[tuple[bytes, str]] = []
        for name in part.files:
            path = Path(name)
            shown = readfile.shown(path)
            try:
                for i, record in enumerate(records(path)):
                    try:
                        event = event_pb2.Event.FromString(record)
                    except (DecodeError, RuntimeError) as e:
                        raise InputFileError(f"{readfile.shown(path)}: record {i} is not "
                                             f"an Event ({e})") from None
                    what = event.WhichOneof("what")
                    if what == "tagged_run_metadata":
                        t = event.tagged_run_metadata
                        tagged.append((number_in(t.tag), event.step, t.run_metadata,
                                       t.tag, shown))
                    elif what == "graph_def":  # the last one is used
                        graphs[:] = [(event.graph_def, f"{shown} (graph_def)")]
                    elif what == "meta_graph_def":
                        graph = _graph_of_meta_graph(event.meta_graph_def)
                        if graph is not None:
                            graphs[:] = [(graph, f"{shown} (meta_graph_def)")]
            except InputFileError as e:
                warnings.append(str(e))
        if not tagged:
            # TF2 writes summaries (`...v2`, `...profile-empty`), never run metadata: its
            # profile is the plugins/profile/ folder of the log dir.
            tf2 = any(n.endswith((".v2", ".profile-empty")) for n in part.files)
            raise RunDirError(f"{readfile.shown(part.path)}: no tagged run metadata in the "
                              "event file(s)"
                              + (f" ({warnings[0]})" if warnings else "")
                              + ("; TF2 event files hold summaries, not traces: a TF2 "
                                 "profile is the log dir's plugins/profile/<run>/ "
                                 "(point runlens at the log dir)" if tf2 else ""))
        numbers = distinct_steps(tag_step if tag_step is not None else event_step
                                 for tag_step, event_step, _, _, _ in tagged)
        steps = ((step, raw, f"{shown} (tag {tag!r})")
                 for step, (_, _, raw, tag, shown) in zip(numbers, tagged, strict=True))
        return frames_from_run_metadata(steps, graphs[-1:], part, warnings,
                                        files="event files",
                                        no_graph="no graph in the event file(s)")


SOURCE = EventsSource()
