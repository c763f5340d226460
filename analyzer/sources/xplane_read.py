"""One `<host>.xplane.pb` (an XSpace) -> runlens's raw frames.

What is an op (the rules of xprof's framework op stats, so that our per-op numbers are
xprof's):
- host planes (`/host:CPU`): events named `node:Type` (a TF op after Grappler; the type
  an identifier starting upper case or '_'), and tf.data stages `Iterator::A::B` (type
  "Dataset"); JAX/XLA CPU thunks (events with an `hlo_op` stat), named by the framework
  op of their HLO instruction (see xplane_hlo);
- device planes (`/device:GPU:N`): every event on a `Stream #N(...)` line (kernels and
  memcpys), tied to the TF op that launched it by its `level 0` annotation.
Derived lines a preprocessed file may hold ("TensorFlow Ops", "Steps", ...) are skipped.

An op's time: `op_end_rel` is its self time (its duration less the ops nested in it on the
same line, as xprof counts), `all_end_rel` its whole duration (the timeline draws it).
Steps: the event's `group_id` where the file has one, else the last `train` step marker
(`step_num`) that started at or before it (the first marker's step before any), else 0.
Protobuf messages are walked only here; columns are built with numpy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from google.protobuf.message import DecodeError

from analyzer import ingest
from analyzer.errors import InputFileError
from analyzer.proto import xplane_pb2
from analyzer.sources.xplane_hlo import HloOp, program_ops

HOST_LANE = "/device:CPU:0"  # canonical device lane: tfprof counts it as CPU time
_DEVICE_PLANE = re.compile(r"^/device:(GPU|TPU):(\d+)$")
_STREAM_LINE = re.compile(r"^Stream #(\d+)")
_TF_TYPE = re.compile(r"^[A-Z_][A-Za-z0-9_]*$")
_TF_NAME = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9_.\\/>\-]*$")
STEP_MARKERS = ("train", "Profiled batch")
_MEMORY_EVENTS = {"MemoryAllocation": 1, "MemoryDeallocation": -1}

# Event kinds, per event metadata.
_OTHER, _TF_OP, _DATASET, _MARKER, _MEMORY = 0, 1, 2, 3, 4


@dataclass
class Ops:
    """Op executions of one file, column by column (times in ps; names per row)."""

    lane: list[np.ndarray] = field(default_factory=list)
    thread: list[np.ndarray] = field(default_factory=list)
    start_ps: list[np.ndarray] = field(default_factory=list)
    dur_ps: list[np.ndarray] = field(default_factory=list)
    self_ps: list[np.ndarray] = field(default_factory=list)
    group: list[np.ndarray] = field(default_factory=list)
    name: list[np.ndarray] = field(default_factory=list)  # index into `names`
    names: list[tuple[str, str]] = field(default_factory=list)  # (node_name, op_type)
    name_ids: dict[tuple[str, str], int] = field(default_factory=dict)
    lanes: list[str] = field(default_factory=list)
    threads: dict[tuple[str, int], str] = field(default_factory=dict)

    def name_id(self, node: str, op_type: str) -> int:
        key = (node, op_type)
        got = self.name_ids.get(key)
        if got is None:
            got = self.name_ids[key] = len(self.names)
            self.names.append(key)
        return got

    def lane_id(self, lane: str) -> int:
        if lane not in self.lanes:
            self.lanes.append(lane)
        return self.lanes.index(lane)


def parse_op_name(name: str) -> tuple[int, str, str]:
    """(kind, node, type) of a host event's name, as xprof's ParseTfOpFullname."""
    if name in STEP_MARKERS:
        return _MARKER, name, ""
    if name in _MEMORY_EVENTS:
        return _MEMORY, name, ""
    if name.startswith("Iterator::"):
        # tf.data stages: '::' becomes '/', so the scope view nests a pipeline's stages.
        return _DATASET, name.replace("::", "/"), "Dataset"
    node, sep, op_type = name.partition(":")
    if sep and _TF_TYPE.match(op_type) and _TF_NAME.match(node):
        return _TF_OP, node, op_type
    return _OTHER, name, ""


def self_times(start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Each event's duration less the durations of the events directly nested in it
    (events of one line nest properly, as TraceMe scopes do)."""
    order = np.lexsort((-dur, start))
    s, d = start[order], dur[order]
    end = s + d
    out = d.copy()
    if len(s) < 2 or bool(np.all(s[1:] >= np.maximum.accumulate(end)[:-1])):
        return out  # nothing nests (the common case): self time = duration
    stack: list[int] = []
    for i in range(len(s)):
        while stack and s[i] >= end[stack[-1]]:
            stack.pop()
        if stack:
            out[stack[-1]] -= d[i]
        stack.append(i)
    result = np.empty_like(out)
    result[order] = out
    return result


