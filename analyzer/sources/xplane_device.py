"""Device planes of an XSpace (`/device:GPU:N`, `/device:TPU:N`) -> op executions.

GPU: every event of a `Stream #N(...)` line (kernels, memsets, memcpys). An event of an
XLA program is named by the framework op of its HLO instruction (xla_attribution:
`op_name:kernel`, the op's type); else, launched by a TF op (`level 0`/`tf_op`
annotation), `node:kernel` with that op's type; else `unattributed:kernel`.
TPU: the `XLA Ops` line, each op named by its HLO instruction's framework op (the `tf_op`
stat of its metadata, or the module's HLO) as `op_name:instruction`, self time as xprof.
How each event was placed, and the device time of each way, goes to `Extra.attribution`.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .hlo_work import add_per_op
from .xla_attribution import HOW, NONE, Events, attribute
from .xplane_arrays import distinct_rows, lookup, self_times
from .xplane_collectives import op_node
from .xplane_hlo import HloOp, Programs
from .xplane_read import _groups, _launcher, _wanted, parse_op_name, texts
from .xplane_wire import ABSENT, OTHER, Plane

_STREAM_LINE = re.compile(r"^Stream #(\d+)")
_TPU_OPS = "XLA Ops"
_TPU_MODULES = "XLA Modules"


def _unattributed(kernel: str) -> tuple[str, str]:
    return f"unattributed:{kernel}", kernel.split("(")[0].split("<")[0][-60:]


class _Columns:
    """A device's events gathered over its lines (so that launches on several streams are
    ordered together), with texts numbered plane-wide."""

    def __init__(self) -> None:
        self.parts: dict[str, list[np.ndarray]] = {}
        self.text_ids: dict[str, int] = {"": 0}
        self.lines: list[tuple[int, str, int]] = []  # (thread, line name, events)

    def add(self, **cols: np.ndarray) -> None:
        for k, v in cols.items():
            self.parts.setdefault(k, []).append(v)

    def text_codes(self, codes: np.ndarray, values: list[str]) -> np.ndarray:
        ids = [self.text_ids.setdefault(v, len(self.text_ids)) for v in values]
        return np.array(ids, np.int64)[codes] if len(codes) else codes

    def col(self, name: str) -> np.ndarray:
        got = self.parts.get(name)
        return np.concatenate(got) if got else np.zeros(0, np.int64)

    @property
    def texts(self) -> list[str]:
        return list(self.text_ids)


def _int_stat(line: Any, stat: int | None, n: int) -> np.ndarray:
    if stat is None:
        return np.full(n, -1, np.int64)
    v = line.stats[stat]
    return np.where((v == ABSENT) | (v == OTHER), -1, v)


def gpu_wanted(plane: Plane) -> tuple[int, ...]:
    """The stats `read_gpu` decodes of a GPU plane's events."""
    return _wanted(plane, "level 0", "tf_op", "annotation", "group_id", "hlo_op",
                   "program_id", "correlation_id", "hlo_module")


def read_gpu(plane: Plane, device: str, ops: Any, extra: Any, jobs: int,
             programs: Programs) -> None:
    get = plane.stat_ids.get
    attr = [get("level 0"), get("tf_op"), get("annotation")]
    wanted = gpu_wanted(plane)
    lane_name = f"{device}/stream:all"
    lane = ops.lane_id(lane_name)
    mids = np.array(sorted(plane.meta.event_metadata), np.int64)
    # The last name stands for an event whose metadata the plane lacks.
    kernels = [plane.meta.event_metadata[int(i)].name for i in mids] + [""]
    got = _Columns()
    for line in plane.lines(wanted, jobs):
        m = _STREAM_LINE.match(line.name)
        if not m or not len(line.mid):
            continue
        n = len(line.mid)
        index = np.arange(n)
        coded = [texts(plane, line, stat, index) for stat in attr]
        first, inverse = distinct_rows(line.mid, *(which for which, _ in coded))
        tf_named = []
        for i in first.tolist():
            launched = _launcher(*(t[which[i]] for which, t in coded))
            _, node, op_type = parse_op_name(launched) if launched else (0, "", "")
            kernel = plane.meta.event_metadata[int(line.mid[i])].name \
                if int(line.mid[i]) in plane.meta.event_metadata else ""
            tf_named.append(ops.name_id(f"{node}:{kernel}", op_type) if op_type else -1)
        hlo_which, hlo_texts = texts(plane, line, get("hlo_op"), index)
        mod_which, mod_texts = texts(plane, line, get("hlo_module"), index)
        got.add(tf=np.array(tf_named, np.int64)[inverse],
                kernel=lookup(mids, np.arange(len(mids)), line.mid, len(mids)),
                hlo=got.text_codes(hlo_which, hlo_texts),
                module=got.text_codes(mod_which, mod_texts),
                program=_int_stat(line, get("program_id"), n),
                corr=_int_stat(line, get("correlation_id"), n),
                start=line.timestamp_ns * 1000 + line.off, dur=line.dur,
                group=_groups(line, get("group_id"), index))
        got.lines.append((int(m.group(1)), line.name, n))
    if not got.lines:  # a device that ran nothing in the profile: shown, with no work
        extra.idle_devices.append(device)
        return
    extra.device_facts.append(device_facts(plane.meta, device))
    name, how, by_hlo = _names(got, kernels, programs, ops, extra)
    extra.hlo = extra.hlo or by_hlo  # the HLO gives op types and code
    _add_lines(got, name, lane, lane_name, ops, nested=None)  # kernels nest nothing
    dur = got.col("dur")
    for h, label in enumerate(HOW):
        extra.attribution.append((device, label, int(dur[how == h].sum())))


