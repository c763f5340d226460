"""tfprof profiles: the ProfileProto that `tf.compat.v1.profiler.Profiler
.serialize_to_string()` returns and `ProfileContext` dumps as `profile_<step>` (a folder
of those: the one of the latest step, which holds every step before it).

A ProfileProto keeps, per graph node: op, device, attrs, inputs, op_types (op log types),
float_ops, code trace, and per step an ExecProfile: the (start, duration) of each run per
device lane (tfprof keeps only the lanes it counts: canonical devices and `/stream:all`)
and the node's memory (requested, peak, residual, output bytes, summed as tfprof sums a
NodeExecStats' allocators, temporaries and persistent bytes). These become the same
frames a run dir gives, so that every view computes tfprof's numbers from them:

- one execution per (step, lane, start, duration), op_start_rel 0 and op_end_rel the
  duration (tfprof already rounded 0 to 1us);
- a step's memory on the node's first execution on its canonical device (views sum it);
- the graph from the nodes (ingest's GraphDef reader on a GraphDef rebuilt from them), op
  log types and float ops from op_types and float_ops, code frames from the traces.

Not in a ProfileProto (`lacks`): per-allocator memory over time, the outputs' dtypes and
shapes, per-stream and memcpy lanes, thread names.
"""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from google.protobuf.message import DecodeError

from .. import ingest, readfile
from ..errors import InputFileError, RunDirError
from ..ingest.wire import field_spans
from ..proto import graph_pb2, tfprof_log_pb2
from . import Part, Progress, Selection, SourceFrames, damage

_tfprof: types.ModuleType | None
try:  # the C reader of the runs (analyzer/_tfprof.c); optional, built at install if possible
    from .. import _tfprof as _tfprof_module
    _tfprof = _tfprof_module
except ImportError:  # pragma: no cover - without a compiler: the protobuf walk, same frames
    _tfprof = None

_PROFILE_RE = re.compile(r"^profile_?(\d+)?$")
_WHY = "not in tfprof profiles"
LACKS = {
    "memory": "per-allocator memory over time is not in tfprof profiles (per-node bytes are)",
    "outputs": "output dtypes and shapes are " + _WHY,
    "threads": _WHY,
}


def _candidates(folder: Path) -> list[tuple[int, Path]]:
    found = []
    for p in folder.iterdir():
        m = _PROFILE_RE.match(p.name)
        if m and p.is_file():
            found.append((int(m.group(1) or -1), p))
    return sorted(found)


def parse(path: Path, raw: bytes | None = None) -> tfprof_log_pb2.ProfileProto:
    raw = readfile.read_bytes(path, what="ProfileProto") if raw is None else raw
    try:
        _check_crowded(raw)
        profile = tfprof_log_pb2.ProfileProto.FromString(raw)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise InputFileError(f"{path}: not a tfprof ProfileProto ({e})"
                             + damage.hint(raw)) from None
    if not profile.nodes or not profile.steps:
        raise InputFileError(f"{path}: not a tfprof ProfileProto (no nodes or no steps)")
    return profile


_CROWDED = 1_000_000  # map entries (nodes, strings) any profile may hold
_ENTRY_BYTES = 16  # of the file per entry, at least, for a profile of more


def _check_crowded(raw: bytes) -> None:
    """ValueError for more than _CROWDED top-level entries averaging under _ENTRY_BYTES:
    protobuf makes each an object of ~100 bytes (20 MB of empty `nodes` entries took
    1.9 GB), while a real node holds a name and an op, a real string a file name."""
    if len(raw) < 2 * _CROWDED:  # an entry takes 2 bytes at least
        return
    count = 0
    try:  # counted, never listed
        for _ in field_spans(raw):
            count += 1
    except (DecodeError, IndexError):
        return  # the wire cannot be followed here (groups): protobuf decides
    if count > _CROWDED and len(raw) < _ENTRY_BYTES * count:
        raise ValueError(f"{count:,} entries in {len(raw):,} bytes (under {_ENTRY_BYTES} "
                         "each: nodes without names)")


def _looks_like_profile(path: Path) -> bool:
    try:
        parse(path)
    except InputFileError:
        return False
    return True


def _starts_like_profile(path: Path) -> bool:
    """A ProfileProto's first field is a `nodes` entry (field 1, length-delimited) or
    has_trace/steps; cheap enough for detection (reading parses the whole file)."""
    if not readfile.regular(path):  # a FIFO would block the open
        return False
    try:
        with open(path, "rb") as f:
            return f.read(1) in (b"\x0a", b"\x10", b"\x18", b"\x1a")
    except OSError:
        return False


def _strings(profile: Any) -> dict[int, str]:
    return dict(profile.id_to_string)