def _stat_names(plane: xplane_pb2.XPlane) -> dict[int, str]:
    return {k: v.name for k, v in plane.stat_metadata.items()}


def _stat_value(stat: xplane_pb2.XStat, names: dict[int, str]) -> Any:
    kind = stat.WhichOneof("value")
    if kind == "ref_value":
        return names.get(stat.ref_value, "")
    return getattr(stat, kind) if kind else None


def _event_columns(events, index: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """offset_ps and duration_ps of `events` (those at `index`)."""
    picked = events if index is None else [events[int(i)] for i in index]
    n = len(picked)
    off = np.fromiter((e.offset_ps for e in picked), np.int64, n)
    dur = np.fromiter((e.duration_ps for e in picked), np.int64, n)
    return off, dur


def _stats_of(events, index: np.ndarray, wanted: set[int], names: dict[int, str]
              ) -> list[dict[int | None, Any]]:
    out = []
    for i in index:
        out.append({s.metadata_id: _stat_value(s, names)
                    for s in events[int(i)].stats if s.metadata_id in wanted})
    return out


@dataclass
class Plane:
    """What one file holds besides op executions."""

    markers: list[tuple[int, int, int]] = field(default_factory=list)  # start_ps, end, step
    memory: list[tuple[int, str, int]] = field(default_factory=list)  # t_ps, allocator, ±B
    warnings: list[str] = field(default_factory=list)
    hlo: bool = False


def _read_host(plane: xplane_pb2.XPlane, ops: Ops, extra: Plane,
               hlo: dict[tuple[int, str], HloOp]) -> None:
    names = _stat_names(plane)
    by_name = {v: k for k, v in names.items()}
    kinds: dict[int, tuple[int, str, str]] = {}
    for mid, meta in plane.event_metadata.items():
        kinds[mid] = parse_op_name(meta.name)
    hlo_stat = by_name.get("hlo_op")
    program_stat = by_name.get("program_id")
    group_stat = by_name.get("group_id")
    step_stat = by_name.get("step_num")
    ids = np.array(sorted(kinds), dtype=np.int64)
    codes = np.array([kinds[i][0] for i in ids], dtype=np.int8)
    lane = ops.lane_id(HOST_LANE)
    for thread, line in enumerate(plane.lines):
        events = line.events
        if not len(events):
            continue
        base_ps = line.timestamp_ns * 1000
        mid = np.fromiter((e.metadata_id for e in events), np.int64, len(events))
        pos = np.clip(np.searchsorted(ids, mid), 0, max(len(ids) - 1, 0))
        code = np.where(ids[pos] == mid, codes[pos], _OTHER) if len(ids) else \
            np.zeros(len(mid), np.int8)
        op_index = np.flatnonzero((code == _TF_OP) | (code == _DATASET))
        node_ids = [ops.name_id(*kinds[int(m)][1:]) for m in mid[op_index]]
        # JAX/XLA thunks: named by their HLO instruction (hlo_op stat).
        if hlo_stat is not None:
            other = np.flatnonzero(code == _OTHER)
            wanted = {hlo_stat} | ({program_stat} if program_stat is not None else set())
            found = []
            for i, stats in zip(other, _stats_of(events, other, wanted, names), strict=True):
                inst = stats.get(hlo_stat)
                if not inst:
                    continue
                program = stats.get(program_stat, 0) if program_stat is not None else 0
                op = hlo.get((int(program), str(inst)))  # type: ignore[call-overload]
                node, op_type = (op.op_name, op.op_type) if op else (str(inst), "hlo")
                found.append((i, ops.name_id(node, op_type)))
            if found:
                extra.hlo = True
                op_index = np.concatenate([op_index, np.array([f[0] for f in found])])
                node_ids += [f[1] for f in found]
        if len(op_index):
            off, dur = _event_columns(events, op_index)
            ops.lane.append(np.full(len(off), lane, np.int32))
            ops.thread.append(np.full(len(off), thread, np.int32))
            ops.start_ps.append(base_ps + off)
            ops.dur_ps.append(dur)
            ops.self_ps.append(self_times(off, dur))
            ops.name.append(np.array(node_ids, np.int64))
            ops.group.append(_groups(events, op_index, group_stat))
            ops.threads[(HOST_LANE, thread)] = line.display_name or line.name
        for i in np.flatnonzero(code == _MARKER):
            e = events[int(i)]
            step = next((int(_stat_value(s, names)) for s in e.stats  # type: ignore[arg-type]
                         if s.metadata_id == step_stat), None) if step_stat is not None \
                else None
            if step is not None:
                extra.markers.append((base_ps + e.offset_ps, base_ps + e.offset_ps
                                      + e.duration_ps, step))
        for i in np.flatnonzero(code == _MEMORY):
            e = events[int(i)]
            sign = _MEMORY_EVENTS[plane.event_metadata[e.metadata_id].name]
            named: dict[str | None, Any] = {names.get(s.metadata_id): _stat_value(s, names)
                                            for s in e.stats}
            size = named.get("allocation_bytes") or named.get("requested_bytes") or 0
            extra.memory.append((base_ps + e.offset_ps, str(named.get("allocator_name", "")),
                                 sign * int(size)))  # type: ignore[call-overload]


def _groups(events, index: np.ndarray, group_stat: int | None) -> np.ndarray:
    """group_id per event (-1 where none)."""
    out = np.full(len(index), -1, np.int64)
    if group_stat is None:
        return out
    for k, i in enumerate(index):
        for s in events[int(i)].stats:
            if s.metadata_id == group_stat:
                out[k] = s.int64_value or s.uint64_value
                break
    return out


def _read_device(plane: xplane_pb2.XPlane, device: str, ops: Ops) -> None:
    names = _stat_names(plane)
    by_name = {v: k for k, v in names.items()}
    level0, annotation = by_name.get("level 0"), by_name.get("annotation")
    tf_op = by_name.get("tf_op")
    wanted = {s for s in (level0, annotation, tf_op) if s is not None}
    lane = ops.lane_id(f"{device}/stream:all")
    for line in plane.lines:
        m = _STREAM_LINE.match(line.name)
        if not m or not len(line.events):
            continue
        events = line.events
        index = np.arange(len(events))
        off, dur = _event_columns(events)
        node_ids = []
        for e, stats in zip(events, _stats_of(events, index, wanted, names), strict=True):
            kernel = plane.event_metadata[e.metadata_id].name
            launched = str(stats.get(level0) or stats.get(tf_op) or "")
            if not launched and annotation in stats:
                launched = str(stats[annotation]).split("::")[0]
            launched = launched.split("#")[0]
            _, node, op_type = parse_op_name(launched) if launched else (0, "", "")
            if not op_type:  # not launched by a TF op we can name
                node, op_type = "unattributed", kernel.split("(")[0].split("<")[0][-60:]
            node_ids.append(ops.name_id(f"{node}:{kernel}", op_type))
        stream = int(m.group(1))
        ops.lane.append(np.full(len(off), lane, np.int32))
        ops.thread.append(np.full(len(off), stream, np.int32))
        ops.start_ps.append(line.timestamp_ns * 1000 + off)
        ops.dur_ps.append(dur)
        ops.self_ps.append(dur.copy())
        ops.name.append(np.array(node_ids, np.int64))
        group_stat = by_name.get("group_id")
        ops.group.append(_groups(events, index, group_stat))
        ops.threads[(f"{device}/stream:all", stream)] = line.name


def parse_xspace(path: Path) -> xplane_pb2.XSpace:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InputFileError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        space = xplane_pb2.XSpace.FromString(raw)
    except (DecodeError, RuntimeError) as e:
        raise InputFileError(f"{path}: not a readable XSpace profile ({e})") from None
    if not space.planes:
        raise InputFileError(f"{path}: an XSpace with no planes (not a profile?)")
    return space


def read_space(space: xplane_pb2.XSpace) -> tuple[Ops, Plane]:
    """The op executions and markers/memory of every plane."""
    ops, extra = Ops(), Plane()
    hlo: dict[tuple[int, str], HloOp] = {}
    for plane in space.planes:
        if plane.name == "/host:metadata":
            found, warnings = program_ops(plane)
            hlo.update(found)
            extra.warnings += warnings
    for plane in space.planes:
        if plane.name.startswith("/host:") and plane.name != "/host:metadata":
            _read_host(plane, ops, extra, hlo)
        elif m := _DEVICE_PLANE.match(plane.name):
            _read_device(plane, f"/device:{m.group(1)}:{m.group(2)}", ops)
    return ops, extra


def assign_steps(start_ps: np.ndarray, group: np.ndarray,
                 markers: list[tuple[int, int, int]]) -> np.ndarray:
    """group_id where set; else the step of the last marker started at or before the
    event (the first marker's before any); else 0."""
    if not markers:
        by_marker = np.zeros(len(start_ps), np.int64)
    else:
        m = sorted(markers)
        starts = np.array([x[0] for x in m], np.int64)
        steps = np.array([x[2] for x in m], np.int64)
        at = np.searchsorted(starts, start_ps, side="right") - 1
        by_marker = steps[np.clip(at, 0, len(m) - 1)]
    return np.where(group >= 0, group, by_marker)


def _cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)


