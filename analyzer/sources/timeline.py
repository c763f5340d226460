"""tf.timeline Chrome traces: what `tf.train.ProfilerHook` writes (`timeline-<step>.json`),
`Timeline.generate_chrome_trace_format()` saved by hand, and merged traces of several
session.runs in one file.

tf.timeline keeps most of `RunMetadata.step_stats` (tensorflow/python/client/timeline.py,
`Timeline._show_compute`):

- one process per DeviceStepStats, named "<device> Compute", in dev_stats order; its
  "ph": "X" events are that lane's NodeExecStats in order: ts = all_start_micros, dur =
  all_end_rel_micros, tid = the lane tf.timeline assigned, args = {"name", "op",
  "input0", ...} parsed from the timeline label;
- on GPU tracer lanes ("/stream:" or "/memcpy" in the device) tf.timeline split the node
  name "name:op" into args.name and args.op; they are joined back.

Not kept, so never invented (`lacks`): memory, outputs, code traces, the graph. An
execution's op time is the span tf.timeline drew (op_start_rel 0, op_end_rel = dur),
nanoseconds are micros x 1000, and the label is rebuilt as "<name> = <op>(<inputs>)".

Steps: in a folder, one step per file, numbered by the last number in its name (file
order when a name has none); a lone file holds one step (numbered from its name, else 1)
or several session.runs appended into one file, split where the pid goes down (each
run lists its lanes in pid order) when the runs follow each other in time; those are
numbered 1..N. A merged file keeps only the first run's process names, and later runs may
have numbered their lanes differently; their lanes are matched to the first run's by the
node names they ran (`match_lanes`).
"""

from __future__ import annotations

import gzip
import itertools
import zlib
from operator import itemgetter
from pathlib import Path
from typing import Any

import polars as pl

from .. import readfile
from ..errors import InputFileError, RunDirError
from . import Part, Progress, Selection, SourceFrames, jsonfile
from .stepnumbers import by_number, check_step, distinct_steps, number_in

Event = dict[str, Any]
COMPUTE_SUFFIX = " Compute"
_WHY = "not in tf.timeline files"
# args keys in the order tf.timeline writes them, by their number (name, op, input0, ...)
_ARG_KEYS = [["name", "op"][:n] + [f"input{i}" for i in range(n - 2)] for n in range(256)]
LACKS = {"memory": _WHY, "outputs": _WHY, "code": _WHY, "graph": _WHY}
# Microseconds (ts, dur): their sum times 1000 (nanoseconds) fits int64.
_US = 2**52
_MATCHED_LANES = 128  # at most: match_lanes compares every pair of lanes


# ----------------------------------------------------------------------------- reading


def _trace_name(name: str) -> bool:
    name = name.lower()
    return name.endswith(".json") or name.endswith(".json.gz")


def _is_trace_file(path: Path) -> bool:
    return _trace_name(path.name) and readfile.regular(path)


def _head(path: Path, size: int = 4096) -> bytes:
    if not readfile.regular(path):  # a FIFO would block the open
        return b""
    try:
        opener = gzip.open if path.name.lower().endswith(".gz") else open
        with opener(path, "rb") as f:
            return f.read(size)
    except (OSError, EOFError, zlib.error):
        return b""


def _looks_like_timeline(path: Path) -> bool:
    """A Chrome trace whose first processes are tf.timeline's (cheap: the first 4 KiB)."""
    head = _head(path)
    # Process names "<device> Compute" / "Allocators" (not a thread "tf_Compute/..." of a
    # profile plugin trace, which sources/tracejson.py reads).
    return b"traceEvents" in head and (b' Compute"' in head or b'"Allocators"' in head)


def load_events(path: str | Path) -> list[Event]:
    """The trace events of a tf.timeline file; InputFileError naming it when it is not."""
    path = Path(path)
    data = jsonfile.load(path, "a tf.timeline trace")
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise InputFileError(f"{readfile.shown(path)}: not a tf.timeline trace (no "
                             "traceEvents list)")
    return events


def compute_lanes(events: list[Event]) -> dict[int, str]:
    """pid -> device of every "<device> Compute" process, in pid (= dev_stats) order."""
    return lanes_and_ops(events)[0]


def lanes_and_ops(events: list[Event]) -> tuple[dict[int, str], list[Event]]:
    """In one pass: the Compute lanes (compute_lanes) and every "X" event (of any pid)."""
    lanes = {}
    for e in [e for e in events if e.get("ph") == "M"]:
        if e.get("name") == "process_name":
            name = (e.get("args") or {}).get("name", "")
            if isinstance(name, str) and name.endswith(COMPUTE_SUFFIX):
                lanes[e["pid"]] = name[: -len(COMPUTE_SUFFIX)]
    return dict(sorted(lanes.items())), [e for e in events if e.get("ph") == "X"]