def _graph(profile: Any, where: str) -> pl.DataFrame:
    """The nodes as a GraphDef (name, op, device, attrs, inputs) read by ingest."""
    names = {node_id: node.name for node_id, node in profile.nodes.items()}
    graph = graph_pb2.GraphDef()
    for _, node in sorted(profile.nodes.items()):
        nd = graph.node.add()
        nd.name, nd.op, nd.device = node.name, node.op, node.canonical_device
        nd.input.extend(names.get(node.inputs[i], "") for i in sorted(node.inputs))
        for key, value in node.attrs.items():
            nd.attr[key].CopyFrom(value)
    return ingest.ingest_graph_defs([graph.SerializeToString()], where, "graph")


def _op_log_and_code(profile: Any) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A node's op_types hold its op and device too (tfprof adds them): left out, as an
    op_log.pb's types are."""
    return ingest.op_log_frames(
        ((node.name, node.float_ops,
          [t for t in node.op_types if t not in {node.op, node.canonical_device}],
          node.trace.traces) for _, node in sorted(profile.nodes.items())),
        _strings(profile))


_MEMORY_COLUMNS = ["mem_total_bytes", "mem_peak_bytes", "mem_live_bytes",
                   "allocator_bytes_in_use", "output_bytes"]
_RUNS_SCHEMA = {"step": pl.Int64, "lane": pl.String, "node_name": pl.String,
                "all_start_us": pl.Int64, "dur_us": pl.Int64}
_MEMORY_SCHEMA = {"step": pl.Int64, "lane": pl.String, "node_name": pl.String,
                  **{c: pl.Int64 for c in _MEMORY_COLUMNS}}


def _walk_runs(profile: Any) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The protobuf walk (without the C reader): collects numbers only."""
    step_c: list[int] = []
    lane_c: list[str] = []
    name_c: list[str] = []
    start_c: list[int] = []
    dur_c: list[int] = []
    mem_step: list[int] = []
    mem_lane: list[str] = []
    mem_name: list[str] = []
    mem_values: list[tuple[int, int, int, int, int]] = []
    for node in profile.nodes.values():
        name = node.name
        for step, ex in node.execs.items():
            for execs in (ex.cpu_execs, ex.accelerator_execs):
                for lane, times in execs.items():
                    for t in times.times:
                        start, dur = t.int64_values
                        step_c.append(step)
                        lane_c.append(lane)
                        name_c.append(name)
                        start_c.append(start)
                        dur_c.append(dur)
            m = ex.memory_execs
            if not m:
                continue
            mem_step.append(step)
            mem_lane.append(node.canonical_device)
            mem_name.append(name)
            if len(m) == 1:  # the usual case: one NodeExecStats on the canonical device
                x = m[0]
                mem_values.append((x.requested_bytes, x.peak_bytes, x.residual_bytes,
                                   x.allocator_bytes_in_use, x.output_bytes))
            else:
                mem_values.append((sum(x.requested_bytes for x in m),
                                   sum(x.peak_bytes for x in m),
                                   sum(x.residual_bytes for x in m),
                                   max(x.allocator_bytes_in_use for x in m),
                                   sum(x.output_bytes for x in m)))
    runs = pl.DataFrame({"step": step_c, "lane": lane_c, "node_name": name_c,
                         "all_start_us": start_c, "dur_us": dur_c}, schema=_RUNS_SCHEMA)
    values: list[Any] = (list(zip(*mem_values, strict=True)) if mem_values
                         else [[] for _ in range(5)])
    memory = pl.DataFrame(
        {"step": mem_step, "lane": mem_lane, "node_name": mem_name,
         **dict(zip(_MEMORY_COLUMNS, values, strict=True))}, schema=_MEMORY_SCHEMA)
    return runs, memory


def _read_runs(profile: Any, raw: bytes) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The same two frames from the C reader's columns (analyzer/_tfprof.c): ~50x less
    time than the walk; node keys become names (the memory's lane: the node's canonical
    device) by a join with the (few) nodes."""
    assert _tfprof is not None
    cols = _tfprof.runs(raw)
    ints = [np.frombuffer(c, dtype=np.int64) for c in cols[:12]]
    nodes = pl.DataFrame(
        [(key, node.name, node.canonical_device) for key, node in profile.nodes.items()],
        schema={"node": pl.Int64, "node_name": pl.String, "device": pl.String},
        orient="row")
    lanes = pl.Series("lane", cols[12], dtype=pl.String).gather(ints[2])
    runs = (pl.DataFrame({"node": ints[0], "step": ints[1], "lane": lanes,
                          "all_start_us": ints[3], "dur_us": ints[4]})
            .join(nodes, on="node", how="left", maintain_order="left")
            .select(*_RUNS_SCHEMA))
    memory = (pl.DataFrame({"node": ints[5], "step": ints[6],
                            **dict(zip(_MEMORY_COLUMNS, ints[7:], strict=True))})
              .join(nodes, on="node", how="left", maintain_order="left")
              .select("step", pl.col("device").alias("lane"), "node_name", *_MEMORY_COLUMNS))
    return runs.cast(_RUNS_SCHEMA), memory.cast(_MEMORY_SCHEMA)  # type: ignore[arg-type]


