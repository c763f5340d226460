"""TF2 / JAX profiles: XSpace files (`<host>.xplane.pb`).

Accepts a single `.xplane.pb`, a profile run folder holding several (one per host: each
is a worker), or a TensorBoard logdir (`plugins/profile/<run>/`: the newest run, or the
one `parts(path, Selection(profile_run=...))` names). The function graphs that
analyzer.capture.tf2 writes beside a TF2 profile (`runlens.graphs.pb`) give the dataflow
graph and op types. Reading the XSpace itself is xplane_read's job; the mapping of its
events onto runlens's lanes and steps is described in docs/xplane.md.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
from google.protobuf.message import DecodeError

from .. import ingest, readfile, schema
from ..errors import InputFileError, RunDirError
from ..proto import config_pb2
from . import Part, Progress, Selection, SourceFrames
from .xplane_hlo import HloOp
from .xplane_planes import read_planes
from .xplane_read import EAGER_SCOPE, frames_of
from .xplane_wire import Plane
from .xplane_wire import read_planes as planes_of
from .xplane_workers import SeveralRuns, check_one_job, missing_workers, names

SUFFIX = ".xplane.pb"
GRAPHS_FILE = "runlens.graphs.pb"  # analyzer.capture.tf2.GRAPHS_FILE (no TF import here)

LACKS_ALWAYS = {
    "outputs": "XSpace profiles record no op outputs (tensor shapes and bytes)",
    "memory": "XSpace profiles record no per-op memory (allocator events at most)",
    "op_log": "XSpace profiles record no float ops or parameter counts",
}


def _named(name: str) -> bool:
    return name.endswith(SUFFIX)


def profile_root(logdir: Path) -> Path | None:
    """`logdir`/plugins/profile, or that of the one TensorBoard run below `logdir` that has
    one: Keras's TensorBoard callback writes `<log_dir>/train/plugins/profile/`, and users
    pass `<log_dir>`, as to TensorBoard. The logdir's `plugins/` or `plugins/profile/`
    folder stands for the logdir (a user who browsed down to it). RunDirError when
    several runs below have one."""
    if logdir.name == "profile" and logdir.parent.name == "plugins":
        return logdir
    root = logdir / "plugins" / "profile"
    if root.is_dir():
        return root
    if logdir.name == "plugins" and (logdir / "profile").is_dir():
        return logdir / "profile"
    try:
        below = sorted(p for p in logdir.iterdir()
                       if p.is_dir() and (p / "plugins" / "profile").is_dir())
    except OSError:
        return None
    if len(below) > 1:
        raise SeveralRuns(f"{logdir}: profiles in several TensorBoard runs ("
                          + ", ".join(p.name for p in below) + "): name one of them", below)
    return below[0] / "plugins" / "profile" if below else None


def profile_runs(logdir: Path, suffix: str = SUFFIX) -> list[Path]:
    """The profile run folders of a TensorBoard logdir (holding `suffix` files), oldest
    first (names are times)."""
    root = profile_root(logdir)
    if root is None:
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and any(p.glob(f"*{suffix}")))


def xplane_files(path: Path, profile_run: str | None = None,
                 workers: bool = False) -> list[Path]:
    """The .xplane.pb files `path` stands for (empty when it is none of the forms); a
    folder of per-worker logdirs gives each one's newest profile run (or `profile_run`),
    RunDirError when they are not one job and `workers` does not force it."""
    return _found(path, profile_run, workers)[0]


def _found(path: Path, profile_run: str | None = None, workers: bool = False
           ) -> tuple[list[Path], list[str]]:
    """xplane_files, and one line per entry named like one that is not a regular file
    (a FIFO, a device, a folder, a dangling link: reported and skipped, never opened)."""
    if not path.is_dir():
        named = path.name.endswith(SUFFIX) and path.exists()
        return ([path] if named else []), []  # not a regular file: reading it says so
    direct = readfile.scan(path, _named)
    if (direct[0] or direct[1]) and profile_run is None:
        found = direct
    else:
        try:
            runs = profile_runs(path)
        except SeveralRuns as several:  # per-worker logdirs (analyzer/capture/job.py)
            found = _per_worker(several.below, profile_run)
        else:
            if not runs:
                return [], []
            run = runs[-1] if profile_run is None else profile_run_folder(path, profile_run)
            found = readfile.scan(run, _named)
    check_one_job(path, found[0], names(found[0]), workers)
    return found


def _per_worker(logdirs: list[Path], profile_run: str | None) -> tuple[list[Path], list[str]]:
    """The files of each worker's logdir: its newest profile run, or the one named."""
    files: list[Path] = []
    problems: list[str] = []
    for logdir in logdirs:
        runs = profile_runs(logdir)
        if not runs:
            continue
        run = runs[-1] if profile_run is None else profile_run_folder(logdir, profile_run)
        more, bad = readfile.scan(run, _named)
        files += more
        problems += bad
    return files, problems


