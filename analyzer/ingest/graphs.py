"""GraphDefs (graph.pb, partition graphs) and op logs (op_log.pb) -> frames."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import polars as pl

from ..errors import InputFileError
from ..proto import graph_pb2, tfprof_log_pb2, types_pb2
from ..readfile import read_bytes, shown
from ..schema import CODE_SCHEMA, GRAPH_NODE_SCHEMA, OP_LOG_SCHEMA
from .wire import PARSE_ERRORS, reason

DTYPE_NAMES = {v.number: v.name.removeprefix("DT_").lower()
                for v in types_pb2.DataType.DESCRIPTOR.values}


def _frame(columns: dict[str, list], schema: dict) -> pl.DataFrame:
    return pl.DataFrame(columns, schema=schema)


def _shape_dims(shape) -> list[int] | None:
    if shape.unknown_rank:
        return None
    return [d.size for d in shape.dim]




def ingest_graph_defs(graphs: Iterable[bytes], source: str, kind: str) -> pl.DataFrame:
    """GraphDefs -> one row per node: op type, device, inputs and the attrs we use.

    InputFileError naming `source` for bytes that are not a GraphDef (or hold strings
    that are not UTF-8)."""
    try:
        return graph_nodes(graphs, kind)
    except PARSE_ERRORS as e:
        raise InputFileError(f"{source}: not a readable GraphDef ({reason(e)})") from None


def _text_attr(attr, key: str) -> str | None:
    """A string attr as text; UnicodeDecodeError (an input error) when it is not UTF-8."""
    return attr[key].s.decode() if key in attr else None


def graph_nodes(graphs: Iterable[bytes], kind: str) -> pl.DataFrame:
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
                    dtype = DTYPE_NAMES.get(attr[key].type)
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
            cols["loop"].append(None)  # HLO only (sources/hlo_loops.py)
            cols["loop_trips"].append(None)
    return _frame(cols, GRAPH_NODE_SCHEMA)


def ingest_graph_file(path: Path) -> pl.DataFrame:
    raw = read_bytes(path, what="GraphDef")  # a regular file only, bounded
    return ingest_graph_defs([raw], shown(path), "graph")


# ----------------------------------------------------------------------------- op log


def ingest_op_log_file(path: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """op_log.pb -> (per-op float_ops and types, per-op code trace frames outermost first)."""
    raw = read_bytes(path, what="OpLogProto")  # a regular file only, bounded
    try:
        op_log = tfprof_log_pb2.OpLogProto.FromString(raw)
    except PARSE_ERRORS as e:
        raise InputFileError(f"{shown(path)}: not a readable OpLogProto ({reason(e)})"
                             ) from None
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
    return pl.DataFrame(schema=OP_LOG_SCHEMA), pl.DataFrame(schema=CODE_SCHEMA)
