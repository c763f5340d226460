"""Run: the frames of one analysed run (one or several workers) and its graph metadata.

Everything downstream of ingest takes a `Run`. Columns derived here, once, with polars
expressions: the canonical device and lane kind of each execution (tfprof's rules, see
docs/tfprof-semantics.md) and the op type of each executed node.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from .schema import (
    KEY_COLUMNS,
    NODE_COLUMNS,
    OUTPUT_COLUMNS,
    OUTPUT_KEY_COLUMNS,
    RUN_FRAMES,
)

if TYPE_CHECKING:
    from .origin import Origin

# A lane is canonical when it names a device and nothing more (tfprof's IsCanonicalDevice).
CANONICAL_DEVICE_RE = r"^.*/(device:gpu|gpu|device:cpu|cpu|device:sycl):\d+$"
_DEVICE_PREFIX_RE = r"^(.*/(?:device:)?[a-z_]*(?:cpu|gpu|tpu|sycl)[a-z_]*:\d+)"
# "name = Op(inputs)", after an optional allocation prefix ("[mklcpu 0.1MB 0.1MB] ").
_LABEL_OP_RE = r"^(?:\[[^\]]*\] )?\S+ = ([A-Za-z0-9_>.-]+)\("
# oneDNN's names for the kernels it implements (_MklMatMul, _MklNativeConv2D): the same op.
_ONEDNN_PREFIX_RE = r"^_Mkl(?:Native)?"
# TensorFlow ops whose names start with "Fused" (anything else named Fused* once the
# oneDNN prefix is gone is a Grappler fusion: _MklNativeFusedConv2D is _FusedConv2D).
_PUBLIC_FUSED_RE = r"^Fused(?:BatchNorm|Pad|Resize)"


FrameSource = pl.DataFrame | Callable[[], pl.DataFrame]


def built(source: FrameSource) -> pl.DataFrame:
    """The frame itself, or what its reader returns."""
    return source() if callable(source) else source


class _Once:
    """A frame given as a DataFrame or as its reader, read on first use and kept (by this
    holder: the Run that owns it never changes)."""

    __slots__ = ("source", "value", "lock")

    def __init__(self, source: FrameSource | None = None) -> None:
        self.source = source
        self.value: pl.DataFrame | None = source if isinstance(source, pl.DataFrame) else None
        self.lock = threading.Lock()

    def get(self, build: Callable[[], pl.DataFrame] | None = None) -> pl.DataFrame:
        value = self.value
        if value is None:
            with self.lock:  # views may read frames from several threads
                if self.value is None:
                    source = build if build is not None else self.source
                    assert source is not None, "a frame without its source"
                    self.value = built(source)
                    self.source = None
                value = self.value
        return value

    @property
    def read(self) -> bool:
        return self.value is not None

    def current(self) -> FrameSource:
        """The frame if read, else its reader."""
        with self.lock:
            return self.value if self.value is not None else self.source  # type: ignore[return-value]


class _Frame:
    """A frame attribute of Run, read on first use (a cached run reads Parquet lazily, so
    `analyze ops` on a big run never loads the million rows of executions)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, run: Run, owner: type | None = None) -> pl.DataFrame:
        return run._slots[self.name].get()


class ReadOnlyDict(dict):
    """A dict that cannot be changed (still a dict: JSON writes it as one)."""

    def _read_only(self, *args: object, **kwargs: object) -> None:
        raise TypeError("read-only: a Run does not change once made")

    __setitem__ = __delitem__ = __ior__ = _read_only  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _read_only  # type: ignore[assignment]

    def __reduce__(self) -> tuple[type, tuple[dict]]:  # copy and pickle: made whole
        return type(self), (dict(self),)


class Memo:
    """What the analysis layer derived from a Run (analyzer.products): handed to the Run
    when it is made, read and written by that layer only."""

    __slots__ = ("values", "lock")

    def __init__(self) -> None:
        self.values: dict[object, Any] = {}
        self.lock = threading.Lock()