def profile_run_folder(logdir: Path, name: str) -> Path:
    """The folder of profile run `name` of a TensorBoard logdir (--profile-run)."""
    runs = profile_runs(logdir)
    if not runs:
        raise RunDirError(f"{logdir}: --profile-run needs a TensorBoard logdir "
                          "(plugins/profile/<run>/ with .xplane.pb files)")
    chosen = [r for r in runs if r.name == name]
    if not chosen:
        raise RunDirError(f"{logdir}: no profile run {name!r} (it has: "
                          + ", ".join(r.name for r in runs) + ")")
    return chosen[0]


def _graph_nodes(graphs: Path | None, worker: str) -> tuple[pl.DataFrame, list[str]]:
    """The partition graphs of runlens.graphs.pb (a RunMetadata of function graphs)."""
    if graphs is None or not graphs.exists():
        return pl.DataFrame(schema=schema.GRAPH_NODE_SCHEMA), []
    try:
        meta = config_pb2.RunMetadata.FromString(readfile.read_bytes(graphs))
    except InputFileError as e:
        return pl.DataFrame(schema=schema.GRAPH_NODE_SCHEMA), [f"{e}; no dataflow graph"]
    except (DecodeError, RuntimeError) as e:
        return pl.DataFrame(schema=schema.GRAPH_NODE_SCHEMA), [
            f"{readfile.shown(graphs)}: not a readable RunMetadata ({e}); no dataflow graph"]
    defs = [g.SerializeToString() for fg in meta.function_graphs for g in fg.partition_graphs]
    try:  # a graph that is not a GraphDef (bad UTF-8 in an attribute): the profile stays
        frame = ingest.ingest_graph_defs(defs, readfile.shown(graphs), "partition")
    except InputFileError as e:
        return pl.DataFrame(schema=schema.GRAPH_NODE_SCHEMA), [f"{e}; no dataflow graph"]
    return frame.unique(subset=["name"], keep="first", maintain_order=True), []


