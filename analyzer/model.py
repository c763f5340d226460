"""Run: the frames of one analysed run (one or several workers) and its graph metadata.

Everything downstream of ingest takes a `Run`. Columns derived here, once, with polars
expressions: the canonical device and lane kind of each execution (tfprof's rules, see
docs/tfprof-semantics.md) and the op type of each executed node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import polars as pl

# A lane is canonical when it names a device and nothing more (tfprof's IsCanonicalDevice).
CANONICAL_DEVICE_RE = r"^.*/(device:gpu|gpu|device:cpu|cpu|device:sycl):\d+$"
_DEVICE_PREFIX_RE = r"^(.*/(?:device:)?[a-z_]*(?:cpu|gpu|tpu|sycl)[a-z_]*:\d+)"
_LABEL_OP_RE = r"^\S+ = ([A-Za-z0-9_>.]+)\("


FrameSource = pl.DataFrame | Callable[[], pl.DataFrame]


class _Frame:
    """A frame attribute of Run, read on first use (a cached run reads Parquet lazily, so
    `analyze ops` on a big run never loads the million rows of executions)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, run: Run, owner: type | None = None) -> pl.DataFrame:
        value = run._frames[self.name]
        if callable(value):
            value = run._frames[self.name] = value()
        return value


class Run:
    """Frames of a run. `nodes` has one row per NodeExecStats (see DESIGN.md "Data model").

    Each frame may be given as a DataFrame or as a function that returns it (read on first
    use). `node_stats` memoizes per-node numbers per step (see analyzer.nodestats), and
    `derived` other frames computed from these (`derived_frame`), which the cache keeps.
    """

    FRAMES = ("nodes", "outputs", "memory", "allocations", "threads", "graph_nodes",
              "op_log", "code")
    nodes = _Frame()
    outputs = _Frame()
    memory = _Frame()
    allocations = _Frame()
    threads = _Frame()
    graph_nodes = _Frame()
    op_log = _Frame()
    code = _Frame()

    def __init__(self, nodes: FrameSource, outputs: FrameSource, memory: FrameSource,
                 allocations: FrameSource, threads: FrameSource, graph_nodes: FrameSource,
                 op_log: FrameSource, code: FrameSource, paths: list[Path] | None = None,
                 warnings: list[str] | None = None,
                 node_stats: dict[int, FrameSource] | None = None,
                 derived: dict[str, FrameSource] | None = None) -> None:
        self._frames: dict[str, FrameSource] = {
            "nodes": nodes, "outputs": outputs, "memory": memory, "allocations": allocations,
            "threads": threads, "graph_nodes": graph_nodes, "op_log": op_log, "code": code}
        self.paths = paths or []
        self.warnings = warnings or []
        self.node_stats: dict[int, FrameSource] = dict(node_stats or {})
        self.derived: dict[str, FrameSource] = dict(derived or {})

    def derived_frame(self, name: str, build: Callable[[Run], pl.DataFrame]) -> pl.DataFrame:
        """The frame `name` computed from this run by `build`, once (or read from the
        cache, which stores what load_run's DERIVED names)."""
        value = self.derived.get(name)
        frame = build(self) if value is None else value() if callable(value) else value
        self.derived[name] = frame
        return frame

    @classmethod
    def from_frames(cls, frames: Mapping[str, FrameSource], paths: list[Path] | None = None,
                    warnings: list[str] | None = None,
                    node_stats: dict[int, FrameSource] | None = None,
                    derived: dict[str, FrameSource] | None = None) -> Run:
        """A Run from a mapping with every name of FRAMES (others are ignored)."""
        f = {name: frames[name] for name in cls.FRAMES}
        return cls(f["nodes"], f["outputs"], f["memory"], f["allocations"], f["threads"],
                   f["graph_nodes"], f["op_log"], f["code"], paths=paths, warnings=warnings,
                   node_stats=node_stats, derived=derived)

    def replace(self, **frames: FrameSource) -> Run:
        """A copy with some frames replaced (per-node numbers and derived frames are
        recomputed)."""
        return Run.from_frames({**self._frames, **frames}, self.paths, self.warnings)

    @property
    def steps(self) -> list[int]:
        return self.nodes.get_column("step").unique().sort().to_list()

    @property
    def workers(self) -> list[str]:
        return self.nodes.get_column("worker").unique().sort().to_list()

    @property
    def devices(self) -> list[str]:
        return self.nodes.get_column("device").unique().sort().to_list()


