"""StepStats -> StepFrames: the protobuf walk (the reference) and the C decoder's
columns (analyzer/_stepstats.c), giving the same frames."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from ..errors import InputFileError
from ..model import split_keys
from ..proto import step_stats_pb2
from ..schema import (
    ALLOCATION_SCHEMA,
    KEY_SCHEMA,
    MEMORY_SCHEMA,
    NODE_SCHEMA,
    OUTPUT_KEY_SCHEMA,
    OUTPUT_SCHEMA,
    THREAD_SCHEMA,
    Schema,
)
from .graphs import DTYPE_NAMES
from .wire import PARSE_ERRORS, Buffer, reason

if TYPE_CHECKING:
    from .._stepstats import Column, Decoded

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



def no_step_stats(source: str) -> InputFileError:
    return InputFileError(f"{source}: RunMetadata has no step_stats (was it traced?)")


def walk_step_bytes(stats_bytes: Buffer, step: int, source: str) -> StepFrames:
    """StepStats bytes -> frames with protobuf (the reference; the C decoder's fallback)."""
    try:
        stats = step_stats_pb2.StepStats.FromString(bytes(stats_bytes))
    except PARSE_ERRORS as e:
        raise InputFileError(f"{source}: not a readable RunMetadata ({reason(e)})") from None
    if not stats.dev_stats:
        raise no_step_stats(source)
    return _walk_step_stats(stats, step)


def decoded_frames(result: Decoded) -> StepFrames:
    """The C decoder's columns -> frames: numbers as they are (each column's buffer taken
    by polars without a copy, through the Arrow PyCapsule interface: no numpy, whose
    import costs a cold command ~50 ms), string codes looked up."""
    strings = pl.Series(result["strings"], dtype=pl.String)

    def table(columns: dict[str, Column], schema: Schema, text: tuple[str, ...] = ()
              ) -> pl.DataFrame:
        cols = []
        for col, (_dtype, buf) in columns.items():
            values = pl.Series(buf).alias(col)
            if col in text:
                values = strings.gather(values).alias(col)
            cols.append(values)
        return pl.DataFrame(cols).select(list(schema))

    def triples(keys: bytes) -> pl.DataFrame:
        """uint32 triples (a few thousand at most) -> three columns a, b, c."""
        flat = memoryview(keys).cast("I")
        return pl.DataFrame([pl.Series(name, flat[i::3].tolist(), dtype=pl.UInt32)
                             for i, name in enumerate("abc")])

    nodes, keys = _used_keys(table(result["nodes"], NODE_SCHEMA), "key_id",
                             triples(result["keys"]))
    outputs, out_keys = _used_keys(table(result["outputs"], OUTPUT_SCHEMA), "out_key",
                                   triples(result["output_keys"]))
    output_keys = pl.DataFrame({"dtype": out_keys.get_column("a").reinterpret(signed=True),
                                "shape": out_keys.get_column("b"),
                                "allocator_name": strings.gather(out_keys.get_column("c"))})
    return StepFrames(
        nodes=nodes,  # the decoder fills in nanos from micros as _nanos_from_micros does
        keys=pl.DataFrame([strings.gather(keys.get_column(codes)).alias(name)
                           for name, codes in zip(KEY_SCHEMA, "abc", strict=True)]),
        outputs=outputs,
        output_keys=_named_outputs(output_keys, result["shapes"]),
        memory=table(result["memory"], MEMORY_SCHEMA, ("allocator_name",)),
        allocations=table(result["allocations"], ALLOCATION_SCHEMA, ("allocator_name",)),
        threads=table(result["threads"], THREAD_SCHEMA, ("lane", "name")),
    )


def _used_keys(rows: pl.DataFrame, column: str, keys: pl.DataFrame
               ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Only the keys some row has (a step the decoder declined may have added some),
    numbered in order."""
    key_id = rows.get_column(column)
    used = pl.repeat(False, keys.height, dtype=pl.Boolean, eager=True).scatter(
        key_id.unique(), True)
    if used.all():
        return rows, keys
    renumber = (used.cast(pl.UInt32).cum_sum() - 1).cast(key_id.dtype)
    return (rows.with_columns(renumber.gather(key_id).alias(column)),
            keys.filter(used))


def _nanos_from_micros(nodes: pl.DataFrame) -> pl.DataFrame:
    """Traces from before the nanosecond fields existed: nanos = micros x 1000."""
    old = pl.col("start_ns") == 0
    return nodes.with_columns(
        [pl.when(old).then(pl.col(us) * 1000).otherwise(pl.col(ns_)).alias(ns_)
         for us, ns_ in (("all_start_us", "start_ns"), ("op_start_rel_us", "op_start_rel_ns"),
                         ("op_end_rel_us", "op_end_rel_ns"), ("all_end_rel_us", "all_end_rel_ns"),
                         ("scheduled_us", "scheduled_ns"))])


# DataType names by enum number (gathering from it is ~5x cheaper than a replace).
_DTYPE_TABLE = pl.Series([DTYPE_NAMES.get(i, str(i)) for i in range(max(DTYPE_NAMES) + 1)],
                         dtype=pl.String)


def _named_outputs(outputs: pl.DataFrame, shapes: list[list[int]]) -> pl.DataFrame:
    """dtype enum numbers -> names ("float", "int32"); shape codes -> dims from `shapes`.

    Applied to the output keys: a few hundred rows whatever the run's size."""
    shape_table = pl.Series("shape", shapes, dtype=pl.List(pl.Int64))
    dtype = outputs.get_column("dtype")
    if dtype.is_between(0, len(_DTYPE_TABLE) - 1).all():
        names = _DTYPE_TABLE.gather(dtype)
    else:  # numbers no TensorFlow of ours knows: shown as numbers
        names = dtype.replace_strict(DTYPE_NAMES, default=dtype.cast(pl.String),
                                     return_dtype=pl.String)
    return outputs.with_columns(
        dtype=names.alias("dtype"),
        shape=shape_table.gather(outputs.get_column("shape")),
    )


def _after_step(schema: Schema) -> list[str]:
    return [c for c in schema if c != "step"]


# The order of the tuples _walk_step_stats builds: an execution's key, then its numbers
# (but step, exec_idx and key_id, set per frame); an output's numbers with its key's
# values in place of out_key; memory, allocation and thread records as their frames.
_NODE_ROW = [*KEY_SCHEMA, *(c for c in NODE_SCHEMA if c not in ("step", "exec_idx", "key_id"))]
_OUTPUT_ROW = ["exec_idx", "slot", "dtype", "shape", "requested_bytes", "allocated_bytes",
               "allocation_id", "allocator_name", "ptr"]
_MEMORY_ROW = _after_step(MEMORY_SCHEMA)
_ALLOC_ROW = _after_step(ALLOCATION_SCHEMA)
_THREAD_ROW = _after_step(THREAD_SCHEMA)


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
        threads=_rows_frame(thread_rows, _THREAD_ROW, THREAD_SCHEMA, step),
        nameless=nameless,
    )