def _hlo_frames(ops: dict[tuple[int, str], HloOp]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """JAX: graph nodes (framework op -> op type, the loop it runs in) and code (source
    frames) from the HLO metadata plane (xplane_hlo.read_programs, read once with the
    planes)."""
    nodes: dict[str, tuple[str, str | None, int | None]] = {}
    code: dict[str, list] = {k: [] for k in schema.CODE_SCHEMA}
    for op in ops.values():
        if not op.shares and op.op_name in nodes:  # most: an op's other instructions
            continue
        loop = (op.loop or None, op.loop_trips if op.loop else None)
        # A shared collective's every share is a node (xplane_collectives).
        for name, op_type in [(op.op_name, op.op_type), *[s[:2] for s in op.shares]]:
            if name in nodes:
                continue
            nodes[name] = (op_type, *loop)
            for depth, (file, line, func) in enumerate(op.frames):
                for k, v in zip(("name", "depth", "file", "lineno", "function", "line",
                                 "func_start_line"),
                                (name, depth, file, line, func, "", 0), strict=True):
                    code[k].append(v)
    graph = pl.DataFrame([(name, *rest) for name, rest in nodes.items()], orient="row",
                         schema={"name": pl.String, "op": pl.String, "loop": pl.String,
                                 "loop_trips": pl.Int64})
    graph = graph.with_columns(
        **{c: pl.lit(None, dtype=t) for c, t in schema.GRAPH_NODE_SCHEMA.items()
           if c not in ("name", "op", "source", "loop", "loop_trips")},
        source=pl.lit("hlo"),
    ).select(list(schema.GRAPH_NODE_SCHEMA))
    return graph, pl.DataFrame(code, schema=schema.CODE_SCHEMA)


def _no_graph(names: list[tuple[str, str]]) -> str:
    """Why a TF2 profile has no graph: eager code (every op an `EagerLocalExecute`), or
    a capture without runlens's helper."""
    if names and all(n.startswith(EAGER_SCOPE + "/") for n, _ in names):
        return ("eager TF2 profile: every op ran on its own (EagerLocalExecute events, "
                "named eager/<Op>), in no graph")
    return ("no function graphs beside the profile (capture with "
            "runlens.analyzer.capture.tf2 to get them)")


def _hlo_work(totals: dict[str, list]) -> pl.DataFrame:
    """The HLO's work per framework op (xplane_device -> hlo_work.add_per_op)."""
    rows = [(name, *row) for name, row in totals.items()]
    return pl.DataFrame(rows, schema=schema.HLO_WORK_SCHEMA, orient="row")


def read_file(path: Path, worker: str, native: bool | None = None, jobs: int = 2,
              planes: list[Plane] | None = None) -> SourceFrames:
    """One host's .xplane.pb -> SourceFrames (raw frames with a worker column); `native`
    False walks it with protobuf (the C decoder's oracle in tests). `planes`: the
    file's planes when another source made them (sources/tracejson.py)."""
    if planes is None:
        planes = planes_of(path, native)
    try:
        ops, extra = read_planes(planes, jobs)
    except (ValueError, DecodeError, OverflowError) as e:  # a malformed line or event
        raise InputFileError(f"{readfile.shown(path)}: not a readable XSpace profile "
                             f"({e})") from None
    if not ops.start_ps:
        said = (f": {len(extra.markers)} step markers with no op in them" if extra.markers
                else " (a TF2/JAX profile of no op?)")
        raise InputFileError(f"{readfile.shown(path)}: no op events{said}")
    frames = frames_of(ops, extra, worker)
    warnings = [f"{readfile.shown(path)}: {w}" for w in extra.warnings]
    lacks = dict(LACKS_ALWAYS)
    graphs = path.parent / GRAPHS_FILE
    # JAX: XLA:CPU thunks named by HLO ops, or (GPU/TPU) HLO modules on the metadata
    # plane, whose OpMetadata hold each op's source line and stack (the code view's).
    programs = extra.programs.ops if extra.programs else {}
    hlo = extra.hlo or (not graphs.is_file() and bool(programs))
    hlo_frames = _hlo_frames(programs) if hlo else None
    if hlo_frames is not None and (extra.hlo or hlo_frames[1].height):
        graph_nodes, code = hlo_frames
        lacks["graph"] = "JAX profiles: HLO ops carry no dataflow edges runlens reads"
    else:
        graph_nodes, more = _graph_nodes(graphs, worker)
        warnings += more
        code = pl.DataFrame(schema=schema.CODE_SCHEMA)
        if not graph_nodes.height:
            lacks["graph"] = (f"{GRAPHS_FILE} could not be read (its warning says why)"
                              if more else _no_graph(ops.names))
        lacks["code"] = "TF2 profiles record no Python code locations of ops"
    if (not extra.markers and not frames["step_spans"].height
            and frames["executions"].get_column("step").n_unique() <= 1):
        lacks["steps"] = ("no step markers (a `train` TraceMe with step_num, e.g. "
                          "tf.profiler.experimental.Trace('train', step_num=n) or "
                          "jax.profiler.StepTraceAnnotation): the profile is one step")
    if not frames["allocations"].height:
        lacks["allocations"] = "the profile holds no MemoryAllocation events"
    worker_col = pl.lit(worker).alias("worker")
    if extra.hlo_work:
        lacks.pop("op_log", None)  # the HLO gives float ops (hlo_work)
    empty = {
        "output_rows": pl.DataFrame(schema=schema.OUTPUT_SCHEMA),
        "output_keys": pl.DataFrame(schema={"worker": pl.String,
                                            **schema.OUTPUT_KEY_SCHEMA}),
        "memory": pl.DataFrame(schema=schema.MEMORY_SCHEMA).with_columns(worker_col),
        "op_log": pl.DataFrame(schema=schema.OP_LOG_SCHEMA).with_columns(worker_col),
    }
    out = {**frames, **empty,
           "threads": frames["threads"].with_columns(worker_col),
           "allocations": frames["allocations"].with_columns(worker_col),
           "graph_nodes": graph_nodes.with_columns(worker_col),
           "code": code.with_columns(worker_col),
           "step_spans": frames["step_spans"].with_columns(worker_col),
           "hlo_work": _hlo_work(extra.hlo_work).with_columns(worker_col),
           "device_facts": pl.DataFrame(extra.device_facts, schema=schema.DEVICE_SCHEMA)
           .with_columns(worker_col)}
    return SourceFrames(frames=out, warnings=warnings, lacks=lacks)


class XPlaneSource:
    kind = "xplane"
    files = "*.xplane.pb, plugins/profile/"  # what the not-a-profile error names
    description = ("TF2/JAX profiles: a <host>.xplane.pb, a profile run folder of them, "
                   "or a TensorBoard logdir (plugins/profile/<run>/)")

    def accepts(self, path: Path) -> bool:
        try:
            files, problems = _found(path)
        except RunDirError:
            return True
        return bool(files or problems)

    def parts(self, path: Path, chosen: Selection) -> list[Part]:
        files, problems = _found(path, chosen.profile_run, chosen.workers)
        if not files:
            raise RunDirError(f"{readfile.shown(path)}: no *{SUFFIX} file (not a TF2/JAX "
                              "profile" + (f"; {problems[0]}" if problems else "") + ")")
        missing = missing_workers(files)
        if missing is not None:
            problems = [f"{readfile.shown(path)}: {missing}", *problems]
        parts = []
        for f, worker in zip(files, names(files), strict=True):
            graphs = f.parent / GRAPHS_FILE
            deps = (str(f),) + ((str(graphs),) if readfile.regular(graphs) else ())
            parts.append(Part(kind=self.kind, path=f, worker=worker, files=deps,
                              detail=tuple(files), warnings=tuple(problems)))
            problems = []  # said once, with the first part
        return parts

    def read(self, part: Part, jobs: int, progress: Progress | None) -> SourceFrames:
        """One host's file. An unreadable one raises InputFileError naming it; load_run
        leaves that worker out with a warning when the run has others."""
        result = read_file(part.path, part.worker, jobs=jobs)
        if progress:
            progress(1, 1)
        return result


SOURCE = XPlaneSource()
