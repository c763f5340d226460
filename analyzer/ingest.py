"""Protos -> polars frames. The only module that walks protobuf messages.

Each step file becomes a `StepFrames` (plain column lists turned into polars frames), so
that the rest of the engine works on columns. The hot loop is `_walk_step_stats`: it reads
each NodeExecStats once, keeping micros (what tfprof computes with) and nanos (what the
timeline draws with). Partition graphs repeat in every step file; they are split off the
RunMetadata bytes without parsing and parsed once per distinct content.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from google.protobuf.message import DecodeError

from analyzer.errors import InputFileError
from analyzer.proto import graph_pb2, step_stats_pb2, tfprof_log_pb2, types_pb2

Schema = dict[str, Any]  # column name -> polars dtype

# RunMetadata field numbers (analyzer/proto/config.proto).
_STEP_STATS = 1
_PARTITION_GRAPHS = 3
_FUNCTION_GRAPHS = 4
# RunMetadata.FunctionGraphs field numbers.
_FG_PARTITION_GRAPHS = 1

_DTYPE_NAMES = {v.number: v.name.removeprefix("DT_").lower()
                for v in types_pb2.DataType.DESCRIPTOR.values}

NODE_SCHEMA: Schema = {
    "step": pl.Int64,
    "exec_idx": pl.UInt32,
    "lane": pl.String,
    "node_name": pl.String,
    "timeline_label": pl.String,
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
OUTPUT_SCHEMA: Schema = {
    "step": pl.Int64,
    "exec_idx": pl.UInt32,
    "slot": pl.Int32,
    "dtype": pl.String,
    "shape": pl.List(pl.Int64),
    "requested_bytes": pl.Int64,
    "allocated_bytes": pl.Int64,
    "allocation_id": pl.Int64,
    "allocator_name": pl.String,
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
    """Everything one step file holds, as frames; partition graphs as serialized bytes."""

    nodes: pl.DataFrame
    outputs: pl.DataFrame
    memory: pl.DataFrame
    allocations: pl.DataFrame
    threads: pl.DataFrame
    partition_graphs: list[bytes] = field(default_factory=list)


# ----------------------------------------------------------------------------- wire split


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _split_fields(buf: bytes) -> Iterable[tuple[int, bytes]]:
    """Top-level length-delimited fields of a message, as (field number, bytes), unparsed.

    Raises DecodeError on malformed or truncated input, like protobuf does.
    """
    pos, end = 0, len(buf)
    try:
        while pos < end:
            key, pos = _varint(buf, pos)
            number, wire = key >> 3, key & 7
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


def split_run_metadata(raw: bytes) -> tuple[bytes, list[bytes]]:
    """RunMetadata bytes -> (StepStats bytes, serialized partition GraphDefs).

    Function graphs' partition graphs are included: they name nodes that ran inside
    functions.
    """
    step_stats = b""
    graphs: list[bytes] = []
    for number, payload in _split_fields(raw):
        if number == _STEP_STATS:
            step_stats += payload  # repeated occurrences of a message field merge
        elif number == _PARTITION_GRAPHS:
            graphs.append(payload)
        elif number == _FUNCTION_GRAPHS:
            graphs.extend(p for n, p in _split_fields(payload) if n == _FG_PARTITION_GRAPHS)
    return step_stats, graphs


# ----------------------------------------------------------------------------- step files


def ingest_step_bytes(raw: bytes, step: int, source: str) -> StepFrames:
    """Parse one RunMetadata and turn it into frames. `source` names it in errors."""
    try:
        stats_bytes, graphs = split_run_metadata(raw)
        stats = step_stats_pb2.StepStats.FromString(stats_bytes)
    except (DecodeError, RuntimeError) as e:
        raise InputFileError(f"{source}: not a readable RunMetadata ({e})") from None
    if not stats.dev_stats:
        raise InputFileError(f"{source}: RunMetadata has no step_stats (was it traced?)")
    frames = _walk_step_stats(stats, step)
    frames.partition_graphs = graphs
    return frames


def ingest_step_file(path: Path, step: int, expected_size: int | None = None) -> StepFrames:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InputFileError(f"{path}: cannot read ({e.strerror or e})") from None
    if expected_size is not None and len(raw) != expected_size:
        raise InputFileError(
            f"{path}: truncated or changed (manifest says {expected_size} bytes, file has "
            f"{len(raw)})"
        )
    return ingest_step_bytes(raw, step, str(path))


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
_shape_strings: dict[bytes, str] = {}  # serialized TensorShapeProto -> "d0,d1,..."


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

    Per-node work is kept to attribute reads and one append (this loop is the ingest's hot
    spot); empty sub-messages are skipped with HasField, shapes are cached by their bytes.
    """
    node_rows: list[tuple] = []
    out_rows: list[tuple] = []
    mem_rows: list[tuple] = []
    alloc_rows: list[tuple] = []
    thread_rows: list[tuple] = []
    shapes = _shape_strings
    idx = 0
    for dev in stats.dev_stats:
        lane = dev.device
        for tid, tname in dev.thread_names.items():
            thread_rows.append((lane, tid, tname))
        for ns in dev.node_stats:
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
                shape = shapes.get(key)
                if shape is None:
                    shape = shapes[key] = ",".join([str(d.size) for d in td.shape.dim])
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
    nodes = _rows_frame(node_rows, _NODE_ROW, NODE_SCHEMA, step, index=True)
    if node_rows:
        # Traces from before nanosecond fields existed: micros x 1000.
        old = pl.col("start_ns") == 0
        nodes = nodes.with_columns(
            [pl.when(old).then(pl.col(us) * 1000).otherwise(pl.col(ns_)).alias(ns_)
             for us, ns_ in (("all_start_us", "start_ns"), ("op_start_rel_us", "op_start_rel_ns"),
                             ("op_end_rel_us", "op_end_rel_ns"),
                             ("all_end_rel_us", "all_end_rel_ns"),
                             ("scheduled_us", "scheduled_ns"))])
    outputs = _rows_frame(out_rows, _OUTPUT_ROW, OUTPUT_SCHEMA, step,
                          {"shape": pl.String, "dtype": pl.Int32})
    outputs = outputs.with_columns(
        dtype=pl.col("dtype").replace_strict(_DTYPE_NAMES, default=pl.col("dtype").cast(
            pl.String), return_dtype=pl.String),
        shape=pl.when(pl.col("shape") == "").then(pl.lit([], dtype=pl.List(pl.Int64)))
        .otherwise(pl.col("shape").str.split(",").cast(pl.List(pl.Int64))),
    )
    return StepFrames(
        nodes=nodes,
        outputs=outputs,
        memory=_rows_frame(mem_rows, _MEMORY_ROW, MEMORY_SCHEMA, step),
        allocations=_rows_frame(alloc_rows, _ALLOC_ROW, ALLOCATION_SCHEMA, step),
        threads=_rows_frame(thread_rows, ["lane", "thread_id", "name"], THREAD_SCHEMA, step),
    )


