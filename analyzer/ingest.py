"""Protos -> polars frames. The only module that walks protobuf messages.

Step files become `StepFrames` (polars frames), so that the rest of the engine works on
columns. Each NodeExecStats is read once, keeping micros (what tfprof computes with) and
nanos (what the timeline draws with). Two readers give the same frames:

- the C decoder (analyzer/_stepstats.c): reads the StepStats wire format straight into
  columns, ~20x faster than protobuf's Python objects, without the GIL (so threads
  decode files in parallel);
- `_walk_step_stats`: protobuf's parse and a walk over its messages; the reference, used
  for any file the C decoder does not accept and where the decoder is not built.

Partition graphs repeat in every step file; they are split off the RunMetadata bytes
without parsing and parsed once per distinct content, while the step file that carries
them is read: a file whose partition graph is unreadable is skipped like any other bad
file, naming it. Whatever a file's bytes make the readers raise is that file's problem
(`INPUT_ERRORS`): it is skipped with one message, and the other files are read.
"""

from __future__ import annotations

import hashlib
import os
import threading
import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from google.protobuf.message import DecodeError

from analyzer import digest as content
from analyzer.errors import InputFileError
from analyzer.model import split_keys
from analyzer.proto import graph_pb2, step_stats_pb2, tfprof_log_pb2, types_pb2

_stepstats: types.ModuleType | None
try:  # the C decoder (analyzer/_stepstats.c); optional, built at install where possible
    import analyzer._stepstats as _stepstats
except ImportError:  # pragma: no cover - depends on the install
    _stepstats = None

Schema = dict[str, Any]  # column name -> polars dtype
Buffer = bytes | memoryview

# What decoding a file's bytes can raise besides InputFileError: the file's problem, never
# ours (protobuf's DecodeError; bad encodings; depth, size and number limits).
INPUT_ERRORS = (DecodeError, ValueError, OverflowError, RecursionError, MemoryError)
# ... and protobuf's parse, which may raise RuntimeError (e.g. its recursion limit).
PARSE_ERRORS = (RuntimeError, *INPUT_ERRORS)
# protobuf refuses messages of 2 GiB or more: no TensorFlow wrote a bigger step file.
MAX_MESSAGE_BYTES = 2**31 - 1

# RunMetadata field numbers (analyzer/proto/config.proto).
_STEP_STATS = 1
_PARTITION_GRAPHS = 3
_FUNCTION_GRAPHS = 4
# RunMetadata.FunctionGraphs field numbers.
_FG_PARTITION_GRAPHS = 1

_DTYPE_NAMES = {v.number: v.name.removeprefix("DT_").lower()
                for v in types_pb2.DataType.DESCRIPTOR.values}

# The executions: numbers, and the number of their key (KEY_SCHEMA). The strings of an
# execution (its lane, node name and timeline label) repeat every step, so they are kept
# once per distinct key; model.py derives device, op type etc. per key, not per row.
KEY_SCHEMA: Schema = {"lane": pl.String, "node_name": pl.String, "timeline_label": pl.String}
NODE_SCHEMA: Schema = {
    "step": pl.Int64,
    "exec_idx": pl.UInt32,
    "key_id": pl.UInt32,
    "all_start_us": pl.Int64,
    "op_start_rel_us": pl.Int64,
    "op_end_rel_us": pl.Int64,
    "all_end_rel_us": pl.Int64,
    "scheduled_us": pl.Int64,
    "start_ns": pl.Int64,
    "op_start_rel_ns": pl.Int64,
    "op_end_rel_ns": pl.Int64,
    "all_end_rel_ns": pl.Int64,
    "scheduled_ns": pl.Int64,
    "thread_id": pl.UInt32,
    "mem_total_bytes": pl.Int64,
    "mem_peak_bytes": pl.Int64,
    "mem_live_bytes": pl.Int64,
    "allocator_bytes_in_use": pl.Int64,
    "temp_bytes": pl.Int64,
    "persistent_bytes": pl.Int64,
    "output_bytes": pl.Int64,
}
# Outputs likewise: numbers, and the number of their (dtype, shape, allocator) key.
OUTPUT_KEY_SCHEMA: Schema = {"dtype": pl.String, "shape": pl.List(pl.Int64),
                             "allocator_name": pl.String}
