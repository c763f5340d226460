"""TensorBoard profile plugin traces: `<host>.trace.json.gz` (or `.trace.json`), the
trace viewer's JSON that xprof / the profile plugin makes from an XSpace; what older
profile runs hold beside or instead of a `.xplane.pb`, and what users download from the
trace viewer.

The JSON is the XSpace drawn as a Chrome trace (xprof's trace viewer conversion): one
process per plane (`/host:CPU`, `/device:GPU:0`, ...), one thread per line, one "X"
event per XEvent with ts/dur in microseconds (nanoseconds in the decimals), the event's
display name as `name`, its metadata name as `args.long_name` where they differ, and its
stats as string args. It is turned back into XPlanes (metadata name, ps times, stats
typed back: digit strings are integers) and read by the xplane source's reader, so the
mapping of docs/xplane.md holds. Step markers are drawn as "<name> <step_num>"; the
name is restored. Not in these files: the `/host:metadata` plane (JAX's HLO protos), the
allocator events (drawn as counters, not read), and whatever the trace viewer left out
of a large profile.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from pathlib import Path
from typing import Any

from .. import readfile
from ..errors import InputFileError, RunDirError
from ..proto import xplane_pb2
from . import Part, Progress, Selection, SourceFrames, jsonfile
from .xplane import SUFFIX as XPLANE_SUFFIX
from .xplane import profile_runs, read_file
from .xplane_wire import Plane

SUFFIXES = (".trace.json.gz", ".trace.json")
# The first process of the trace viewer's JSON is a plane: "/host:CPU", "/device:GPU:0".
_HEAD = re.compile(rb'"name"\s*:\s*"/(host|device):')
_INT64 = range(-(2**63), 2**63)
_UINT64 = range(2**64)
_MAX_PS = 2**61  # ts and dur in picoseconds, at most: their sums fit int64


def _trace_files(folder: Path) -> list[Path]:
    return readfile.scan(folder, lambda name: name.endswith(SUFFIXES))[0]


def _head(path: Path) -> bytes:
    if not readfile.regular(path):  # a FIFO would block the open
        return b""
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                return f.read(4096)
        with path.open("rb") as f:
            return f.read(4096)
    except (OSError, EOFError, zlib.error):  # a damaged gzip: not ours, as far as we see
        return b""


def trace_files(path: Path) -> list[Path]:
    """The trace viewer files `path` stands for: the file, a profile run folder's (when
    it has no .xplane.pb: then the xplane source reads it), or a TensorBoard logdir's
    newest profile run's; empty when it is none of these."""
    if path.is_file():
        named = path.name.endswith(SUFFIXES) or path.name in ("trace.json", "trace.json.gz")
        return [path] if named and _HEAD.search(_head(path)) else []
    if not path.is_dir() or any(path.glob(f"*{XPLANE_SUFFIX}")):
        return []
    direct = _trace_files(path)
    if direct:
        return direct
    try:
        runs = profile_runs(path, ".trace.json.gz")
    except RunDirError:  # several runs with profiles: the xplane source says so
        return []
    if not runs or any(runs[-1].glob(f"*{XPLANE_SUFFIX}")):
        return []
    return _trace_files(runs[-1])


def _worker(path: Path) -> str:
    name = readfile.shown(path.name)
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return readfile.shown(path.stem)


def load(path: Path) -> list[dict[str, Any]]:
    """The trace events; InputFileError naming the file when it is not such a trace."""
    data = jsonfile.load(path, "a trace viewer JSON")
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list):
        raise InputFileError(f"{readfile.shown(path)}: not a trace viewer JSON (no "
                             "traceEvents list)")
    return events


def _ps(value: Any, field: str) -> int:
    """Microseconds (the trace viewer's ts, dur) as integer picoseconds, within the range
    whose sums fit int64; ValueError naming `field` otherwise."""
    us = float(value)
    if not math.isfinite(us) or abs(us) * 1e6 > _MAX_PS:
        raise ValueError(f"{field} {value!r:.40} is out of range (|{field}| <= "
                         f"{_MAX_PS / 1e6:.4g} us)")
    return round(us * 1e6)


def _tid(value: Any) -> int:
    """A thread id as a line id (int64); ValueError naming it otherwise."""
    tid = int(value)
    if tid not in _INT64:
        raise ValueError(f"tid {value!r:.40} is out of range (int64)")
    return tid


def _set_value(stat: Any, value: Any) -> None:
    """The stat's value typed back: the trace viewer writes every stat as a string."""
    if isinstance(value, str) and value.lstrip("-").isdigit():
        number = int(value)
        if number in _INT64:
            stat.int64_value = number
            return
        if number in _UINT64:
            stat.uint64_value = number
            return
    if isinstance(value, int) and not isinstance(value, bool) and value in _INT64:
        stat.int64_value = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        stat.double_value = float(value)
    else:
        stat.str_value = value if isinstance(value, str) else json.dumps(value)