# A GPU plane's stats (xprof's DeviceCapabilities) -> the device_facts frame's columns.
_FACTS = {"gpu_device_name": "name", "clock_rate": "clock_khz", "core_count": "cores",
          "memory_bandwidth": "memory_bandwidth", "compute_cap_major": "compute_cap_major",
          "compute_cap_minor": "compute_cap_minor"}


def device_facts(meta: Any, device: str) -> dict[str, Any]:
    """What a GPU plane says of its device (schema.DEVICE_SCHEMA): name, clock (kHz),
    SMs, memory bandwidth (bytes/s), compute capability; None where it says nothing."""
    names = {k: v.name for k, v in meta.stat_metadata.items()}
    out: dict[str, Any] = dict.fromkeys(_FACTS.values())
    out["device"] = device
    for stat in meta.stats:
        column = _FACTS.get(names.get(stat.metadata_id, ""))
        if column is None:
            continue
        kind = stat.WhichOneof("value")
        value = getattr(stat, kind) if kind else None
        out[column] = value if column == "name" or value is None else (
            float(value) if column == "memory_bandwidth" else int(value))
    return out


def _names(got: _Columns, kernels: list[str], programs: Programs, ops: Any, extra: Any
           ) -> tuple[np.ndarray, np.ndarray, bool]:
    """(name id per event, how it was placed, whether the HLO placed any): the HLO op
    where xla_attribution places it, else the launching TF op, else unattributed. The
    work of the placed events' instructions goes to `extra.hlo_work` (hlo_work)."""
    text = got.texts
    program = got.col("program")
    module = got.col("module")
    by_name = np.array([programs.by_name.get(t, -1) for t in text], np.int64)
    program = np.where(program >= 0, program, by_name[module])
    kernel = got.col("kernel")
    events = Events(kernel=kernel, kernels=kernels,
                    hlo_op=got.col("hlo"), hlo_ops=text, program=program,
                    corr=got.col("corr"), start=got.col("start"))
    target, how, targets = attribute(events, programs.modules)
    tf = got.col("tf")
    name = tf.copy()
    placed = np.flatnonzero(target >= 0)
    if len(placed):
        first, inverse = distinct_rows(target[placed], kernel[placed])
        ids = []
        for i in first.tolist():
            op: HloOp = programs.ops[targets[int(target[placed[i]])]]
            k = kernels[int(kernel[placed[i]])]
            ids.append(op_node(ops, op, f":{k}"))  # a collective: shared (its scopes)
        name[placed] = np.array(ids, np.int64)[inverse]
        counts = np.bincount(target[placed], minlength=len(targets)).tolist()
        add_per_op(extra.hlo_work, counts, targets,
                   [programs.ops[t].op_name for t in targets], programs.work)
    rest = np.flatnonzero(name < 0)
    if len(rest):
        first, inverse = distinct_rows(kernel[rest])
        ids = [ops.name_id(*_unattributed(kernels[int(kernel[rest[i]])]))
               for i in first.tolist()]
        name[rest] = np.array(ids, np.int64)[inverse]
    # An event a TF op launched counts as placed by its annotation ("hlo_op" row).
    how = np.where((how == NONE) & (tf >= 0), 0, how)
    return name, how, bool(len(placed))