class Run:
    """Frames of a run. `nodes` has one row per NodeExecStats (see DESIGN.md "Data model").

    The executions are kept as numbers plus a `key_id` into `keys` (one row per distinct
    worker, lane, node name and timeline label, with what derives from them), since those
    strings repeat every step; `nodes` joins the two when first used. Per-node numbers
    (analyzer.analysis.nodestats) work on the pair and never build `nodes`.

    Each frame may be given as a DataFrame or as a function that returns it (read on first
    use). A Run never changes once made: its attributes cannot be set (AttributeError) and
    `lacks` is read-only; what is derived from it (per-node numbers, trees, code paths,
    the Run of chosen steps) is kept by analyzer.products, in `memo`. `origin` says where
    those products may be cached (analyzer.productcache; None: nowhere), `whole` is the
    Run this one was cut from by a choice of steps (itself when it was not). `warnings` is
    the one thing that grows: a cache found damaged when a frame is first read adds one.
    """

    FRAMES = RUN_FRAMES  # analyzer/schema.py names their columns
    paths: tuple[Path, ...]
    warnings: list[str]
    lacks: Mapping[str, str]
    origin: Origin | None
    whole: Run
    memo: Memo
    _slots: dict[str, _Once]
    _nodes: _Once
    _outputs: _Once
    executions = _Frame()
    keys = _Frame()
    output_rows = _Frame()
    output_keys = _Frame()
    memory = _Frame()
    allocations = _Frame()
    threads = _Frame()
    graph_nodes = _Frame()
    op_log = _Frame()
    code = _Frame()
    step_spans = _Frame()
    attribution = _Frame()
    timing = _Frame()
    hlo_work = _Frame()
    device_facts = _Frame()
    device_steps = _Frame()

    def __init__(self, frames: Mapping[str, FrameSource], paths: Iterable[Path] = (),
                 warnings: list[str] | None = None,
                 lacks: Mapping[str, str] | None = None,
                 origin: Origin | None = None, whole: Run | None = None) -> None:
        setattr_ = object.__setattr__
        setattr_(self, "_slots", {name: _Once(frames[name]) for name in self.FRAMES})
        setattr_(self, "_nodes", _Once())
        setattr_(self, "_outputs", _Once())
        setattr_(self, "paths", tuple(paths))
        # The list given: warnings found later (load_run's) appear in it.
        setattr_(self, "warnings", warnings if warnings is not None else [])
        # What the input format does not hold (what -> why), said once by the output;
        # views and checkers that need it say they were skipped.
        setattr_(self, "lacks", ReadOnlyDict(lacks or {}))
        setattr_(self, "origin", origin)
        setattr_(self, "whole", self if whole is None else whole)
        setattr_(self, "memo", Memo())

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a Run does not change once made (set {name!r}): derive a "
                             "new Run (Run.replace) or a product (analyzer.products)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a Run does not change once made (delete {name!r})")

    def is_read(self, name: str) -> bool:
        """Whether the frame `name` was read (a cached frame is read when first used)."""
        return self._slots[name].read

    @property
    def _frames(self) -> Mapping[str, FrameSource]:
        """Each frame as it is now: the DataFrame once read, else its reader."""
        return {name: slot.current() for name, slot in self._slots.items()}

    @property
    def nodes(self) -> pl.DataFrame:
        """The executions with their key's columns (NODE_COLUMNS), built once."""
        return self._nodes.get(lambda: join_keys(self.executions, self.keys))

    def nodes_lazy(self) -> pl.LazyFrame:
        """`nodes` as a LazyFrame: a query that selects a few columns builds only those."""
        if self._nodes.read:
            return self._nodes.get().lazy()
        return keyed_rows(self.executions, self.keys)

    @property
    def outputs(self) -> pl.DataFrame:
        """One row per output of an execution (OUTPUT_COLUMNS), built once."""
        return self._outputs.get(lambda: join_keys(self.output_rows, self.output_keys,
                                                   "out_key", OUTPUT_COLUMNS))

    @classmethod
    def from_frames(cls, frames: Mapping[str, FrameSource], paths: Iterable[Path] = (),
                    warnings: list[str] | None = None,
                    lacks: Mapping[str, str] | None = None,
                    origin: Origin | None = None, whole: Run | None = None) -> Run:
        """A Run from a mapping with every name of FRAMES (others are ignored), or with
        `nodes` (NODE_COLUMNS) in place of executions and keys, `outputs`
        (OUTPUT_COLUMNS) in place of output_rows and output_keys."""
        f = dict(frames)
        if "executions" not in f:
            f["executions"], f["keys"] = split_keys(built(f["nodes"]))
        if "output_rows" not in f:
            rows, f["output_keys"] = split_keys(built(f["outputs"]), OUTPUT_KEY_COLUMNS)
            f["output_rows"] = rows.rename({"key_id": "out_key"})
        return cls(f, paths=paths, warnings=warnings, lacks=lacks, origin=origin,
                   whole=whole)

    def replace(self, *, lacks: Mapping[str, str] | None = None,
                **frames: FrameSource) -> Run:
        """A new Run with some frames replaced, `nodes` or `outputs` (whole) among them,
        and `lacks` if given (its products are its own)."""
        return self.with_frames(frames, lacks=lacks)

    def with_frames(self, frames: Mapping[str, FrameSource], *,
                    lacks: Mapping[str, str] | None = None, origin: Origin | None = None,
                    whole: Run | None = None) -> Run:
        """`replace`, with the new Run's `origin` and `whole` (see Run)."""
        parts = {"nodes": ("executions", "keys"), "outputs": ("output_rows", "output_keys")}
        replaced = {p for name, pair in parts.items() if name in frames for p in pair}
        base = {k: v for k, v in self._frames.items() if k not in replaced}
        return Run.from_frames({**base, **frames}, self.paths, self.warnings,
                               lacks=self.lacks if lacks is None else lacks,
                               origin=origin, whole=whole)

    @property
    def steps(self) -> list[int]:
        return self.executions.get_column("step").unique().sort().to_list()

    @property
    def workers(self) -> list[str]:
        return self.keys.get_column("worker").unique().sort().to_list()

    @property
    def devices(self) -> list[str]:
        return self.keys.get_column("device").unique().sort().to_list()