def is_gputrace_device(device: str) -> bool:
    """TensorFlow's test for lanes written by the GPU tracer (timeline.py)."""
    return "/stream:" in device or "/memcpy" in device


def split_runs(events: list[Event], lanes: dict[int, str]) -> list[list[Event]]:
    """The Compute "X" events of each session.run, in file order: a run's events come in
    increasing pid order, so a new run starts where the pid goes down. With one lane the
    pid never goes down: there a new run starts where the run's first node (`_SOURCE`, a
    feed) runs again on its lane after every event so far has ended (a while loop's nodes
    repeat, but never a run's first node). When the pieces overlap in time they are not
    runs one after the other: one run, then."""
    runs: list[list[Event]] = []
    last_pid = None
    first: tuple[Any, Any] = (None, None)
    end = 0
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X" or e.get("pid") not in lanes:
            continue
        if (last_pid is None or e["pid"] < last_pid
                or ((e["pid"], e["args"]["name"]) == first and e["ts"] >= end)):
            runs.append([])
            first = (e["pid"], e["args"]["name"])
        runs[-1].append(e)
        last_pid = e["pid"]
        end = max(end, e["ts"] + e["dur"])
    for prev, nxt in itertools.pairwise(runs):
        if min(e["ts"] for e in nxt) <= max(e["ts"] + e["dur"] for e in prev):
            return [[e for run in runs for e in run]]
    return runs


def _name_sets(run: list[Event], pids: list[int]) -> dict[int, set[tuple[str, str]]]:
    sets: dict[int, set[tuple[str, str]]] = {p: set() for p in pids}
    for e in run:
        sets[e["pid"]].add((e["args"]["name"], e["args"]["op"]))
    return sets


def _jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def match_lanes(run: list[Event], reference: list[Event], pids: list[int]) -> dict[int, int]:
    """pid in `run` -> pid of the same device in `reference` (whose metadata the file has).

    Starts from the identity and swaps two lanes' devices while that strictly raises the
    summed Jaccard similarity of (node name, op) sets; identical lanes stay as they are.
    """
    if len(pids) > _MATCHED_LANES:  # no real trace has that many devices: not matched
        return {p: p for p in pids}
    ours, ref = _name_sets(run, pids), _name_sets(reference, pids)
    sim = {(p, q): _jaccard(ours[p], ref[q]) for p in pids for q in pids}
    mapping = {p: p for p in pids}
    while True:
        best, best_gain = None, 1e-9
        for p, q in itertools.combinations(pids, 2):
            gain = (sim[p, mapping[q]] + sim[q, mapping[p]]
                    - sim[p, mapping[p]] - sim[q, mapping[q]])
            if gain > best_gain:
                best, best_gain = (p, q), gain
        if best is None:
            return mapping
        p, q = best
        mapping[p], mapping[q] = mapping[q], mapping[p]


def inputs(args: dict[str, Any]) -> list[str]:
    """args input0, input1, ... in index order (JSON key order is not reliable)."""
    keys = list(args)
    if keys == _ARG_KEYS[len(keys)]:  # as tf.timeline writes them: name, op, input0, ...
        return list(args.values())[2:]
    found = {int(k[5:]): v for k, v in args.items() if k.startswith("input") and k[5:].isdigit()}
    if sorted(found) != list(range(len(found))):
        raise ValueError(f"inputs of {args.get('name')!r} are not numbered 0..n-1")
    return [found[i] for i in range(len(found))]


def node_name(name: str, op: str, device: str) -> str:
    """The NodeExecStats node name tf.timeline split (`name:op` on GPU tracer lanes)."""
    return f"{name}:{op}" if is_gputrace_device(device) and op != "unknown" else name


def label(name: str, op: str, args: dict[str, Any]) -> str:
    return f"{name} = {op}({', '.join(inputs(args))})"


def runs_in_order(events: list[Event], lanes: dict[int, str]
                  ) -> list[tuple[list[Event], dict[int, int]]]:
    """Each session.run's events grouped by lane (pid order, as dev_stats were), with the
    pid -> lane mapping of later runs matched to the first's."""
    runs = split_runs(events, lanes)
    pids = list(lanes)
    out = []
    for i, run in enumerate(runs):
        mapping = {p: p for p in pids} if i == 0 else match_lanes(run, runs[0], pids)
        by_pid: dict[int, list[Event]] = {}
        for e in run:
            by_pid.setdefault(mapping[e["pid"]], []).append(e)
        out.append(([e for pid in sorted(by_pid) for e in by_pid[pid]], mapping))
    return out


