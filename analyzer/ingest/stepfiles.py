"""Step files -> frames, in batches: read into one reused buffer, split off their
partition graphs (parsed once per distinct content), decoded by the C decoder or walked
with protobuf; a file that cannot be read is skipped with one message."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from google.protobuf.message import DecodeError

from .. import digest as content
from ..errors import InputFileError
from . import wire
from .graphs import graph_nodes
from .stepwalk import (
    StepFrames,
    decoded_frames,
    no_step_stats,
    walk_step_bytes,
)
from .wire import (
    INPUT_ERRORS,
    MAX_MESSAGE_BYTES,
    PARSE_ERRORS,
    Buffer,
    reason,
)

StepItem = tuple["str | Path", int, "int | None"]  # step file, its global step, manifest's size


@dataclass
class StepBatch:
    """What a batch of step files gave: their frames (None if no file could be read), the
    nodes of their distinct partition graphs by digest (GRAPH_NODE_SCHEMA, in the order
    first seen), and one message per file skipped or step left out."""

    frames: StepFrames | None
    graphs: dict[bytes, pl.DataFrame]
    errors: list[str]
    # Per file read: [size, mtime_ns, ctime_ns, inode, digest.of(the bytes read)] (the
    # cache's key takes the content digest from here instead of reading every file again).
    files: dict[str, list[Any]] = field(default_factory=dict)


class PartitionGraphs:
    """Partition graphs parsed once per distinct content, for the threads of one load:
    the nodes of each, or why it cannot be read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parsed: dict[bytes, pl.DataFrame | str] = {}

    def nodes(self, digest: bytes, raw: bytes, path: str | Path) -> pl.DataFrame:
        """The graph's nodes; InputFileError naming `path` when it is not a GraphDef."""
        with self._lock:
            parsed = self._parsed.get(digest)
        if parsed is None:  # two threads may parse the same graph once each: harmless
            try:
                parsed = graph_nodes([raw], "partition")
            except PARSE_ERRORS as e:
                parsed = reason(e)
            with self._lock:
                self._parsed[digest] = parsed
        if isinstance(parsed, str):
            raise InputFileError(f"{path}: its partition graph is not a readable GraphDef "
                                 f"({parsed})")
        return parsed



def native_decoder_available() -> bool:
    """True when the C decoder is built (and not turned off with RUNLENS_PURE_PYTHON=1)."""
    return wire._stepstats is not None and not os.environ.get("RUNLENS_PURE_PYTHON")