def _executions(profile: Any, raw: bytes | None = None) -> pl.DataFrame:
    """One row per timed run of a node in a step; a step's memory on the node's first
    run on its canonical device (views sum per node and step, so that is where it
    counts). The runs are read by the C reader when built (else the protobuf walk);
    polars numbers and joins them."""
    runs, memory = (_read_runs(profile, raw) if _tfprof is not None and raw is not None
                    else _walk_runs(profile))
    labels = pl.DataFrame([(node.name, node.op) for node in profile.nodes.values()],
                          schema={"node_name": pl.String, "op": pl.String}, orient="row")
    labels = labels.unique("node_name", keep="last", maintain_order=True)
    zero = pl.lit(0, pl.Int64)
    return (
        runs.sort("step", "all_start_us", "lane", "node_name", maintain_order=True)
        .with_columns(exec_idx=pl.int_range(pl.len(), dtype=pl.UInt32).over("step"),
                      first=pl.int_range(pl.len()).over("step", "lane", "node_name") == 0)
        .join(memory.with_columns(first=pl.lit(True)), on=["step", "lane", "node_name",
                                                            "first"],
              how="left", maintain_order="left")
        .join(labels, on="node_name", how="left", maintain_order="left")
        .select(
            "step", "exec_idx", "all_start_us", op_start_rel_us=zero,
            op_end_rel_us=pl.col("dur_us"), all_end_rel_us=pl.col("dur_us"),
            scheduled_us=zero, start_ns=pl.col("all_start_us") * 1000, op_start_rel_ns=zero,
            op_end_rel_ns=pl.col("dur_us") * 1000, all_end_rel_ns=pl.col("dur_us") * 1000,
            scheduled_ns=zero, thread_id=pl.lit(0, pl.UInt32),
            **{c: pl.col(c).fill_null(0) for c in _MEMORY_COLUMNS[:4]},
            temp_bytes=zero, persistent_bytes=zero,
            output_bytes=pl.col("output_bytes").fill_null(0),
            lane="lane", node_name="node_name",
            timeline_label=pl.format("{} = {}()", "node_name", "op"))
    )


class TfprofSource:
    kind = "tfprof"
    files = "tfprof profile_*"  # what the not-a-profile error names
    description = ("tfprof profiles (ProfileProto from Profiler.serialize_to_string or "
                   "ProfileContext's profile_<step>), or their folder")

    def accepts(self, path: Path) -> bool:
        if path.is_dir():
            found = _candidates(path)
            return bool(found) and _looks_like_profile(found[-1][1])
        if path.is_file() and _PROFILE_RE.match(path.name):
            return _starts_like_profile(path)  # parsed (and judged) when read
        return path.is_file() and _looks_like_profile(path)

    def parts(self, path: Path, chosen: Selection) -> list[Part]:
        problems: list[str] = []
        if path.is_dir():
            found = _candidates(path)
            # FIFOs, devices named profile_<step>: reported, never opened
            problems = readfile.scan(path, lambda n: bool(_PROFILE_RE.match(n)))[1]
            if not found:
                raise RunDirError(f"{readfile.shown(path)}: no profile_<step> file"
                                  + (f" ({problems[0]})" if problems else ""))
            file = found[-1][1]  # the latest dump holds every step before it
        elif path.exists():
            file = path  # not a regular file: reading it says so
        else:
            raise RunDirError(f"{readfile.shown(path)}: no such file or directory")
        return [Part(self.kind, path, "worker:0", (str(file),), warnings=tuple(problems))]

    def read(self, part: Part, jobs: int, progress: Progress | None) -> SourceFrames:
        path = Path(part.files[0])
        raw = readfile.read_bytes(path, what="ProfileProto")
        profile = parse(path, raw)
        try:
            op_log, code = _op_log_and_code(profile)
            frames = {"nodes": _executions(profile, raw), "graph_nodes": _graph(profile, str(path)),
                      "op_log": op_log, "code": code}
        except (ValueError, IndexError) as e:  # e.g. a run time that is not (start, dur)
            raise InputFileError(f"{path}: not a tfprof ProfileProto ({e})") from None
        lacks = dict(LACKS)
        if not profile.has_trace or not code.height:
            lacks["code"] = "this tfprof profile has no code traces"
        return SourceFrames(frames, [], lacks)


SOURCE = TfprofSource()