def lane_kind_expr(lane: pl.Expr) -> pl.Expr:
    """'stream_all', 'stream', 'memcpy', 'device' (canonical lane) or 'other', as tfprof splits.

    tfprof counts 'stream_all' as accelerator time, 'device' and 'other' as CPU time, and
    per-stream and memcpy lanes as neither.
    """
    low = lane.str.to_lowercase()
    return (
        pl.when(low.str.contains("stream:all", literal=True)).then(pl.lit("stream_all"))
        .when(low.str.contains("stream", literal=True)).then(pl.lit("stream"))
        .when(low.str.contains("memcpy", literal=True)).then(pl.lit("memcpy"))
        .when(low.str.contains(CANONICAL_DEVICE_RE)).then(pl.lit("device"))
        .otherwise(pl.lit("other"))
    )


def _unify_device_names(nodes: pl.DataFrame) -> pl.DataFrame:
    """One name per device: stream and memcpy lanes often name the device without its
    task ("/device:gpu:0/stream:all" next to "/job:localhost/.../device:gpu:0"), and old
    traces say "/gpu:0". A short name takes the full name of the one device of that type
    and index in the worker, when there is exactly one."""
    short = pl.col("device").str.extract(r"((?:gpu|cpu|tpu|sycl)[a-z_]*:\d+)$", 1)
    full = (
        nodes.filter(pl.col("device").str.starts_with("/job:"))
        .select("worker", "device", short=short).unique()
        .group_by("worker", "short").agg(full=pl.col("device").first(), n=pl.len())
        .filter(pl.col("n") == 1).drop("n")
    )
    return (
        nodes.with_columns(short=short)
        .join(full, on=["worker", "short"], how="left")
        .with_columns(device=pl.when(pl.col("device").str.starts_with("/job:"))
                      .then(pl.col("device")).otherwise(pl.coalesce("full", "device")))
        .drop("short", "full")
    )


def derive_node_columns(nodes: pl.DataFrame, graph_nodes: pl.DataFrame) -> pl.DataFrame:
    """Add device, lane_kind and op_type (+ op_type_source) to the executions frame, and
    node_name: the graph node of each execution (the raw name becomes stat_name).

    Op type: the graph's op (graph.pb, then partition graphs) for the node's name; for nodes
    the graphs do not name, the op in the timeline label ("name = Op(...)"); "unknown" last.
    Everything is computed on the distinct (worker, lane, name, label) keys, which repeat
    every step; each execution finds its key's number with one join on the four columns
    as categoricals, and every string column is gathered from the keys' table by that
    number (hashing a million long strings, or carrying them through a join, costs several
    times more). The key columns come back as strings.
    """
    key_cols = ["worker", "lane", "node_name", "timeline_label"]
    coded = nodes.select(pl.col(key_cols).cast(pl.Categorical))
    keys = coded.unique().with_row_index("key_id")
    key_id = coded.join(keys, on=key_cols, how="left", nulls_equal=True,
                        maintain_order="left").get_column("key_id")
    keys = keys.with_columns(pl.col(key_cols).cast(pl.String))
    lanes = keys.select("worker", "lane").unique().with_columns(
        device=pl.coalesce(pl.col("lane").str.to_lowercase().str.extract(_DEVICE_PREFIX_RE, 1),
                           pl.col("lane").str.to_lowercase()),
        lane_kind=lane_kind_expr(pl.col("lane")),
    )
    lanes = _unify_device_names(lanes)
    ops = (
        graph_nodes.filter(pl.col("op") != "")
        .with_columns(rank=pl.when(pl.col("source") == "graph").then(0).otherwise(1))
        .sort("rank", maintain_order=True)
        .unique(subset=["worker", "name"], keep="first", maintain_order=True)
        .select("worker", pl.col("name").alias("graph_node"), pl.col("op").alias("graph_op"))
    )
    derived = (
        keys
        # GPU stream records name "node:kernel"; the graph node is the part before ':'.
        .with_columns(graph_node=pl.col("node_name").str.split(":").list.first(),
                      label_op=pl.col("timeline_label").str.extract(_LABEL_OP_RE, 1))
        .join(lanes, on=["worker", "lane"], how="left")
        .join(ops, on=["worker", "graph_node"], how="left")
        .with_columns(
            op_type=pl.coalesce(pl.col("graph_op"), pl.col("label_op"), pl.lit("unknown")),
            op_type_source=pl.when(pl.col("graph_op").is_not_null()).then(pl.lit("graph"))
            .when(pl.col("label_op").is_not_null()).then(pl.lit("timeline_label"))
            .otherwise(pl.lit("unknown")),
        )
        .sort("key_id")  # row i describes key i
    )
    per_row = derived.select(pl.all().gather(key_id))
    return nodes.with_columns(per_row.select(key_cols)).rename(
        {"node_name": "stat_name"}).hstack(
        per_row.select(pl.col("graph_node").alias("node_name"), "device", "lane_kind",
                       "op_type", "op_type_source"))
