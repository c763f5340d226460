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
from .xplane_read import frames_of
from .xplane_wire import Plane
from .xplane_wire import read_planes as planes_of

SUFFIX = ".xplane.pb"
GRAPHS_FILE = "runlens.graphs.pb"  # analyzer.capture.tf2.GRAPHS_FILE (no TF import here)

LACKS_ALWAYS = {
    "outputs": "XSpace profiles record no op outputs (tensor shapes and bytes)",
    "memory": "XSpace profiles record no per-op memory (allocator events at most)",
    "op_log": "XSpace profiles record no float ops or parameter counts",
}


def _worker(path: Path) -> str:
    name = readfile.shown(path.name)
    return name[: -len(SUFFIX)] if name.endswith(SUFFIX) else readfile.shown(path.stem)


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
        raise RunDirError(f"{logdir}: profiles in several TensorBoard runs ("
                          + ", ".join(p.name for p in below) + "): name one of them")
    return below[0] / "plugins" / "profile" if below else None


def profile_runs(logdir: Path, suffix: str = SUFFIX) -> list[Path]:
    """The profile run folders of a TensorBoard logdir (holding `suffix` files), oldest
    first (names are times)."""
    root = profile_root(logdir)
    if root is None:
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and any(p.glob(f"*{suffix}")))


def xplane_files(path: Path, profile_run: str | None = None) -> list[Path]:
    """The .xplane.pb files `path` stands for (empty when it is none of the three forms)."""
    return _found(path, profile_run)[0]


def _found(path: Path, profile_run: str | None = None) -> tuple[list[Path], list[str]]:
    """xplane_files, and one line per entry named like one that is not a regular file
    (a FIFO, a device, a folder, a dangling link: reported and skipped, never opened)."""
    if not path.is_dir():
        named = path.name.endswith(SUFFIX) and path.exists()
        return ([path] if named else []), []  # not a regular file: reading it says so
    direct = readfile.scan(path, _named)
    if (direct[0] or direct[1]) and profile_run is None:
        return direct
    runs = profile_runs(path)
    if not runs:
        return [], []
    run = runs[-1] if profile_run is None else profile_run_folder(path, profile_run)
    return readfile.scan(run, _named)


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
    """JAX: graph nodes (framework op -> op type) and code (source frames) from the HLO
    metadata plane (xplane_hlo.read_programs, read once with the planes)."""
    nodes: dict[str, str] = {}
    code: dict[str, list] = {k: [] for k in schema.CODE_SCHEMA}
    for op in ops.values():
        if op.op_name in nodes:
            continue
        nodes[op.op_name] = op.op_type
        for depth, (file, line, func) in enumerate(op.frames):
            for k, v in zip(("name", "depth", "file", "lineno", "function", "line",
                             "func_start_line"),
                            (op.op_name, depth, file, line, func, "", 0), strict=True):
                code[k].append(v)
    graph = pl.DataFrame({"name": list(nodes), "op": list(nodes.values())},
                         schema={"name": pl.String, "op": pl.String})
    graph = graph.with_columns(
        **{c: pl.lit(None, dtype=t) for c, t in schema.GRAPH_NODE_SCHEMA.items()
           if c not in ("name", "op", "source")},
        source=pl.lit("hlo"),
    ).select(list(schema.GRAPH_NODE_SCHEMA))
    return graph, pl.DataFrame(code, schema=schema.CODE_SCHEMA)


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
        raise InputFileError(f"{readfile.shown(path)}: no op events (a TF2/JAX profile of "
                             "no op?)")
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
                              if more else "no function graphs beside the profile (capture "
                              "with runlens.analyzer.capture.tf2 to get them)")
        lacks["code"] = "TF2 profiles record no Python code locations of ops"
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
        files, problems = _found(path, chosen.profile_run)
        if not files:
            raise RunDirError(f"{readfile.shown(path)}: no *{SUFFIX} file (not a TF2/JAX "
                              "profile" + (f"; {problems[0]}" if problems else "") + ")")
        parts = []
        for f in files:
            graphs = f.parent / GRAPHS_FILE
            deps = (str(f),) + ((str(graphs),) if readfile.regular(graphs) else ())
            parts.append(Part(kind=self.kind, path=f, worker=_worker(f), files=deps,
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
