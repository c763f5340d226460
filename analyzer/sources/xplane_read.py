"""One `<host>.xplane.pb` (an XSpace) -> runlens's raw frames.

What is an op (the rules of xprof's framework op stats, so that our per-op numbers are
xprof's):
- host planes (`/host:CPU`): events named `node:Type` (a TF op after Grappler; the type
  an identifier starting upper case or '_'), tf.data stages `Iterator::A::B` (type
  "Dataset"), TF2 eager ops `EagerLocalExecute: Type` (named `eager/Type`: xprof reads
  none; the `EagerKernelExecute` inside is not an op, so it is not counted again; a
  tf.function called eagerly is not an op either); JAX/XLA CPU thunks (events with an
  `hlo_op` stat), named by the framework op of their HLO instruction (see xplane_hlo);
- device planes (xplane_device): every event on a GPU's `Stream #N(...)` line (kernels,
  memsets, memcpys), tied to its XLA program's HLO instruction (xla_attribution) or to
  the TF op that launched it (`level 0` annotation); a TPU's `XLA Ops`.
Derived lines a preprocessed file may hold ("TensorFlow Ops", "Steps", ...) are skipped.

An op's time: `op_end_rel` is its self time (its duration less the ops nested in it on the
same line, as xprof counts), `all_end_rel` its whole duration (the timeline draws it).
Steps (steps_and_spans, as xprof's step db): on a GPU profile with group_ids the groups
that ran device work, spanned by that work; else the `train` step markers (`step_num`),
each spanned by its marker; an event goes to the last step begun at or before it.
Events arrive as columns (xplane_wire); per-event work is numpy, per distinct name Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from .. import schema
from . import xplane_async, xplane_devsteps, xplane_links
from .xplane_arrays import distinct_rows, factorize, lookup, self_times
from .xplane_collectives import op_node, rendezvous_ids, wait_nodes
from .xplane_hlo import HloOp, Programs
from .xplane_steps import attribution, step_spans
from .xplane_wire import ABSENT, OTHER, Line, Lines, Plane

HOST_LANE = "/device:CPU:0"  # canonical device lane: tfprof counts it as CPU time
_DEVICE_PLANE = re.compile(r"^/device:(GPU|TPU):(\d+)$")
_TF_TYPE = re.compile(r"^[A-Z_][A-Za-z0-9_]*$")
_TF_NAME = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9_.\\/>\-]*$")
STEP_MARKERS = ("train", "Profiled batch")
EAGER = "EagerLocalExecute: "  # TF2 eager: one op run on its own (`EagerLocalExecute: MatMul`)
EAGER_SCOPE = "eager"  # the scope of eager ops' names (they have no graph node name)
_MEMORY_EVENTS = {"MemoryAllocation": 1, "MemoryDeallocation": -1}

# Event kinds, per event metadata.
_OTHER, _TF_OP, _DATASET, _MARKER, _MEMORY = 0, 1, 2, 3, 4


@dataclass
class Ops:
    """Op executions of one file, column by column (times in ps; names by number)."""

    lane: list[np.ndarray] = field(default_factory=list)
    thread: list[np.ndarray] = field(default_factory=list)
    start_ps: list[np.ndarray] = field(default_factory=list)
    dur_ps: list[np.ndarray] = field(default_factory=list)
    self_ps: list[np.ndarray] = field(default_factory=list)
    group: list[np.ndarray] = field(default_factory=list)
    # What launched each event (xplane_links): the XLA run (`run_id`) of a CPU thunk, the
    # `correlation_id` of a GPU event; ABSENT where it has none.
    run: list[np.ndarray] = field(default_factory=list)
    corr: list[np.ndarray] = field(default_factory=list)
    name: list[np.ndarray] = field(default_factory=list)  # index into `names`
    # 0: the event itself; k > 0: the k-th share of a shared collective (xplane_collectives)
    piece: list[np.ndarray] = field(default_factory=list)
    names: list[tuple[str, str]] = field(default_factory=list)  # (node_name, op_type)
    name_ids: dict[tuple[str, str], int] = field(default_factory=dict)
    lanes: list[str] = field(default_factory=list)
    threads: dict[tuple[str, int], str] = field(default_factory=dict)
    # A shared collective's name id -> its shares' (name id, fraction): xplane_collectives.
    shares: dict[int, list[tuple[int, float]]] = field(default_factory=dict)

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

    def add(self, lane: int | np.ndarray, thread: int | np.ndarray, start: np.ndarray,
            dur: np.ndarray, own: np.ndarray, name: np.ndarray, group: np.ndarray,
            run: np.ndarray | None = None, corr: np.ndarray | None = None) -> None:
        absent = np.full(len(start), ABSENT, np.int64)
        self.run.append(absent if run is None else run)
        self.corr.append(absent if corr is None else corr)
        self.lane.append(np.full(len(start), lane, np.int32))
        self.thread.append(np.full(len(start), thread, np.int32))
        self.start_ps.append(start)
        self.dur_ps.append(dur)
        self.self_ps.append(own)
        self.name.append(name)
        self.group.append(group)
        self.piece.append(np.zeros(len(start), np.int64))


@dataclass
class Extra:
    """What one file holds besides op executions."""

    markers: list[tuple[int, int, int]] = field(default_factory=list)  # start_ps, end, step
    # Allocator events, per line: (time_ps, allocator name, bytes: + allocated, - freed).
    memory: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    hlo: bool = False
    # Device time per (device, how its events were placed: xla_attribution.HOW), in ps.
    attribution: list[tuple[str, str, int]] = field(default_factory=list)
    programs: Programs | None = None  # the HLO of the metadata plane (xplane_hlo)
    # Framework op -> [events, out bytes, in bytes, float ops] of its HLO (hlo_work).
    hlo_work: dict[str, list] = field(default_factory=dict)
    # GPU planes' device facts, one dict per device (xplane_device.device_facts).
    device_facts: list[dict[str, Any]] = field(default_factory=list)
    # Host events that launch device work (xplane_links): (run_id, start_ps) of every event
    # with a `run_id`, (correlation_id, start_ps) of every one with a `correlation_id`.
    runs: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    launches: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    idle_devices: list[str] = field(default_factory=list)  # device planes with no event
    # TPU planes' program runs (the "XLA Modules" line): (device, start_ps of each run).
    modules: list[tuple[str, np.ndarray]] = field(default_factory=list)


def parse_op_name(name: str) -> tuple[int, str, str]:
    """(kind, node, type) of a host event's name, as xprof's ParseTfOpFullname."""
    if name in STEP_MARKERS:
        return _MARKER, name, ""
    if name in _MEMORY_EVENTS:
        return _MEMORY, name, ""
    if name.startswith(EAGER):
        op_type = name[len(EAGER):]
        # A tf.function called eagerly (`__inference_f_12`) is no op: its ops are counted
        # where they ran; its event is the caller's wait for them.
        if _TF_TYPE.match(op_type) and not op_type.startswith("__"):
            return _TF_OP, f"{EAGER_SCOPE}/{op_type}", op_type
        return _OTHER, name, ""
    if name.startswith("Iterator::"):
        # tf.data stages: '::' becomes '/', so the scope view nests a pipeline's stages.
        return _DATASET, name.replace("::", "/"), "Dataset"
    node, sep, op_type = name.partition(":")
    if sep and _TF_TYPE.match(op_type) and _TF_NAME.match(node):
        return _TF_OP, node, op_type
    return _OTHER, name, ""


def _value(stat: Any, names: dict[int, str]) -> Any:
    kind = stat.WhichOneof("value")
    if kind == "ref_value":
        return names.get(stat.ref_value, "")
    return getattr(stat, kind) if kind else None


def _stat_of(line: Line | Lines, i: int, stat_id: int, names: dict[int, str]) -> Any:
    """The value of stat `stat_id` of event i, whatever its type (protobuf)."""
    for s in line.event(int(i)).stats:
        if s.metadata_id == stat_id:
            return _value(s, names)
    return None


def texts(plane: Plane, line: Line | Lines, stat_id: int | None, index: np.ndarray
          ) -> tuple[np.ndarray, list[str]]:
    """The text value of stat `stat_id` of the events at `index`, as (code per event, the
    distinct texts): refs name a stat metadata, strings are read once per distinct value
    (by its hash) with protobuf; "" where the event has none."""
    if stat_id is None or not len(index):
        return np.zeros(len(index), np.int64), [""]
    value, hashed = line.stats[stat_id][index], line.hashes[stat_id][index]
    # One int64 key: a string's hash (> 0), a ref as -ref - 1 (< 0), ABSENT as itself.
    key = np.where(value == OTHER, hashed, np.where(value == ABSENT, value, -value - 1))
    uniq, inverse = factorize(key)
    first = np.zeros(len(uniq), np.int64)
    first[inverse[::-1]] = index[::-1]
    out = []
    for k, i in zip(uniq.tolist(), first.tolist(), strict=True):
        if k > 0:
            out.append(str(_stat_of(line, i, stat_id, plane.stat_names) or ""))
        else:
            out.append("" if k == ABSENT else plane.stat_names.get(-k - 1, ""))
    return inverse, out


def _wanted(plane: Plane, *names: str) -> tuple[int, ...]:
    return tuple(plane.stat_ids[n] for n in names if n in plane.stat_ids)


def _groups(line: Line | Lines, group_stat: int | None, index: np.ndarray) -> np.ndarray:
    if group_stat is None:
        return np.full(len(index), -1, np.int64)
    g = line.stats[group_stat][index]
    return np.where((g == ABSENT) | (g == OTHER), -1, g)


def host_batches(plane: Plane, kinds: dict[int, tuple[int, str, str]] | None = None
                 ) -> tuple[tuple[int, ...], set[int] | None]:
    """What `_read_host` decodes of a host plane: the stats it reads, and the events it
    keeps (None: all). Only op, marker and memory events are read (JAX thunks are "other"
    events with an hlo_op stat, launches carry a run_id or correlation_id: then all)."""
    if kinds is None:
        kinds = {mid: parse_op_name(m.name) for mid, m in plane.meta.event_metadata.items()}
    wanted = _wanted(plane, "hlo_op", "program_id", "group_id", "step_num",
                     "allocation_bytes", "requested_bytes", "allocator_name", "name",
                     *xplane_links.HOST_STATS)
    every = plane.stat_ids.get("hlo_op") is not None or xplane_links.launches_on(plane)
    return wanted, None if every else {i for i, k in kinds.items() if k[0] != _OTHER}


def _read_host(plane: Plane, ops: Ops, extra: Extra, hlo: dict[tuple[int, str], HloOp],
               jobs: int) -> None:
    kinds = {mid: parse_op_name(m.name) for mid, m in plane.meta.event_metadata.items()}
    ids = np.array(sorted(kinds), dtype=np.int64)
    codes = np.array([kinds[i][0] for i in ids], dtype=np.int64)
    node_of = np.array([ops.name_id(*kinds[i][1:]) if kinds[i][0] in (_TF_OP, _DATASET)
                        else -1 for i in ids], dtype=np.int64)
    get = plane.stat_ids.get
    hlo_stat, program_stat = get("hlo_op"), get("program_id")
    group_stat, step_stat = get("group_id"), get("step_num")
    lane = ops.lane_id(HOST_LANE)
    signs = np.array([_MEMORY_EVENTS.get(plane.meta.event_metadata[i].name, 0)
                      for i in ids], dtype=np.int64)
    wanted, keep = host_batches(plane, kinds)
    waits = rendezvous_ids(plane)
    # Lines in batches (xplane_wire.Lines: their events as one set of columns); an
    # event's thread is its line's number in the plane.
    for line in plane.batches(wanted, jobs, keep):
        if not len(line.mid):
            continue
        thread, start_ps = line.first + line.line_of, line.start_ps
        xplane_links.collect(plane, line, extra)
        code = lookup(ids, codes, line.mid, _OTHER)
        node = lookup(ids, node_of, line.mid, -1)
        if hlo_stat is not None:  # JAX/XLA thunks: named by their HLO instruction
            inst = line.stats[hlo_stat]
            thunk = np.flatnonzero((code == _OTHER) & (inst != ABSENT))
            if len(thunk):
                extra.hlo = True
                program = (line.stats[program_stat][thunk] if program_stat is not None
                           else np.zeros(len(thunk), np.int64))
                which, instructions = texts(plane, line, hlo_stat, thunk)
                first, inverse = distinct_rows(which, program)
                named = []
                for w, prog in zip(which[first].tolist(), program[first].tolist(),
                                   strict=True):
                    text = instructions[w]
                    op = hlo.get((int(prog), text))
                    named.append(op_node(ops, op) if op else ops.name_id(text, "hlo"))
                node[thunk] = np.array(named, np.int64)[inverse]
            wait = np.flatnonzero(np.isin(line.mid, waits))  # Rendezvous: peers' wait
            if len(wait):
                node[wait] = wait_nodes(ops, *texts(plane, line, get("name"), wait))
        index = np.flatnonzero(node >= 0)
        if len(index):
            start, dur, threads = start_ps[index], line.dur[index], thread[index]
            # XLA CPU replicas: each thunk on its device's lane (`device_ordinal`).
            lanes = xplane_links.replica_lanes(plane, line, index, ops, lane)
            ops.add(lanes, threads, start, dur, self_times(start, dur, threads), node[index],
                    _groups(line, group_stat, index),
                    run=xplane_links.int_stat(plane, line, "run_id", index))
            for ln, t in set(zip(lanes.tolist(), threads.tolist(), strict=True)):
                ops.threads[(ops.lanes[ln], t)] = line.names[t - line.first]
        for m in np.flatnonzero(code == _MARKER).tolist():
            step = line.stats[step_stat][m] if step_stat is not None else ABSENT
            if step not in (ABSENT, OTHER):
                begin = int(start_ps[m])
                extra.markers.append((begin, begin + int(line.dur[m]), int(step)))
        memory = np.flatnonzero(code == _MEMORY)
        if len(memory):
            sign = lookup(ids, signs, line.mid[memory], 0)
            size = np.zeros(len(memory), np.int64)
            for stat in (get("requested_bytes"), get("allocation_bytes")):
                if stat is not None:
                    v = line.stats[stat][memory]
                    size = np.where((v != ABSENT) & (v != OTHER) & (v != 0), v, size)
            which, allocators = texts(plane, line, get("allocator_name"), memory)
            extra.memory.append((start_ps[memory],
                                 np.array(allocators, dtype=object)[which], sign * size))


def _launcher(level0: str, tf_op: str, annotation: str) -> str:
    """The TF op (`node:Type`) that launched a device event: its `level 0` (or `tf_op`)
    stat, else the outermost op of its annotation."""
    if level0 or tf_op:
        return (level0 or tf_op).split("#")[0]
    return annotation.split("::")[0].split("#")[0]


def assign_steps(start_ps: np.ndarray, group: np.ndarray,
                 markers: list[tuple[int, int, int]]) -> np.ndarray:
    """group_id where set; else the step of the last marker started at or before the
    event (the first marker's before any); else 0."""
    return np.where(group >= 0, group, _by_time(start_ps, [(m[0], m[2]) for m in markers]))


def _by_time(start_ps: np.ndarray, starts: list[tuple[int, int]]) -> np.ndarray:
    """The step of the last (start, step) begun at or before each time (the first's
    before any); 0 with none."""
    if not starts:
        return np.zeros(len(start_ps), np.int64)
    m = sorted(starts)
    at = np.searchsorted(np.array([x[0] for x in m], np.int64), start_ps, side="right") - 1
    return np.array([x[1] for x in m], np.int64)[np.clip(at, 0, len(m) - 1)]


def steps_and_spans(start_ps: np.ndarray, dur_ps: np.ndarray, group: np.ndarray,
                    on_device: np.ndarray, lane: np.ndarray,
                    markers: list[tuple[int, int, int]],
                    launched: np.ndarray | None = None
                    ) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """Each execution's step, and the (step, start_ps, end_ps) span of every step, as
    xprof's step db has them (docs/xplane.md):
    - group_ids on device events (a GPU profile the plugin preprocessed): the steps are
      the groups that ran device work; a step's span is its device events' span on the
      device where that is longest. Host work of other groups (the profiler groups every
      traced function call, not only steps) goes to the step begun last before it.
    - else, with `train` markers: the markers' steps (step_num), each execution in the
      step begun last before its launch (`launched`, xplane_links), else before its own
      start; a step's span is its marker's. Host-only group_ids
      (xprof's grouping of a CPU profile, as in the trace viewer's JSON of it) do not
      change that: xprof's step db counts the markers' steps there too.
    - group_ids on the host only and no markers: the groups, spanned by their executions
      (no span given).
    """
    device_groups = np.unique(group[on_device & (group >= 0)])
    if len(device_groups):
        steps = np.isin(group, device_groups)
        first = [(int(start_ps[steps & (group == g)].min()), int(g)) for g in device_groups]
        step = np.where(steps, group, _by_time(start_ps, first))
        spans = []
        for g in device_groups.tolist():
            best = (0, 0, 0)
            for ln in np.unique(lane[on_device & (group == g)]).tolist():
                sel = on_device & (group == g) & (lane == ln)
                b, e = int(start_ps[sel].min()), int((start_ps[sel] + dur_ps[sel]).max())
                if e - b > best[2] - best[1]:
                    best = (g, b, e)
            spans.append(best)
        return step, spans
    if not markers:
        return assign_steps(start_ps, group, markers), []
    at = start_ps if launched is None else np.where(launched >= 0, launched, start_ps)
    step = _by_time(at, [(m[0], m[2]) for m in markers])
    span: dict[int, tuple[int, int]] = {}
    for b, e, n in markers:
        lo, hi = span.get(n, (b, e))
        span[n] = (min(lo, b), max(hi, e))
    return step, [(n, b, e) for n, (b, e) in sorted(span.items())]


def _cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


def _steps(ops: Ops, extra: Extra, start: np.ndarray, on_device: np.ndarray,
           lane: np.ndarray, launched: np.ndarray
           ) -> tuple[np.ndarray, list[tuple[int, int, int]], str]:
    """steps_and_spans, with the kind of the spans ("device", "marker"); markers that
    cover only the dispatch are rebound to their work (xplane_async, said in a warning)."""
    dur, group = _cat(ops.dur_ps, np.int64), _cat(ops.group, np.int64)
    step, spans = steps_and_spans(start, dur, group, on_device, lane, extra.markers,
                                  launched)
    if np.any(on_device & (group >= 0)):
        return step, spans, "device"
    rebound = xplane_async.rebind(extra.markers, start, dur, _cat(ops.run, np.int64), step,
                                  launched >= 0)
    if rebound is None:
        return step, spans, "marker"
    extra.warnings.append(rebound.note)
    return rebound.step, rebound.spans, rebound.kind


def frames_of(ops: Ops, extra: Extra, worker: str) -> dict[str, pl.DataFrame]:
    """Executions + keys, allocations and threads; the others empty."""
    start = _cat(ops.start_ps, np.int64)
    column = _cat
    lane = column(ops.lane, np.int64)
    # Device planes' lanes (GPU/TPU): XLA CPU replicas' lanes are host lanes.
    on_device = np.array([not ln.startswith("/device:CPU:") for ln in ops.lanes]
                         or [False])[lane]
    dur, group = column(ops.dur_ps, np.int64), column(ops.group, np.int64)
    launched = xplane_links.launch_times(column(ops.run, np.int64),
                                         column(ops.corr, np.int64), on_device, extra)
    step, spans, span_kind = _steps(ops, extra, start, on_device, lane, launched)
    # One key per (lane, name).
    n_names = max(len(ops.names), 1)
    uniq, key_id = factorize(lane * n_names + column(ops.name, np.int64))
    key_lane, key_name = uniq // n_names, uniq % n_names
    nodes = [ops.names[int(i)] for i in key_name]
    keys = pl.DataFrame({
        "worker": pl.Series([worker] * len(uniq), dtype=pl.String),
        "lane": pl.Series([ops.lanes[int(i)] for i in key_lane], dtype=pl.String),
        "node_name": pl.Series([n for n, _ in nodes], dtype=pl.String),
        "timeline_label": pl.Series([f"{n.split(':')[0]} = {t}()" for n, t in nodes],
                                    dtype=pl.String),
    })
    n = len(step)
    # Executions in time order (file order among equal starts); exec_idx numbers them, so
    # (step, exec_idx) names each one. Not in file order: an XSpace's lines are threads
    # that ran at once, in no meaningful order, and what is derived from "the first
    # execution" (a node's op type when one name ran as two ops) must not depend on it
    # (the trace viewer's JSON of the same XSpace lists its lines in another order).
    order = np.argsort(start, kind="stable")
    exec_idx = np.empty(n, np.int64)
    exec_idx[order] = np.arange(n)
    start_ns = start // 1000
    own_ns, dur_ns = column(ops.self_ps, np.int64) // 1000, column(ops.dur_ps, np.int64) // 1000
    thread = column(ops.thread, np.int64)
    zero = pl.lit(0, pl.Int64)
    executions = pl.DataFrame({
        "step": step, "exec_idx": exec_idx.astype(np.uint32),
        "key_id": key_id.astype(np.uint32), "all_start_us": start_ns // 1000,
        "op_end_rel_us": own_ns // 1000, "all_end_rel_us": dur_ns // 1000,
        "start_ns": start_ns, "op_end_rel_ns": own_ns, "all_end_rel_ns": dur_ns,
        "thread_id": thread.astype(np.uint32),
    }).with_columns(zero.alias(c) for c in schema.NODE_SCHEMA if c not in (
        "step", "exec_idx", "key_id", "all_start_us", "op_end_rel_us", "all_end_rel_us",
        "start_ns", "op_end_rel_ns", "all_end_rel_ns", "thread_id",
    )).select(list(schema.NODE_SCHEMA))[order]
    threads = _threads(ops, step, lane, thread)
    device_steps = xplane_devsteps.of_events(
        ops, extra, lane, step, start, dur, group, on_device, launched,
        lambda t: assign_steps(t, np.full(len(t), -1, np.int64), extra.markers))
    mem = extra.memory
    alloc_t = _cat([m[0] for m in mem], np.int64)
    allocations = pl.DataFrame({
        "step": assign_steps(alloc_t, np.full(len(alloc_t), -1, np.int64), extra.markers),
        "exec_idx": np.zeros(len(alloc_t), np.int64),
        "allocator_name": pl.Series(np.concatenate([m[1] for m in mem]) if mem else [],
                                    dtype=pl.String),
        "alloc_us": alloc_t // 1_000_000,
        "alloc_bytes": _cat([m[2] for m in mem], np.int64),
    }).cast(schema.ALLOCATION_SCHEMA)  # type: ignore[arg-type]
    return {"executions": executions, "keys": keys, "threads": threads,
            "allocations": allocations,
            "step_spans": step_spans(spans, span_kind, device_steps),
            "device_steps": device_steps,
            "attribution": attribution(extra.attribution),
            "timing": pl.DataFrame({"rules": ["xprof"]}, schema=schema.TIMING_SCHEMA)}


def _threads(ops: Ops, step: np.ndarray, lane: np.ndarray, thread: np.ndarray
             ) -> pl.DataFrame:
    """Each (step, lane, thread) that ran an op, with its line's name."""
    n = len(step)
    steps, step_no = factorize(step)
    threads_u, thread_no = factorize(thread)
    n_lanes, n_threads = max(len(ops.lanes), 1), max(len(threads_u), 1)
    present, _ = factorize((step_no * n_lanes + lane) * n_threads + thread_no)
    t_step = steps[present // (n_lanes * n_threads)] if n else present
    t_lane = (present // n_threads) % n_lanes
    t_thread = threads_u[present % n_threads] if n else present
    names = ops.threads
    return pl.DataFrame({
        "step": t_step.astype(np.int64),
        "lane": pl.Series([ops.lanes[int(i)] for i in t_lane], dtype=pl.String),
        "thread_id": t_thread.astype(np.uint32),
        "name": pl.Series([names.get((ops.lanes[int(a)], int(b))) for a, b in
                           zip(t_lane, t_thread, strict=True)], dtype=pl.String),
    }, schema=schema.THREAD_SCHEMA)