def xspace(events: list[dict[str, Any]]) -> xplane_pb2.XSpace:
    """The XPlanes the trace was drawn from (as far as it shows them)."""
    space = xplane_pb2.XSpace()
    planes: dict[Any, Any] = {}
    lines: dict[tuple[Any, Any], Any] = {}
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "process_name":
            plane = space.planes.add(id=len(space.planes), name=str(e["args"]["name"]))
            planes[e.get("pid")] = (plane, {}, {})
    for e in events:
        if (isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "thread_name"
                and e.get("pid") in planes):
            line = planes[e["pid"]][0].lines.add(id=_tid(e["tid"]),
                                                 name=str(e["args"]["name"]))
            lines[(e["pid"], e["tid"])] = line
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X" or e.get("pid") not in planes:
            continue
        plane, event_ids, stat_ids = planes[e["pid"]]
        line = lines.get((e["pid"], e["tid"]))
        if line is None:
            line = plane.lines.add(id=_tid(e["tid"]), name=str(e["tid"]))
            lines[(e["pid"], e["tid"])] = line
        args = e.get("args") or {}
        name = str(args.get("long_name", e["name"]))
        step = args.get("step_num")
        if step is not None and name.endswith(f" {step}"):  # a step marker, drawn numbered
            name = name[: -len(f" {step}")]
        mid = event_ids.get(name)
        if mid is None:
            mid = event_ids[name] = len(event_ids) + 1
            plane.event_metadata[mid].CopyFrom(xplane_pb2.XEventMetadata(
                id=mid, name=name, display_name=str(e["name"])))
        event = line.events.add(metadata_id=mid, offset_ps=_ps(e["ts"], "ts"),
                                duration_ps=_ps(e.get("dur", 0), "dur"))
        for key, value in args.items():
            if key == "long_name":
                continue
            sid = stat_ids.get(key)
            if sid is None:
                sid = stat_ids[key] = len(stat_ids) + 1
                plane.stat_metadata[sid].CopyFrom(xplane_pb2.XStatMetadata(id=sid, name=key))
            _set_value(event.stats.add(metadata_id=sid), value)
    return space


class TraceJsonSource:
    kind = "tracejson"
    files = "*.trace.json.gz"  # what the not-a-profile error names
    description = ("TensorBoard profile plugin traces (<host>.trace.json.gz, the trace "
                   "viewer's JSON of a TF2 profile), a profile run folder of them, or a "
                   "logdir whose newest profile run has no .xplane.pb")

    def accepts(self, path: Path) -> bool:
        try:
            return bool(trace_files(path))
        except OSError:
            return False

    def parts(self, path: Path, chosen: Selection) -> list[Part]:
        if chosen.profile_run is not None:
            raise RunDirError(f"{path}: --profile-run reads .xplane.pb profile runs; point "
                              "at the run folder of the trace files instead")
        files = trace_files(path) or ([path] if path.exists() and not path.is_dir() else [])
        if not files:
            raise RunDirError(f"{readfile.shown(path)}: no *.trace.json.gz file (not a "
                              "profile plugin trace)")
        problems = (readfile.scan(files[0].parent, lambda n: n.endswith(SUFFIXES))[1]
                    if path.is_dir() else [])  # FIFOs, devices named like one: skipped
        return [Part(kind=self.kind, path=f, worker=_worker(f), files=(str(f),),
                     detail=tuple(files), warnings=tuple(problems) if i == 0 else ())
                for i, f in enumerate(files)]

    def read(self, part: Part, jobs: int, progress: Progress | None) -> SourceFrames:
        try:
            space = xspace(load(part.path))
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError,
                RecursionError) as e:
            first = " ".join(str(e).split())[:200]
            raise InputFileError(f"{readfile.shown(part.path)}: not a trace viewer JSON "
                                 f"(bad event: {type(e).__name__}: {first})") from None
        planes = [Plane(p, list(p.lines)) for p in space.planes]
        if not planes:
            raise InputFileError(f"{readfile.shown(part.path)}: a trace with no processes "
                                 "(not a profile?)")
        result = read_file(part.path, part.worker, jobs=jobs, planes=planes)
        result.lacks.setdefault("allocations",
                                "the trace viewer draws allocator events as counters")
        if result.lacks.get("graph", "").startswith("JAX"):  # XLA thunks, no HLO module
            result.warnings.append(
                f"{readfile.shown(part.path)}: a JAX/XLA trace: the trace viewer's JSON holds "
                "no HLO module, so XLA ops have no op types or scopes here (read the .xplane.pb)")
        if progress:
            progress(1, 1)
        return result


SOURCE = TraceJsonSource()