class _FileReader:
    """Reads files into one reused buffer: a fresh bytes object per step file costs a page
    fault per 4 KiB, which at hundreds of MiB is more than the decoding."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self.stat: list[int] = []  # of the file last read: size, mtime_ns, ctime_ns, inode

    def read(self, path: str | Path, expected_size: int | None = None) -> memoryview:
        """The file's bytes, valid until the next read."""
        try:
            with open(path, "rb", buffering=0) as f:
                st = os.fstat(f.fileno())
                size = st.st_size
                self.stat = [size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
                if size > MAX_MESSAGE_BYTES:
                    raise InputFileError(f"{path}: {size} bytes, more than protobuf reads in "
                                         "one message (2 GiB); not a step file")
                if len(self._buf) <= size:
                    self._buf = bytearray(size + 1 + size // 4)
                view = memoryview(self._buf)
                n = f.readinto(view) or 0
                while 0 < n < len(view):  # short reads
                    got = f.readinto(view[n:])
                    if not got:
                        break
                    n += got
                if n == len(view):  # the file grew since fstat: read the rest as bytes
                    view = memoryview(bytes(view) + f.read())
                    n = len(view)
        except OSError as e:
            raise InputFileError(f"{path}: cannot read ({e.strerror or e})") from None
        if expected_size is not None and n != expected_size:
            raise InputFileError(
                f"{path}: truncated or changed (manifest says {expected_size} bytes, file has "
                f"{n})"
            )
        return view[:n]


def _split_step(raw: memoryview, source: str) -> tuple[Buffer, list[Buffer]]:
    """RunMetadata -> (StepStats bytes, partition graphs), without copying either."""
    try:
        stats, graphs = wire.split_run_metadata(raw)
    except DecodeError as e:
        raise InputFileError(f"{source}: not a readable RunMetadata ({e})") from None
    return stats, graphs



def ingest_step_files(items: Iterable[StepItem], native: bool | None = None,
                      partition_graphs: PartitionGraphs | None = None,
                      digests: bool = False) -> StepBatch:
    """Step files -> one set of frames. A file that cannot be read (its partition graphs
    included) is reported in `errors` and adds no rows; so is a step without node stats.
    The C decoder reads the files unless `native` is False; a file it does not accept is
    walked with protobuf, which decides whether it is valid. `partition_graphs` shares
    the parsed graphs between the batches of a load; `digests` fills StepBatch.files."""
    use_native = native_decoder_available() if native is None else native
    decoder = wire._stepstats.Decoder() if use_native and wire._stepstats is not None else None
    parsed = partition_graphs if partition_graphs is not None else PartitionGraphs()
    items = list(items)
    walked: list[StepFrames] = []
    graphs: dict[bytes, pl.DataFrame] = {}
    errors: list[str] = []
    reader = _FileReader()
    recent: list[bytes] = []  # the last distinct partition graphs seen (at most 16)
    files: dict[str, list[Any]] = {}
    for path, step, size in items:
        try:
            raw = reader.read(path, size)
            # ~10 GB/s without the GIL: the cache's key covers every byte read.
            if digests:
                files[str(path)] = [*reader.stat, content.of(raw)]
            stats, step_graphs = _split_step(raw, str(path))
            # Steps of one graph repeat its partition graphs (in a few byte orders:
            # TensorFlow serializes attr maps in no fixed order). Comparing with the recent
            # ones is ~10x cheaper than hashing each step's again.
            new: dict[bytes, pl.DataFrame] = {}
            for g in step_graphs:
                copy = bytes(g)
                if copy in recent:
                    continue
                digest = hashlib.blake2b(copy, digest_size=16).digest()
                new[digest] = parsed.nodes(digest, copy, path)
                recent = [copy, *recent[:15]]
            if decoder is not None and path is items[0][0]:
                decoder.expect(len(stats) * len(items))  # steps of a run are alike in size
            devices = decoder.add(stats, step) if decoder is not None else None
            if devices is None:
                frames = walk_step_bytes(stats, step, str(path))
                nodes, nameless = frames.nodes.height, frames.nameless
            else:
                assert decoder is not None
                nodes, nameless = decoder.added, decoder.nameless
            if not devices and devices is not None:
                raise no_step_stats(str(path))
            if not nodes:
                raise InputFileError(f"{path}: step {step} has no node stats"
                                     + (f" ({nameless} without a node name)" if nameless
                                        else "") + "; left out")
            if devices is None:
                walked.append(frames)
            if nameless:
                errors.append(f"{path}: {nameless} node stats without a node name left out")
        except InputFileError as e:
            errors.append(str(e))
            continue
        except INPUT_ERRORS as e:
            errors.append(f"{path}: not a readable RunMetadata ({reason(e)})")
            continue
        for digest, frame in new.items():
            graphs.setdefault(digest, frame)
    parts = ([decoded_frames(decoder.finish())] if decoder is not None else []) + walked
    parts = [p for p in parts if p.nodes.height]
    return StepBatch(concat_step_frames(parts) if parts else None, graphs, errors, files)


def concat_step_frames(parts: list[StepFrames], in_order: bool = False) -> StepFrames:
    """One StepFrames of several, in step order (`in_order`: the parts already are, one
    after the other). Their keys are merged: each distinct key once, numbered anew."""
    if len(parts) == 1:
        return parts[0]

    def cat(frames: list[pl.DataFrame]) -> pl.DataFrame:
        frame = pl.concat(frames, how="vertical")
        if in_order:
            return frame
        order = ["step", "exec_idx"] if "exec_idx" in frame.columns else ["step"]
        return frame.sort(order, maintain_order=True)

    nodes, keys = _merge_keyed([p.nodes for p in parts], [p.keys for p in parts], "key_id")
    outputs, output_keys = _merge_keyed([p.outputs for p in parts],
                                        [p.output_keys for p in parts], "out_key")
    return StepFrames(nodes=cat(nodes), keys=keys, outputs=cat(outputs),
                      output_keys=output_keys,
                      memory=cat([p.memory for p in parts]),
                      allocations=cat([p.allocations for p in parts]),
                      threads=cat([p.threads for p in parts]))



def _merge_keyed(rows: list[pl.DataFrame], tables: list[pl.DataFrame], column: str
                 ) -> tuple[list[pl.DataFrame], pl.DataFrame]:
    """Parts whose rows' `column` numbers a row of the part's key table -> the same rows
    numbering the distinct keys of all parts (first seen first), and that table. A few
    thousand keys: cheap, unlike the rows."""
    stacked = pl.concat(tables, how="vertical")
    merged = stacked.unique(maintain_order=True)
    new_ids = stacked.join(merged.with_row_index(column), on=stacked.columns, how="left",
                           nulls_equal=True, maintain_order="left").get_column(column)
    out, start = [], 0
    for frame, table in zip(rows, tables, strict=True):
        ids = new_ids.slice(start, table.height)
        start += table.height
        out.append(frame.with_columns(ids.gather(frame.get_column(column))))
    return out, merged