# ----------------------------------------------------------------------------- graphs


def _shape_dims(shape) -> list[int] | None:
    if shape.unknown_rank:
        return None
    return [d.size for d in shape.dim]




def ingest_graph_defs(graphs: Iterable[bytes], source: str, kind: str) -> pl.DataFrame:
    """GraphDefs -> one row per node: op type, device, inputs and the attrs we use."""
    cols: dict[str, list] = {k: [] for k in GRAPH_NODE_SCHEMA}
    for raw in graphs:
        try:
            graph = graph_pb2.GraphDef.FromString(raw)
        except (DecodeError, RuntimeError) as e:
            raise InputFileError(f"{source}: not a readable GraphDef ({e})") from None
        for node in graph.node:
            attr = node.attr
            cols["name"].append(node.name)
            cols["op"].append(node.op)
            cols["device"].append(node.device)
            cols["inputs"].append(list(node.input))
            fmt = attr["data_format"].s.decode() if "data_format" in attr else None
            cols["data_format"].append(fmt)
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
                cols[key].append(attr[key].s.decode() if key in attr else None)
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
    except (DecodeError, RuntimeError) as e:
        raise InputFileError(f"{path}: not a readable OpLogProto ({e})") from None
    strings = dict(op_log.id_to_string)
    ops: dict[str, list] = {k: [] for k in OP_LOG_SCHEMA}
    code: dict[str, list] = {k: [] for k in CODE_SCHEMA}
    for entry in op_log.log_entries:
        ops["name"].append(entry.name)
        ops["float_ops"].append(entry.float_ops)
        ops["types"].append(list(entry.types))
        for depth, tr in enumerate(entry.code_def.traces):
            code["name"].append(entry.name)
            code["depth"].append(depth)
            code["file"].append(strings.get(tr.file_id, ""))
            code["lineno"].append(tr.lineno)
            code["function"].append(strings.get(tr.function_id, ""))
            code["line"].append(strings.get(tr.line_id, ""))
            code["func_start_line"].append(tr.func_start_line)
    return _frame(ops, OP_LOG_SCHEMA), _frame(code, CODE_SCHEMA)


def empty_op_log() -> tuple[pl.DataFrame, pl.DataFrame]:
    return _empty(OP_LOG_SCHEMA), _empty(CODE_SCHEMA)


def empty_graph() -> pl.DataFrame:
    return _empty(GRAPH_NODE_SCHEMA)