# tfprof's timed lanes: 'device' (CPU time) and 'stream_all' (accelerator time); an
# execution on a per-stream or memcpy lane is the same work seen again.
TIMED_LANES = ("device", "stream_all")

# The op type of the rows that are a collective's wait for its peers (XLA:CPU's Rendezvous
# events: sources/xplane_collectives.py makes them; analysis/collectives.py reads them).
WAIT_TYPE = "peer-wait"


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


def kernel_expr(op: pl.Expr) -> pl.Expr:
    """The kernel an executed op names, without oneDNN's implementation prefix:
    _MklMatMul -> MatMul, _MklNativeFusedConv2D -> _FusedConv2D, _FusedConv2D stays."""
    bare = op.str.replace(_ONEDNN_PREFIX_RE, "")
    renamed = op.str.contains(_ONEDNN_PREFIX_RE)
    fusion = bare.str.starts_with("Fused") & ~bare.str.contains(_PUBLIC_FUSED_RE)
    return (pl.when(renamed & fusion).then(pl.lit("_") + bare)
            .when(renamed).then(bare).otherwise(op))


def fused_label_expr(kernel: pl.Expr, fused_ops: pl.Expr) -> pl.Expr:
    """"Conv2D+BiasAdd+Relu" for a _FusedConv2D whose fused_ops attr is [BiasAdd, Relu];
    null when the kernel fused nothing (or the graphs do not say)."""
    base = kernel.str.replace(r"^_Fused", "")
    has = fused_ops.list.len().fill_null(0) > 0
    return pl.when(has).then(
        pl.concat_str(base, pl.lit("+"), fused_ops.list.join("+")))


def kernel_label_expr(kernel: str = "kernel", fused_ops: str = "fused_ops") -> pl.Expr:
    """How a kernel is shown: "_FusedConv2D (Conv2D+BiasAdd+Relu)", or the kernel alone."""
    return pl.when(pl.col(fused_ops).is_not_null()).then(
        pl.format("{} ({})", kernel, fused_ops)).otherwise(pl.col(kernel))