# ----------------------------------------------------------------------------- frames

_COLUMNS = ("step", "exec_idx", "lane", "node_name", "timeline_label", "all_start_us",
            "dur_us", "thread_id")


def _label(args: dict[str, Any]) -> str:
    return f"{args['name']} = {args['op']}({', '.join(inputs(args))})"


def _rows(events: list[Event], mapping: dict[int, int], lanes: dict[int, str], step: int,
          cols: dict[str, list]) -> None:
    """Column by column (a comprehension per column costs less than a loop of appends)."""
    devices = {pid: lanes[mapping[pid]] for pid in mapping}
    traced = {pid for pid, d in devices.items() if is_gputrace_device(d)}
    pids = [e["pid"] for e in events]
    args = [e["args"] for e in events]
    names = jsonfile.strings([a["name"] for a in args], "args.name")
    ops = jsonfile.strings([a["op"] for a in args], "args.op")
    keys = _ARG_KEYS
    labels = [f"{a['name']} = {a['op']}({', '.join(list(a.values())[2:])})"
              if len(a) < 256 and list(a) == keys[len(a)] else _label(a) for a in args]
    if traced:
        names = [f"{n}:{o}" if p in traced and o != "unknown" else n
                 for n, o, p in zip(names, ops, pids, strict=True)]
    cols["lane"].extend([devices[p] for p in pids])
    cols["node_name"].extend(names)
    cols["timeline_label"].extend(labels)
    cols["all_start_us"].extend(jsonfile.ints([e["ts"] for e in events], "ts", -_US, _US))
    cols["dur_us"].extend(jsonfile.ints([e["dur"] for e in events], "dur", -_US, _US))
    cols["thread_id"].extend(jsonfile.ints([e["tid"] for e in events], "tid", 0, 2**32 - 1))
    cols["step"].extend([step] * len(events))
    cols["exec_idx"].extend(range(len(events)))


def file_rows(path: Path, first_step: int | None, one_step: bool,
              cols: dict[str, list]) -> int:
    """Append the executions of one file to `cols`; returns the number of steps it held.

    `first_step`: the step its (first) run is; `one_step`: never split it."""
    events = load_events(path)
    name = readfile.shown(path)
    mark = len(cols["step"])
    try:
        lanes, ops = lanes_and_ops(events)
        if not lanes:
            if any(isinstance(e, dict) and e.get("ph") == "M"
                   and (e.get("args") or {}).get("name") == "Allocators" for e in events):
                raise InputFileError(f"{name}: a tf.timeline of a step with no traced ops "
                                     "(no '<device> Compute' process: was the step run "
                                     "with trace_level=FULL_TRACE?)")
            raise InputFileError(f"{name}: not a tf.timeline trace (no '<device> Compute' "
                                 "process)")
        if one_step:  # one session.run: its lanes in pid order, as dev_stats were
            ops = [e for e in ops if e.get("pid") in lanes]
            ops.sort(key=itemgetter("pid"))  # stable: each lane keeps its order
            runs = [(ops, {p: p for p in lanes})]
        else:
            runs = runs_in_order(events, lanes)
        start = first_step if first_step is not None else 1
        for i, (run, mapping) in enumerate(runs):
            _rows(run, mapping, lanes, start + i, cols)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError,
            RecursionError) as e:
        for values in cols.values():
            del values[mark:]
        raise InputFileError(f"{name}: not a tf.timeline trace (bad event: "
                             f"{type(e).__name__}: {_first_line(e)})") from None
    if len(cols["step"]) == mark:
        raise InputFileError(f"{name}: tf.timeline trace without op executions")
    return len(runs)


def _first_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:200]