OUTPUT_SCHEMA: Schema = {
    "step": pl.Int64,
    "exec_idx": pl.UInt32,
    "slot": pl.Int32,
    "out_key": pl.UInt32,
    "requested_bytes": pl.Int64,
    "allocated_bytes": pl.Int64,
    "allocation_id": pl.Int64,
    "ptr": pl.UInt64,
}
MEMORY_SCHEMA: Schema = {
    "step": pl.Int64,
    "exec_idx": pl.UInt32,
    "allocator_name": pl.String,
    "total_bytes": pl.Int64,
    "peak_bytes": pl.Int64,
    "live_bytes": pl.Int64,
    "allocator_bytes_in_use": pl.Int64,
}
ALLOCATION_SCHEMA: Schema = {
    "step": pl.Int64,
    "exec_idx": pl.UInt32,
    "allocator_name": pl.String,
    "alloc_us": pl.Int64,
    "alloc_bytes": pl.Int64,
}
THREAD_SCHEMA: Schema = {
    "step": pl.Int64, "lane": pl.String, "thread_id": pl.UInt32, "name": pl.String,
}
GRAPH_NODE_SCHEMA: Schema = {
    "name": pl.String,
    "op": pl.String,
    "device": pl.String,
    "inputs": pl.List(pl.String),
    "data_format": pl.String,
    "dtype": pl.String,
    "shape": pl.List(pl.Int64),
    "output_shapes": pl.List(pl.List(pl.Int64)),
    "tensor_name": pl.String,
    "send_device": pl.String,
    "recv_device": pl.String,
    "fused_ops": pl.List(pl.String),  # a fused kernel's `fused_ops` attr (Grappler remapper)
    "source": pl.String,
}
OP_LOG_SCHEMA: Schema = {"name": pl.String, "float_ops": pl.Int64, "types": pl.List(pl.String)}
CODE_SCHEMA: Schema = {
    "name": pl.String,
    "depth": pl.Int32,
    "file": pl.String,
    "lineno": pl.Int32,
    "function": pl.String,
    "line": pl.String,
    "func_start_line": pl.Int32,
}


def _frame(columns: dict[str, list], schema: Schema) -> pl.DataFrame:
    return pl.DataFrame(columns, schema=schema)


def _empty(schema: Schema) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


@dataclass
class StepFrames:
    """Everything one step file holds, as frames; partition graphs as serialized bytes.

    `nodes` are the executions (NODE_SCHEMA); their `key_id` is a row of `keys`, and an
    output's `out_key` a row of `output_keys` (OUTPUT_KEY_SCHEMA)."""

    nodes: pl.DataFrame
    keys: pl.DataFrame
    outputs: pl.DataFrame
    output_keys: pl.DataFrame
    memory: pl.DataFrame
    allocations: pl.DataFrame
    threads: pl.DataFrame
    nameless: int = 0  # executions without a node name, left out (see _walk_step_stats)


# ----------------------------------------------------------------------------- wire split