def derive_keys(keys: pl.DataFrame, graph_nodes: pl.DataFrame) -> pl.DataFrame:
    """The key table (worker, lane, node_name, timeline_label: one row per distinct key of
    the executions) with what is derived from it: device, lane_kind, op_type
    (+ op_type_source), kernel and fused_ops, and node_name: the graph node (the raw name
    becomes stat_name).

    Op type: the graph's op (graph.pb, then partition graphs) for the node's name; for nodes
    the graphs do not name, the op in the timeline label ("name = Op(...)"); "unknown" last.
    Kernel: what actually ran, from the partition graphs (after Grappler), then the
    timeline label, else the op type; Grappler's remapper fuses Conv2D+BiasAdd+Relu into a
    _FusedConv2D that keeps the Relu node's name, so the two differ there (docs/views.md).
    fused_ops: "Conv2D+BiasAdd+Relu" from the fused node's `fused_ops` attr.
    A key repeats every step, so this is a few thousand rows whatever the run's size.
    """
    lanes = keys.select("worker", "lane").unique().with_columns(
        device=pl.coalesce(pl.col("lane").str.to_lowercase().str.extract(_DEVICE_PREFIX_RE, 1),
                           pl.col("lane").str.to_lowercase()),
        lane_kind=lane_kind_expr(pl.col("lane")),
    )
    lanes = _unify_device_names(lanes)
    named = graph_nodes.filter(pl.col("op") != "")
    ops = (
        named.with_columns(rank=pl.when(pl.col("source") == "graph").then(0).otherwise(1))
        .sort("rank", maintain_order=True)
        .unique(subset=["worker", "name"], keep="first", maintain_order=True)
        .select("worker", pl.col("name").alias("graph_node"), pl.col("op").alias("graph_op"))
    )
    executed = (
        named.filter(pl.col("source") != "graph")
        .unique(subset=["worker", "name"], keep="first", maintain_order=True)
        .select("worker", pl.col("name").alias("graph_node"),
                pl.col("op").alias("partition_op"), pl.col("fused_ops").alias("fused_list"))
    )
    op_type = pl.coalesce(pl.col("graph_op"), pl.col("label_op"), pl.lit("unknown"))
    kernel = kernel_expr(pl.coalesce(pl.col("partition_op"), pl.col("label_op"), op_type))
    return (
        keys
        # GPU stream records name "node:kernel"; the graph node is the part before ':'.
        .with_columns(graph_node=pl.col("node_name").str.split(":").list.first(),
                      label_op=pl.col("timeline_label").str.extract(_LABEL_OP_RE, 1))
        .join(lanes, on=["worker", "lane"], how="left", maintain_order="left")
        .join(ops, on=["worker", "graph_node"], how="left", maintain_order="left")
        .join(executed, on=["worker", "graph_node"], how="left", maintain_order="left")
        .with_columns(kernel=kernel)
        .select(
            "worker", "lane", pl.col("node_name").alias("stat_name"), "timeline_label",
            pl.col("graph_node").alias("node_name"), "device", "lane_kind",
            op_type=op_type,
            op_type_source=pl.when(pl.col("graph_op").is_not_null()).then(pl.lit("graph"))
            .when(pl.col("label_op").is_not_null()).then(pl.lit("timeline_label"))
            .otherwise(pl.lit("unknown")),
            kernel="kernel",
            fused_ops=fused_label_expr(pl.col("kernel"), pl.col("fused_list")),
        )
    )


def keyed_rows(rows: pl.DataFrame, keys: pl.DataFrame, key: str = "key_id",
               columns: list[str] = NODE_COLUMNS) -> pl.LazyFrame:
    """Rows with their key's columns, in the order `columns`, lazily: each column is
    gathered by number from the small key table (hashing a million strings, or joining on
    them, costs several times more), and only the columns a query uses are built."""
    return rows.lazy().with_columns(
        pl.lit(keys.get_column(c)).gather(pl.col(key)).alias(c) for c in keys.columns
    ).select(columns)


def join_keys(rows: pl.DataFrame, keys: pl.DataFrame, key: str = "key_id",
              columns: list[str] = NODE_COLUMNS) -> pl.DataFrame:
    """keyed_rows, built."""
    return keyed_rows(rows, keys, key, columns).collect()


def split_keys(rows: pl.DataFrame, key_columns: list[str] = KEY_COLUMNS
               ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The inverse of join_keys: (rows with key_id, the distinct `key_columns`)."""
    text = [c for c in key_columns if rows.schema[c] == pl.String]
    coded = rows.select(key_columns).with_columns(pl.col(text).cast(pl.Categorical))
    keys = coded.unique(maintain_order=True).with_row_index("key_id")
    key_id = coded.join(keys, on=key_columns, how="left", nulls_equal=True,
                        maintain_order="left").get_column("key_id")
    return (rows.drop(key_columns).with_columns(key_id=key_id),
            keys.drop("key_id").with_columns(pl.col(text).cast(pl.String)))