def _add_lines(got: _Columns, name: np.ndarray, lane: int,
               lane_name: str, ops: Any, nested: np.ndarray | None) -> None:
    start, dur, group = got.col("start"), got.col("dur"), got.col("group")
    own_all = dur if nested is None else np.maximum(dur - nested, 0)
    # The host launch of each event (xplane_links), by its correlation id.
    corr = got.col("corr") if "corr" in got.parts else np.full(len(start), -1, np.int64)
    corr = np.where(corr < 0, ABSENT, corr)
    at = 0
    for thread, line_name, n in got.lines:
        s, d, own = start[at: at + n], dur[at: at + n], own_all[at: at + n]
        ops.add(lane, thread, s, d, own, name[at: at + n], group[at: at + n],
                corr=corr[at: at + n])
        ops.threads[(lane_name, thread)] = line_name
        at += n


def read_tpu(plane: Plane, device: str, ops: Any, extra: Any, jobs: int,
             programs: Programs) -> None:
    """The `XLA Ops` line: one op per event, named by its metadata (display name = HLO
    instruction, `tf_op` stat = framework op, `program_id`); its time the event's
    `device_duration_ps` where it has one (what xprof's op stats count), else its
    duration; self time as xprof counts."""
    meta = plane.meta
    names = {k: v.name for k, v in meta.stat_metadata.items()}
    lane_name = f"{device}/stream:all"
    lane = ops.lane_id(lane_name)
    got = _Columns()
    named: dict[int, int] = {}
    device_dur = plane.stat_ids.get("device_duration_ps")
    for line in plane.lines(_wanted(plane, "group_id", "device_duration_ps"), jobs):
        if line.name == _TPU_MODULES and len(line.mid):  # one event per program run
            extra.modules.append((device, line.timestamp_ns * 1000 + line.off))
        if line.name != _TPU_OPS or not len(line.mid):
            continue
        n = len(line.mid)
        measured = _int_stat(line, device_dur, n)
        ids = []
        for mid in np.unique(line.mid).tolist():
            if mid not in named:
                named[mid] = _tpu_name(meta.event_metadata.get(mid), names, programs, ops)
            ids.append(named[mid])
        uniq = np.unique(line.mid)
        got.add(name=np.array(ids, np.int64)[np.searchsorted(uniq, line.mid)],
                start=line.timestamp_ns * 1000 + line.off,
                dur=np.where(measured >= 0, measured, line.dur),
                # nesting as the line draws it; the measured time less the nested ops'
                nested=line.dur - self_times(line.off, line.dur),
                group=_groups(line, plane.stat_ids.get("group_id"), np.arange(n)))
        got.lines.append((len(got.lines), line.name, n))
    if not got.lines:  # a device that ran nothing in the profile: shown, with no work
        extra.idle_devices.append(device)
        return
    name = got.col("name")
    _add_lines(got, name, lane, lane_name, ops, nested=got.col("nested"))
    distinct = np.unique(name)
    none = np.array([ops.names[int(i)][0].startswith("unattributed:") for i in distinct],
                    bool)
    unplaced = np.isin(name, distinct[none])
    dur = got.col("dur")
    extra.attribution.append((device, HOW[0], int(dur[~unplaced].sum())))
    extra.attribution.append((device, HOW[-1], int(dur[unplaced].sum())))


def _tpu_name(meta: Any, names: dict[int, str], programs: Programs, ops: Any) -> int:
    if meta is None:
        return ops.name_id(*_unattributed(""))
    inst = meta.display_name or meta.name.split(" ")[0].lstrip("%")
    stats = {names.get(s.metadata_id): s for s in meta.stats}
    program = stats["program_id"].uint64_value or stats["program_id"].int64_value \
        if "program_id" in stats else 0
    op = programs.ops.get((program, inst))
    if op is not None:
        return op_node(ops, op, f":{inst}")
    tf_op = stats["tf_op"].str_value if "tf_op" in stats else ""
    category = stats["hlo_category"].str_value if "hlo_category" in stats else ""
    if not tf_op:  # an op of XLA's own (copy-start/done): named by its instruction
        return ops.name_id(f"{inst}:{inst}", category or "hlo")
    op_name = tf_op.removesuffix(":")
    return ops.name_id(f"{op_name}:{inst}", op_name.rsplit("/", 1)[-1] or category)