def _varint(buf: Buffer, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _split_fields(buf: Buffer) -> Iterable[tuple[int, Buffer]]:
    """Top-level length-delimited fields of a message, as (field number, bytes), unparsed.

    Raises DecodeError on malformed or truncated input, like protobuf does (field number
    0 at once: a file of zeros is rejected at its first byte, not walked to its end).
    """
    pos, end = 0, len(buf)
    try:
        while pos < end:
            key, pos = _varint(buf, pos)
            number, wire = key >> 3, key & 7
            if number == 0:
                raise DecodeError("field number 0")
            if wire == 2:
                size, pos = _varint(buf, pos)
                if pos + size > end:
                    raise DecodeError("truncated field")
                yield number, buf[pos : pos + size]
                pos += size
            elif wire == 0:
                _, pos = _varint(buf, pos)
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            else:
                raise DecodeError(f"unsupported wire type {wire}")
        if pos != end:
            raise DecodeError("truncated message")
    except IndexError:
        raise DecodeError("truncated message") from None


def split_run_metadata(raw: Buffer) -> tuple[Buffer, list[Buffer]]:
    """RunMetadata bytes -> (StepStats bytes, distinct non-empty serialized partition
    GraphDefs), as slices of `raw` (zero-copy when `raw` is a memoryview).

    Function graphs' partition graphs are included: they name nodes that ran inside
    functions. Empty occurrences add nothing and are dropped, and a graph repeated within
    the file is kept once, so that a file of empty or repeated fields costs time linear in
    its size and no memory (the C splitter: ~1 GB/s; this module's loop, where it is not
    built, ~50x slower).
    """
    parts: list[Buffer]
    graphs: list[Buffer]
    if _stepstats is not None:
        view = memoryview(raw)
        try:
            stat_spans, graph_spans = _stepstats.split_run_metadata(view)
        except ValueError as e:
            raise DecodeError(str(e)) from None
        parts = [view[a:b] for a, b in stat_spans]
        graphs = [view[a:b] for a, b in graph_spans]
    else:
        parts, graphs = [], []
        distinct: set[bytes] = set()
        for number, payload in _split_fields(raw):
            if not len(payload):
                continue
            if number == _STEP_STATS:
                parts.append(payload)
                continue
            if number == _PARTITION_GRAPHS:
                found = [payload]
            elif number == _FUNCTION_GRAPHS:
                found = [p for n, p in _split_fields(payload)
                         if n == _FG_PARTITION_GRAPHS and len(p)]
            else:
                continue
            for g in found:
                if bytes(g) not in distinct:
                    distinct.add(bytes(g))
                    graphs.append(g)
    # Repeated occurrences of a message field merge, as their concatenation parses.
    stats = parts[0] if len(parts) == 1 else b"".join(parts)
    return stats, graphs


# ----------------------------------------------------------------------------- step files

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
                parsed = _graph_nodes([raw], "partition")
            except PARSE_ERRORS as e:
                parsed = _reason(e)
            with self._lock:
                self._parsed[digest] = parsed
        if isinstance(parsed, str):
            raise InputFileError(f"{path}: its partition graph is not a readable GraphDef "
                                 f"({parsed})")
        return parsed


def _reason(e: BaseException) -> str:
    """An exception as a short reason on one line."""
    text = " ".join(str(e).split()) or type(e).__name__
    if isinstance(e, RecursionError):
        text = "nested too deeply"
    elif isinstance(e, MemoryError):
        text = "too large to decode here"
    elif not isinstance(e, DecodeError):
        text = f"{type(e).__name__}: {text}"
    return text[:300]


def native_decoder_available() -> bool:
    """True when the C decoder is built (and not turned off with RUNLENS_PURE_PYTHON=1)."""
    return _stepstats is not None and not os.environ.get("RUNLENS_PURE_PYTHON")


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
        stats, graphs = split_run_metadata(raw)
    except DecodeError as e:
        raise InputFileError(f"{source}: not a readable RunMetadata ({e})") from None
    return stats, graphs


def _no_step_stats(source: str) -> InputFileError:
    return InputFileError(f"{source}: RunMetadata has no step_stats (was it traced?)")


def walk_step_bytes(stats_bytes: Buffer, step: int, source: str) -> StepFrames:
    """StepStats bytes -> frames with protobuf (the reference; the C decoder's fallback)."""
    try:
        stats = step_stats_pb2.StepStats.FromString(bytes(stats_bytes))
    except PARSE_ERRORS as e:
        raise InputFileError(f"{source}: not a readable RunMetadata ({_reason(e)})") from None
    if not stats.dev_stats:
        raise _no_step_stats(source)
    return _walk_step_stats(stats, step)


def ingest_step_files(items: Iterable[StepItem], native: bool | None = None,
                      partition_graphs: PartitionGraphs | None = None,
                      digests: bool = False) -> StepBatch:
    """Step files -> one set of frames. A file that cannot be read (its partition graphs
    included) is reported in `errors` and adds no rows; so is a step without node stats.
    The C decoder reads the files unless `native` is False; a file it does not accept is
    walked with protobuf, which decides whether it is valid. `partition_graphs` shares
    the parsed graphs between the batches of a load; `digests` fills StepBatch.files."""
    use_native = native_decoder_available() if native is None else native
    decoder = _stepstats.Decoder() if use_native and _stepstats is not None else None
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
                raise _no_step_stats(str(path))
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
            errors.append(f"{path}: not a readable RunMetadata ({_reason(e)})")
            continue
        for digest, frame in new.items():
            graphs.setdefault(digest, frame)
    parts = ([_decoded_frames(decoder.finish())] if decoder is not None else []) + walked
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


def _decoded_frames(result: dict[str, Any]) -> StepFrames:
    """The C decoder's columns -> frames: numbers as they are, string codes looked up."""
    strings = pl.Series(result["strings"], dtype=pl.String)

    def table(name: str, schema: Schema, text: tuple[str, ...] = ()) -> pl.DataFrame:
        cols = []
        for col, (dtype, buf) in result[name].items():
            values = pl.Series(col, np.frombuffer(buf, dtype=dtype))
            if col in text:
                values = strings.gather(values).alias(col)
            cols.append(values)
        return pl.DataFrame(cols).select(list(schema))

    def triples(name: str) -> np.ndarray:
        return np.frombuffer(result[name], dtype=np.uint32).reshape(-1, 3)

    nodes, keys = _used_keys(table("nodes", NODE_SCHEMA), "key_id", triples("keys"))
    outputs, out_keys = _used_keys(table("outputs", OUTPUT_SCHEMA), "out_key",
                                   triples("output_keys"))
    output_keys = pl.DataFrame({"dtype": out_keys[:, 0].view(np.int32), "shape": out_keys[:, 1],
                                "allocator_name": strings.gather(out_keys[:, 2])})
    return StepFrames(
        nodes=nodes,  # the decoder fills in nanos from micros as _nanos_from_micros does
        keys=pl.DataFrame([strings.gather(codes).alias(name)
                           for name, codes in zip(KEY_SCHEMA, keys.T, strict=True)]),
        outputs=outputs,
        output_keys=_named_outputs(output_keys, result["shapes"]),
        memory=table("memory", MEMORY_SCHEMA, ("allocator_name",)),
        allocations=table("allocations", ALLOCATION_SCHEMA, ("allocator_name",)),
        threads=table("threads", THREAD_SCHEMA, ("lane", "name")),
    )


def _used_keys(rows: pl.DataFrame, column: str, keys: np.ndarray
               ) -> tuple[pl.DataFrame, np.ndarray]:
    """Only the keys some row has (a step the decoder declined may have added some),
    numbered in order."""
    key_id = rows.get_column(column).to_numpy()
    used = np.bincount(key_id, minlength=len(keys)) > 0
    if used.all():
        return rows, keys
    renumber = (np.cumsum(used) - 1).astype(np.uint32)
    return rows.with_columns(pl.Series(column, renumber[key_id])), keys[used]


def _nanos_from_micros(nodes: pl.DataFrame) -> pl.DataFrame:
    """Traces from before the nanosecond fields existed: nanos = micros x 1000."""
    old = pl.col("start_ns") == 0
    return nodes.with_columns(
        [pl.when(old).then(pl.col(us) * 1000).otherwise(pl.col(ns_)).alias(ns_)
         for us, ns_ in (("all_start_us", "start_ns"), ("op_start_rel_us", "op_start_rel_ns"),
                         ("op_end_rel_us", "op_end_rel_ns"), ("all_end_rel_us", "all_end_rel_ns"),
                         ("scheduled_us", "scheduled_ns"))])


# DataType names by enum number (gathering from it is ~5x cheaper than a replace).
_DTYPE_TABLE = pl.Series([_DTYPE_NAMES.get(i, str(i)) for i in range(max(_DTYPE_NAMES) + 1)],
                         dtype=pl.String)


def _named_outputs(outputs: pl.DataFrame, shapes: list[list[int]]) -> pl.DataFrame:
    """dtype enum numbers -> names ("float", "int32"); shape codes -> dims from `shapes`.

    Applied to the output keys: a few hundred rows whatever the run's size."""
    shape_table = pl.Series("shape", shapes, dtype=pl.List(pl.Int64))
    dtype = outputs.get_column("dtype")
    if dtype.is_between(0, len(_DTYPE_TABLE) - 1).all():
        names = _DTYPE_TABLE.gather(dtype)
    else:  # numbers no TensorFlow of ours knows: shown as numbers
        names = dtype.replace_strict(_DTYPE_NAMES, default=dtype.cast(pl.String),
                                     return_dtype=pl.String)
    return outputs.with_columns(
        dtype=names.alias("dtype"),
        shape=shape_table.gather(outputs.get_column("shape")),
    )


_NODE_ROW = [  # the order of the tuple _walk_step_stats builds per NodeExecStats
    "lane", "node_name", "timeline_label", "all_start_us", "op_start_rel_us", "op_end_rel_us",
    "all_end_rel_us", "scheduled_us", "start_ns", "op_start_rel_ns", "op_end_rel_ns",
    "all_end_rel_ns", "scheduled_ns", "thread_id", "mem_total_bytes", "mem_peak_bytes",
    "mem_live_bytes", "allocator_bytes_in_use", "temp_bytes", "persistent_bytes",
    "output_bytes",
]
_OUTPUT_ROW = ["exec_idx", "slot", "dtype", "shape", "requested_bytes", "allocated_bytes",
               "allocation_id", "allocator_name", "ptr"]
_MEMORY_ROW = ["exec_idx", "allocator_name", "total_bytes", "peak_bytes", "live_bytes",
               "allocator_bytes_in_use"]
_ALLOC_ROW = ["exec_idx", "allocator_name", "alloc_us", "alloc_bytes"]


# The walk's rows carry their keys' values (for outputs: dtype and shape as numbers);
# split_keys numbers them.
_WALKED_NODE_SCHEMA: Schema = {**{k: v for k, v in NODE_SCHEMA.items() if k != "key_id"},
                               **KEY_SCHEMA}
_WALKED_OUTPUT_SCHEMA: Schema = {
    **{k: v for k, v in OUTPUT_SCHEMA.items() if k != "out_key"},
    "dtype": pl.Int32, "shape": pl.UInt32, "allocator_name": pl.String}


def _rows_frame(rows: list[tuple], names: list[str], schema: Schema, step: int,
                overrides: Schema | None = None, index: bool = False) -> pl.DataFrame:
    """Rows of tuples -> a frame with `schema` (columns transposed by zip, in C).

    index=True numbers the rows as `exec_idx` (the executions frame)."""
    types = {**schema, **(overrides or {})}
    columns: list[Any] = list(zip(*rows, strict=True)) if rows else [[] for _ in names]
    frame = pl.DataFrame({n: pl.Series(n, c, dtype=types[n]) for n, c in zip(names, columns,
                                                                              strict=True)})
    frame = frame.with_columns(step=pl.lit(step, pl.Int64))
    if index:
        frame = frame.with_columns(exec_idx=pl.int_range(pl.len(), dtype=pl.UInt32))
    return frame.select(list(schema))


def _walk_step_stats(stats: step_stats_pb2.StepStats, step: int) -> StepFrames:
    """One pass over the NodeExecStats: one tuple per execution, output, allocator record.

    Per-node work is kept to attribute reads and one append; empty sub-messages are
    skipped with HasField, shapes are numbered by their bytes (as the C decoder does).
    """
    node_rows: list[tuple] = []
    out_rows: list[tuple] = []
    mem_rows: list[tuple] = []
    alloc_rows: list[tuple] = []
    thread_rows: list[tuple] = []
    shape_codes: dict[bytes, int] = {}
    shapes: list[list[int]] = []
    idx = nameless = 0
    for dev in stats.dev_stats:
        lane = dev.device
        for tid, tname in dev.thread_names.items():
            thread_rows.append((lane, tid, tname))
        for ns in dev.node_stats:
            if not ns.node_name:  # not an execution TensorFlow writes: left out, counted
                nameless += 1
                continue
            total = peak = live = inuse = temp = persist = out_bytes = 0
            if ns.memory:
                for mem in ns.memory:
                    name = mem.allocator_name
                    total += mem.total_bytes
                    peak += mem.peak_bytes
                    live += mem.live_bytes
                    used = mem.allocator_bytes_in_use
                    inuse = max(inuse, used)
                    mem_rows.append((idx, name, mem.total_bytes, mem.peak_bytes,
                                     mem.live_bytes, used))
                    for rec in mem.allocation_records:
                        alloc_rows.append((idx, name, rec.alloc_micros, rec.alloc_bytes))
            if ns.HasField("memory_stats"):
                ms = ns.memory_stats
                temp, persist = ms.temp_memory_size, ms.persistent_memory_size
            for out in ns.output:
                td = out.tensor_description
                ad = td.allocation_description
                req, alloc = ad.requested_bytes, ad.allocated_bytes
                if td.HasField("allocation_description"):
                    out_bytes += req if req > alloc else alloc
                key = td.shape.SerializeToString()
                shape = shape_codes.get(key)
                if shape is None:
                    shape = shape_codes[key] = len(shapes)
                    shapes.append([d.size for d in td.shape.dim])
                out_rows.append((idx, out.slot, td.dtype, shape, req, alloc,
                                 ad.allocation_id, ad.allocator_name, ad.ptr))
            node_rows.append((
                lane, ns.node_name, ns.timeline_label, ns.all_start_micros,
                ns.op_start_rel_micros, ns.op_end_rel_micros, ns.all_end_rel_micros,
                ns.scheduled_micros, ns.all_start_nanos, ns.op_start_rel_nanos,
                ns.op_end_rel_nanos, ns.all_end_rel_nanos, ns.scheduled_nanos, ns.thread_id,
                total, peak, live, inuse, temp, persist, out_bytes,
            ))
            idx += 1
    nodes, keys = split_keys(
        _rows_frame(node_rows, _NODE_ROW, _WALKED_NODE_SCHEMA, step, index=True),
        list(KEY_SCHEMA))
    outputs, output_keys = split_keys(
        _rows_frame(out_rows, _OUTPUT_ROW, _WALKED_OUTPUT_SCHEMA, step),
        list(OUTPUT_KEY_SCHEMA))
    return StepFrames(
        nodes=_nanos_from_micros(nodes.select(list(NODE_SCHEMA))),
        keys=keys,
        outputs=outputs.rename({"key_id": "out_key"}).select(list(OUTPUT_SCHEMA)),
        output_keys=_named_outputs(output_keys, shapes),
        memory=_rows_frame(mem_rows, _MEMORY_ROW, MEMORY_SCHEMA, step),
        allocations=_rows_frame(alloc_rows, _ALLOC_ROW, ALLOCATION_SCHEMA, step),
        threads=_rows_frame(thread_rows, ["lane", "thread_id", "name"], THREAD_SCHEMA, step),
        nameless=nameless,
    )


# ----------------------------------------------------------------------------- graphs


def _shape_dims(shape) -> list[int] | None:
    if shape.unknown_rank:
        return None
    return [d.size for d in shape.dim]




def ingest_graph_defs(graphs: Iterable[bytes], source: str, kind: str) -> pl.DataFrame:
    """GraphDefs -> one row per node: op type, device, inputs and the attrs we use.

    InputFileError naming `source` for bytes that are not a GraphDef (or hold strings
    that are not UTF-8)."""
    try:
        return _graph_nodes(graphs, kind)
    except PARSE_ERRORS as e:
        raise InputFileError(f"{source}: not a readable GraphDef ({_reason(e)})") from None


def _text_attr(attr, key: str) -> str | None:
    """A string attr as text; UnicodeDecodeError (an input error) when it is not UTF-8."""
    return attr[key].s.decode() if key in attr else None


def _graph_nodes(graphs: Iterable[bytes], kind: str) -> pl.DataFrame:
    cols: dict[str, list] = {k: [] for k in GRAPH_NODE_SCHEMA}
    for raw in graphs:
        graph = graph_pb2.GraphDef.FromString(raw)
        for node in graph.node:
            attr = node.attr
            cols["name"].append(node.name)
            cols["op"].append(node.op)
            cols["device"].append(node.device)
            cols["inputs"].append(list(node.input))
            cols["data_format"].append(_text_attr(attr, "data_format"))
            dtype = None
            for key in ("T", "dtype", "SrcT"):
                if key in attr:
                    dtype = _DTYPE_NAMES.get(attr[key].type)
                    break
            cols["dtype"].append(dtype)
            cols["shape"].append(_shape_dims(attr["shape"].shape) if "shape" in attr else None)
            if "_output_shapes" in attr:
                cols["output_shapes"].append(
                    [_shape_dims(s) or [] for s in attr["_output_shapes"].list.shape]
                )
            else:
                cols["output_shapes"].append(None)
            for key in ("tensor_name", "send_device", "recv_device"):  # Send/Recv pairing
                cols[key].append(_text_attr(attr, key))
            cols["fused_ops"].append([s.decode() for s in attr["fused_ops"].list.s]
                                     if "fused_ops" in attr else None)
            cols["source"].append(kind)
    return _frame(cols, GRAPH_NODE_SCHEMA)


def ingest_graph_file(path: Path) -> pl.DataFrame:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InputFileError(f"{path}: cannot read ({e.strerror or e})") from None
    return ingest_graph_defs([raw], str(path), "graph")


# ----------------------------------------------------------------------------- op log


def ingest_op_log_file(path: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """op_log.pb -> (per-op float_ops and types, per-op code trace frames outermost first)."""
    try:
        op_log = tfprof_log_pb2.OpLogProto.FromString(path.read_bytes())
    except OSError as e:
        raise InputFileError(f"{path}: cannot read ({e.strerror or e})") from None
    except PARSE_ERRORS as e:
        raise InputFileError(f"{path}: not a readable OpLogProto ({_reason(e)})") from None
    return op_log_frames(((e.name, e.float_ops, list(e.types), e.code_def.traces)
                          for e in op_log.log_entries), dict(op_log.id_to_string))


def op_log_frames(entries: Iterable[tuple[str, int, list[str], Any]], strings: dict[int, str]
                  ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(op log, code) frames from (name, float_ops, types, code traces) per op: what an
    op_log.pb entry and a tfprof ProfileNode both hold (traces name their file, function
    and line by ids into `strings`)."""
    ops: dict[str, list] = {k: [] for k in OP_LOG_SCHEMA}
    code: dict[str, list] = {k: [] for k in CODE_SCHEMA}
    for name, float_ops, op_types, traces in entries:
        ops["name"].append(name)
        ops["float_ops"].append(float_ops)
        ops["types"].append(op_types)
        for depth, tr in enumerate(traces):
            code["name"].append(name)
            code["depth"].append(depth)
            code["file"].append(strings.get(tr.file_id, ""))
            code["lineno"].append(tr.lineno)
            code["function"].append(strings.get(tr.function_id, ""))
            code["line"].append(strings.get(tr.line_id, ""))
            code["func_start_line"].append(tr.func_start_line)
    return _frame(ops, OP_LOG_SCHEMA), _frame(code, CODE_SCHEMA)


def empty_op_log() -> tuple[pl.DataFrame, pl.DataFrame]:
    return _empty(OP_LOG_SCHEMA), _empty(CODE_SCHEMA)