def nodes_frame(cols: dict[str, list]) -> pl.DataFrame:
    """The executions as a plain `nodes` frame (sources.split_nodes splits it)."""
    f = pl.DataFrame(cols, schema={"step": pl.Int64, "exec_idx": pl.UInt32,
                                   "lane": pl.String, "node_name": pl.String,
                                   "timeline_label": pl.String, "all_start_us": pl.Int64,
                                   "dur_us": pl.Int64, "thread_id": pl.UInt32})
    zero = pl.lit(0, pl.Int64)
    return f.select(
        "step", "exec_idx", "all_start_us",
        op_start_rel_us=zero, op_end_rel_us=pl.col("dur_us"), all_end_rel_us=pl.col("dur_us"),
        scheduled_us=zero, start_ns=pl.col("all_start_us") * 1000, op_start_rel_ns=zero,
        op_end_rel_ns=pl.col("dur_us") * 1000, all_end_rel_ns=pl.col("dur_us") * 1000,
        scheduled_ns=zero, thread_id=pl.col("thread_id"),
        mem_total_bytes=zero, mem_peak_bytes=zero, mem_live_bytes=zero,
        allocator_bytes_in_use=zero, temp_bytes=zero, persistent_bytes=zero,
        output_bytes=zero, lane=pl.col("lane"), node_name=pl.col("node_name"),
        timeline_label=pl.col("timeline_label"))


class TimelineSource:
    kind = "timeline"
    files = "timeline*.json"  # what the not-a-profile error names
    description = ("tf.timeline / ProfilerHook Chrome traces: a timeline-<step>.json file "
                   "(or .json.gz), a folder of them, or several runs merged into one file")

    def accepts(self, path: Path) -> bool:
        if path.is_dir():
            first = next((p for p in sorted(path.iterdir()) if _is_trace_file(p)), None)
            return first is not None and _looks_like_timeline(first)
        return _is_trace_file(path) and _looks_like_timeline(path)

    def parts(self, path: Path, chosen: Selection) -> list[Part]:
        problems: list[str] = []
        if path.is_dir():
            found, problems = readfile.scan(path, _trace_name)
            files = by_number(found)
            if not files:
                raise RunDirError(f"{readfile.shown(path)}: no timeline-*.json file"
                                  + (f" ({problems[0]})" if problems else ""))
        elif path.exists():
            files = [path]  # not a regular file: reading it says so
        else:
            raise RunDirError(f"{readfile.shown(path)}: no such file or directory")
        return [Part(self.kind, path, "worker:0", tuple(str(f) for f in files),
                     warnings=tuple(problems))]

    def read(self, part: Part, jobs: int, progress: Progress | None) -> SourceFrames:
        if part.path.is_dir():
            frame, warnings = _read_folder(part.files, jobs, progress)
        else:
            frame, warnings = _read_lone(Path(part.files[0])), []
        if frame is None:
            raise RunDirError(f"{readfile.shown(part.path)}: no readable tf.timeline file "
                              f"({len(warnings)} skipped; first: "
                              f"{warnings[0] if warnings else 'none'})")
        return SourceFrames({"nodes": frame}, warnings, dict(LACKS))


def _read_lone(path: Path) -> pl.DataFrame:
    """One file: one step (numbered from its name, else 1) or merged runs (1..N)."""
    cols: dict[str, list] = {c: [] for c in _COLUMNS}
    count = file_rows(path, 1, one_step=False, cols=cols)
    named = number_in(path.name)
    if count == 1 and named is not None:  # a lone timeline-<N>.json
        check_step(named, readfile.shown(path))
        cols["step"] = [named] * len(cols["step"])
    return nodes_frame(cols)


def _read_files(items: list[tuple[str, int]]) -> tuple[pl.DataFrame | None, list[str]]:
    """Files of a folder, one step each -> their executions and one warning per file
    skipped."""
    cols: dict[str, list] = {c: [] for c in _COLUMNS}
    warnings = []
    for name, step in items:
        try:
            check_step(step, readfile.shown(name))
            file_rows(Path(name), step, one_step=True, cols=cols)
        except InputFileError as e:
            warnings.append(str(e))
    return (nodes_frame(cols) if cols["step"] else None), warnings


def _read_folder(files: tuple[str, ...], jobs: int, progress: Progress | None
                 ) -> tuple[pl.DataFrame | None, list[str]]:
    """Every file of a folder, one step each, in chunks of 500 (progress per chunk).

    Serial: two processes read 10,000 ProfilerHook files no faster on the shared 2-core
    machine of benchmarks/README.md (4.3 s vs 4.7 s under load), so `jobs` is unused."""
    steps = distinct_steps(number_in(Path(f).name) for f in files)
    items = list(zip(files, steps, strict=True))
    frames, warnings = [], []
    for start in range(0, len(items), 500):
        frame, skipped = _read_files(items[start:start + 500])
        if frame is not None:
            frames.append(frame)
        warnings += skipped
        if progress is not None:
            progress(min(start + 500, len(items)), len(items))
    return (pl.concat(frames, how="vertical") if frames else None), warnings


SOURCE = TimelineSource()