def frames_of(ops: Ops, extra: Plane, worker: str) -> dict[str, pl.DataFrame]:
    """Executions + keys, allocations and threads; the others empty."""
    start = _cat(ops.start_ps, np.int64)
    dur, own = _cat(ops.dur_ps, np.int64), _cat(ops.self_ps, np.int64)
    name, lane = _cat(ops.name, np.int64), _cat(ops.lane, np.int64)
    thread = _cat(ops.thread, np.int64)
    step = assign_steps(start, _cat(ops.group, np.int64), extra.markers)
    order = np.lexsort((start, step))
    start, dur, own, name, lane, thread, step = (
        a[order] for a in (start, dur, own, name, lane, thread, step))
    # One key per (lane, name).
    key_code = lane * max(len(ops.names), 1) + name
    uniq, key_id = np.unique(key_code, return_inverse=True)
    key_lane, key_name = uniq // max(len(ops.names), 1), uniq % max(len(ops.names), 1)
    nodes = [ops.names[int(i)] for i in key_name]
    keys = pl.DataFrame({
        "worker": pl.Series([worker] * len(uniq), dtype=pl.String),
        "lane": pl.Series([ops.lanes[int(i)] for i in key_lane], dtype=pl.String),
        "node_name": pl.Series([n for n, _ in nodes], dtype=pl.String),
        "timeline_label": pl.Series([f"{n.split(':')[0]} = {t}()" for n, t in nodes],
                                    dtype=pl.String),
    })
    first = np.r_[True, step[1:] != step[:-1]] if len(step) else np.zeros(0, bool)
    group_start = np.flatnonzero(first)
    exec_idx = np.arange(len(step)) - np.repeat(group_start, np.diff(np.r_[group_start,
                                                                            len(step)]))
    start_ns, dur_ns, own_ns = start // 1000, dur // 1000, own // 1000
    zero = np.zeros(len(step), np.int64)
    executions = pl.DataFrame({
        "step": step, "exec_idx": exec_idx, "key_id": key_id,
        "all_start_us": start_ns // 1000, "op_start_rel_us": zero,
        "op_end_rel_us": own_ns // 1000, "all_end_rel_us": dur_ns // 1000,
        "scheduled_us": zero, "start_ns": start_ns, "op_start_rel_ns": zero,
        "op_end_rel_ns": own_ns, "all_end_rel_ns": dur_ns, "scheduled_ns": zero,
        "thread_id": thread, **{c: zero for c in (
            "mem_total_bytes", "mem_peak_bytes", "mem_live_bytes", "allocator_bytes_in_use",
            "temp_bytes", "persistent_bytes", "output_bytes")},
    }).cast(ingest.NODE_SCHEMA)  # type: ignore[arg-type]
    threads = (
        executions.select("step", "key_id", "thread_id").unique()
        .join(pl.DataFrame({"key_id": np.arange(len(uniq)),
                            "lane": keys["lane"]}).cast({"key_id": pl.UInt32}),
              on="key_id")
        .select("step", "lane", "thread_id").unique()
    )
    thread_names = pl.DataFrame(
        {"lane": [k[0] for k in ops.threads], "thread_id": [k[1] for k in ops.threads],
         "name": list(ops.threads.values())},
        schema={"lane": pl.String, "thread_id": pl.UInt32, "name": pl.String})
    threads = threads.join(thread_names, on=["lane", "thread_id"], how="left").select(
        list(ingest.THREAD_SCHEMA)).sort("step", "lane", "thread_id")
    mem = extra.memory
    alloc_t = np.array([m[0] for m in mem], np.int64)
    allocations = pl.DataFrame({
        "step": assign_steps(alloc_t, np.full(len(mem), -1, np.int64), extra.markers),
        "exec_idx": np.zeros(len(mem), np.int64),
        "allocator_name": [m[1] for m in mem],
        "alloc_us": alloc_t // 1_000_000,
        "alloc_bytes": [m[2] for m in mem],
    }, schema_overrides={"allocator_name": pl.String}).cast(
        ingest.ALLOCATION_SCHEMA)  # type: ignore[arg-type]
    return {"executions": executions, "keys": keys, "threads": threads,
            "allocations": allocations}
