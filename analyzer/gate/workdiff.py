"""What each node does per step, and what changed in that work between two runs.

Two processes of the same program run the same nodes on the same shapes: same op types,
same output bytes, same float ops, same parameters. Their times differ (a 2.5x swing of a
scope between processes is common on a shared machine), their work does not. So where the
work of a scope changed, a slower time has its cause in the diff and one process a side is
enough to call it; where the work is the same, a slower time may be the process
(docs/ci.md, "Verdicts by evidence").

The work of a node, per step, from what the source holds: executions; output bytes
(dtype size x shape of each executed output, else the graph's output shapes); float ops
(op_log, x executions); parameters (variables' shapes). XSpace profiles with HLO (JAX,
TF with XLA): output bytes, input bytes and float ops of the HLO instructions the node's
events ran (the `hlo_work` frame: analyzer/sources/hlo_work.py), per execution x
executions. A fact a source lacks is null, and
a diff over nulls says nothing (`work_changed` null: not known). A kernel not attributed
to an op (`unattributed:<kernel>`) has no work facts: its name is not its work (cuDNN's
autotuning picks other kernels in other processes of the same program), so a run whose
kernels are all unattributed has its work not recorded.
"""

from __future__ import annotations

import polars as pl

from ..analysis.jaxscopes import folded
from ..model import TIMED_LANES, Run
from .names import UNATTRIBUTED, node_key, op_key

WORK_SCHEMA = {"name": pl.String, "op_type": pl.String, "execs": pl.Float64,
               "out_bytes": pl.Float64, "in_bytes": pl.Float64, "float_ops": pl.Float64,
               "params": pl.Float64}
FACTS = ("out_bytes", "in_bytes", "float_ops", "params")
# Bytes per element of the dtypes TensorFlow and XLA name (others: the output's
# requested bytes, else unknown).
DTYPE_BYTES = {
    "float": 4, "float32": 4, "f32": 4, "double": 8, "float64": 8, "f64": 8, "half": 2,
    "float16": 2, "f16": 2, "bfloat16": 2, "bf16": 2, "int8": 1, "s8": 1, "uint8": 1,
    "u8": 1, "bool": 1, "pred": 1, "int16": 2, "s16": 2, "uint16": 2, "u16": 2,
    "int32": 4, "s32": 4, "uint32": 4, "u32": 4, "int64": 8, "s64": 8, "uint64": 8,
    "u64": 8, "complex64": 8, "c64": 8, "complex128": 16, "c128": 16,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "f8e4m3fn": 1, "f8e5m2": 1,
}
VARIABLE_OPS = ("VariableV2", "VarHandleOp", "Variable")
REL_TOL = 1e-6  # sums this close are the same work (medians of integer counts)


def _elements(shape: pl.Expr) -> pl.Expr:
    """Elements of a shape list ([] is a scalar: 1); null if any dimension is unknown."""
    dims = shape.list.eval(pl.when(pl.element() >= 0).then(pl.element()))
    return pl.when(dims.list.eval(pl.element().is_null()).list.any()).then(None).otherwise(
        dims.list.eval(pl.element().cast(pl.Float64)).list.eval(pl.element().product())
        .list.first().fill_null(1.0))


def _dtype_bytes(dtype: pl.Expr) -> pl.Expr:
    return dtype.str.to_lowercase().str.replace(r"^dt_", "").replace_strict(
        DTYPE_BYTES, default=None, return_dtype=pl.Float64)


def _executed_outputs(run: Run, timed: pl.DataFrame) -> pl.DataFrame | None:
    """Output bytes per (node, step) from the executions' recorded outputs, or None."""
    outputs = run.outputs
    if not outputs.height:
        return None
    size = _elements(pl.col("shape")) * _dtype_bytes(pl.col("dtype"))
    per_exec = outputs.select(
        "worker", "step", "exec_idx",
        bytes=pl.coalesce(size, pl.when(pl.col("requested_bytes") > 0)
                          .then(pl.col("requested_bytes").cast(pl.Float64))))
    return (timed.select("worker", "step", "exec_idx", "node_name")
            .join(per_exec, on=["worker", "step", "exec_idx"])
            .group_by("node_name", "worker", "step").agg(out_bytes=pl.col("bytes").sum()))


def _graph_outputs(run: Run) -> pl.DataFrame:
    """Bytes of one execution's outputs from the graph's output shapes (node's dtype)."""
    g = run.graph_nodes.filter(pl.col("output_shapes").is_not_null())
    if not g.height:
        return pl.DataFrame(schema={"node_name": pl.String, "exec_bytes": pl.Float64})
    return (g.unique("name", keep="first", maintain_order=True)
            .select(node_name="name", dtype="dtype", shapes="output_shapes")
            .explode("shapes")
            .with_columns(b=_elements(pl.col("shapes")) * _dtype_bytes(pl.col("dtype")))
            .group_by("node_name").agg(exec_bytes=pl.when(pl.col("b").is_null().any())
                                       .then(None).otherwise(pl.col("b").sum())))


def _with_inputs(run: Run, nodes: pl.DataFrame) -> pl.DataFrame:
    """`in_bytes`: per step, the bytes of the data inputs a node reads (each producer's
    output bytes per execution, from the graph's edges), x its executions: an optimizer
    update of 8x larger weights writes nothing but reads 8x more (a variable: the bytes
    of its parameters)."""
    edges = (run.graph_nodes.filter(pl.col("inputs").list.len() > 0)
             .unique("name", keep="first", maintain_order=True)
             .select("name", src="inputs").explode("src")
             .filter(~pl.col("src").str.starts_with("^"))
             .with_columns(src=pl.col("src").str.replace(r":\d+$", "")))
    if not edges.height:
        return nodes.with_columns(in_bytes=pl.lit(None, pl.Float64))
    # a variable read or updated in place: its parameters' bytes
    held = (run.graph_nodes.filter(pl.col("op").is_in(VARIABLE_OPS)
                                   & pl.col("shape").is_not_null())
            .unique("name", keep="first", maintain_order=True)
            .select(src="name", b=_elements(pl.col("shape")) * _dtype_bytes(pl.col("dtype"))))
    each = pl.concat([nodes.filter(pl.col("execs") > 0).select(
        src="name", b=pl.col("out_bytes") / pl.col("execs")), held]).unique("src", keep="last")
    if each["b"].is_null().all():  # no producer's size known: nothing to say of inputs
        return nodes.with_columns(in_bytes=pl.lit(None, pl.Float64))
    read = (edges.join(each, on="src").group_by("name")
            .agg(b=pl.col("b").sum()))  # a producer of unknown size (a resource) adds 0
    return (nodes.join(read, on="name", how="left")
            .with_columns(in_bytes=pl.col("b").fill_null(0.0) * pl.col("execs")).drop("b"))


def _hlo_outputs(run: Run) -> pl.DataFrame:
    """XSpace with HLO: one execution's output bytes, input bytes and float ops per
    framework op, from its instructions' work (the `hlo_work` frame's totals over the
    events attributed to them, per event)."""
    per = pl.col("execs").sum()
    return run.hlo_work.group_by("name").agg(
        **{f"exec_{c}": pl.when(pl.col(c).is_null().any()).then(None)
           .otherwise(pl.col(c).sum() / per) for c in ("out_bytes", "in_bytes", "float_ops")}
    ).rename({"name": "node_name"})


def _per_step(run: Run, timed: pl.DataFrame) -> pl.DataFrame:
    """(key, node_name, op_type, worker, step): executions and, where the source says,
    output bytes (and, from the HLO, input bytes and float ops) per step."""
    per_step = timed.group_by("key", "node_name", "op_type", "worker", "step").agg(
        execs=pl.len())
    if run.hlo_work.height:
        facts = ("out_bytes", "in_bytes", "float_ops")
        return (per_step.join(_hlo_outputs(run), on="node_name", how="left")
                .with_columns(**{c: pl.col(f"exec_{c}") * pl.col("execs") for c in facts})
                .drop(f"exec_{c}" for c in facts))
    recorded = _executed_outputs(run, timed)
    if recorded is not None:
        return per_step.join(recorded, on=["node_name", "worker", "step"], how="left")
    return (per_step.join(_graph_outputs(run), on="node_name", how="left")
            .with_columns(out_bytes=pl.col("exec_bytes") * pl.col("execs"))
            .drop("exec_bytes"))


def _median_per_step(per_step: pl.DataFrame) -> pl.DataFrame:
    """Per key: the median over steps of its executions and facts (null: a fact unknown
    for one of its nodes)."""
    facts = [c for c in ("out_bytes", "in_bytes", "float_ops") if c in per_step.columns]

    def known(c: str, how: pl.Expr) -> pl.Expr:
        return pl.when(pl.col(c).is_null().any()).then(None).otherwise(how)

    return (per_step.group_by("key", "worker", "step").agg(
        op_type=pl.col("op_type").first(), execs=pl.col("execs").sum(),
        **{c: known(c, pl.col(c).sum()) for c in facts})
        .group_by("key").agg(
        op_type=pl.col("op_type").first(), execs=pl.col("execs").median(),
        **{c: known(c, pl.col(c).median()) for c in facts})
        .rename({"key": "name"}))


def work_from_run(run: Run) -> pl.DataFrame:
    """One row per node timed in the run's steps (WORK_SCHEMA): its median executions,
    output bytes and float ops per step; plus the run's variables with their parameters."""
    timed = run.nodes.filter((pl.col("all_start_us") > 0)
                             & pl.col("lane_kind").is_in(TIMED_LANES)).with_columns(
        key=node_key(), op_type=op_key()).filter(
        ~pl.col("key").str.starts_with(UNATTRIBUTED + ":"))
    timed = folded(timed, "key")
    nodes = _median_per_step(_per_step(run, timed))
    if "in_bytes" not in nodes.columns:
        nodes = _with_inputs(run, nodes)
    flops = run.op_log.filter(pl.col("float_ops") > 0)
    if run.op_log.height and "float_ops" not in nodes.columns:
        nodes = (nodes.join(flops.group_by("name").agg(f=pl.col("float_ops").first()),
                            on="name", how="left")
                 .with_columns(float_ops=pl.col("f").fill_null(0) * pl.col("execs"))
                 .drop("f"))
    variables = (run.graph_nodes.filter(pl.col("op").is_in(VARIABLE_OPS)
                                        & pl.col("shape").is_not_null())
                 .unique("name", keep="first", maintain_order=True)
                 .select("name", op_type="op", params=_elements(pl.col("shape"))))
    out = pl.concat([nodes, variables], how="diagonal_relaxed")
    out = out.group_by("name").agg(
        op_type=pl.col("op_type").first(), execs=pl.col("execs").max().fill_null(0.0),
        **{c: (pl.col(c).max() if c in out.columns else pl.lit(None, pl.Float64))
           for c in FACTS})
    return out.select([pl.col(c).cast(t) for c, t in WORK_SCHEMA.items()]).sort("name")


def _members(work: pl.DataFrame, scope_depth: int) -> pl.DataFrame:
    """(kind, metric, node) for every metric a node counts toward: its scopes down to
    `scope_depth` (as analyzer.gate.compare's samples), its op type, and the step."""
    executed = work.filter(pl.col("execs") > 0)
    parts = pl.col("name").str.split("/")
    scopes = (work.filter(parts.list.len() > 1)
              .with_columns(level=pl.int_ranges(1, pl.min_horizontal(parts.list.len(),
                                                                     scope_depth + 1)))
              .explode("level")
              .select(kind=pl.lit("scope"), metric=pl.col("name").str.split("/")
                      .list.head(pl.col("level")).list.join("/"), node="name"))
    ops = executed.select(kind=pl.lit("op"), metric="op_type", node="name")
    step = pl.concat([work.select(kind=pl.lit("step"), metric=pl.lit(m), node="name")
                      for m in ("step time", "op time")])
    return pl.concat([scopes, ops, step])


DIFF_SCHEMA = {"kind": pl.String, "name": pl.String, "work_changed": pl.Boolean,
               "nodes_base": pl.Int64, "nodes_new": pl.Int64, "nodes_added": pl.Int64,
               "nodes_removed": pl.Int64, "nodes_retyped": pl.Int64,
               "nodes_resized": pl.Int64, "resized_ratio": pl.Float64,
               "out_bytes_base": pl.Float64, "out_bytes_new": pl.Float64,
               "in_bytes_base": pl.Float64, "in_bytes_new": pl.Float64,
               "float_ops_base": pl.Float64, "float_ops_new": pl.Float64,
               "params_base": pl.Float64, "params_new": pl.Float64,
               "execs_base": pl.Float64, "execs_new": pl.Float64}


def _differs(a: pl.Expr, b: pl.Expr) -> pl.Expr:
    return ((a - b).abs() > REL_TOL * pl.max_horizontal(a.abs(), b.abs())).fill_null(False)


def work_diff(base: pl.DataFrame | None, new: pl.DataFrame | None,
              scope_depth: int) -> pl.DataFrame:
    """Per metric (kind, name): the work of its nodes on both sides, what changed, and a
    short text of it (`work`); `work_changed` null when a side's work is not known."""
    if base is None or new is None or not base.height or not new.height:
        return pl.DataFrame(schema=DIFF_SCHEMA)  # a side whose work is not recorded
    known = {c: base[c].null_count() < base.height and new[c].null_count() < new.height
             for c in FACTS}
    pair = (base.join(new, on="name", how="full", coalesce=True, suffix="_new")
            .rename({c: f"{c}_base" for c in ("op_type", "execs", *FACTS)}))
    in_base = pl.col("execs_base").fill_null(0) > 0
    in_new = pl.col("execs_new").fill_null(0) > 0
    pair = pair.with_columns(
        op_type=pl.coalesce("op_type_new", "op_type_base"),
        added=in_new & ~in_base, removed=in_base & ~in_new,
        retyped=in_base & in_new & (pl.col("op_type_base") != pl.col("op_type_new")),
        resized=in_base & in_new & _differs(pl.col("out_bytes_base"), pl.col("out_bytes_new")),
        size_ratio=pl.col("out_bytes_new") / pl.col("out_bytes_base"))
    members = pl.concat([_members(pair.select(name="name", op_type=side, execs=ex), scope_depth)
                         for side, ex in (("op_type_base", "execs_base"),
                                          ("op_type_new", "execs_new"))]).unique()
    sums = {f"{c}_{s}": pl.col(f"{c}_{s}").sum() for c in (*FACTS, "execs")
            for s in ("base", "new")}
    out = (members.join(pair, left_on="node", right_on="name")
           .group_by("kind", "metric").agg(
               nodes_base=in_base.sum(), nodes_new=in_new.sum(),
               nodes_added=pl.col("added").sum(), nodes_removed=pl.col("removed").sum(),
               nodes_retyped=pl.col("retyped").sum(), nodes_resized=pl.col("resized").sum(),
               resized_ratio=pl.col("size_ratio").filter(pl.col("resized")).median(), **sums)
           .rename({"metric": "name"}))
    for c, k in known.items():
        if not k:
            out = out.with_columns(pl.lit(None, pl.Float64).alias(f"{c}_base"),
                                   pl.lit(None, pl.Float64).alias(f"{c}_new"))
    changed = ((pl.col("nodes_added") + pl.col("nodes_removed") + pl.col("nodes_retyped")
                + pl.col("nodes_resized")) > 0)
    for c in (*FACTS, "execs"):
        changed = changed | _differs(pl.col(f"{c}_base"), pl.col(f"{c}_new"))
    return out.with_columns(work_changed=changed).select(
        [pl.col(c).cast(t) for c, t in DIFF_SCHEMA.items()])


def _bytes(b: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if b >= size:
            return f"{b / size:.1f} {unit}"
    return f"{b:.0f} B"


def _times(a: float, b: float) -> str:
    return f"x{b / a:.2g}" if a > 0 else "from 0"


def work_note(r: dict) -> str:
    """What changed in a metric's work, in words: "float ops x3.7 (1,310,722 ->
    4,849,666); 4 nodes' outputs x4 (7.6 MB -> 27.3 MB); 2 new nodes", or "work
    unchanged (...)", or "work not recorded" (a side without work facts)."""
    if r.get("work_changed") is None:
        return "work not recorded"
    parts = []
    for key, label in (("nodes_added", "new node(s)"), ("nodes_removed", "node(s) gone"),
                       ("nodes_retyped", "node(s) of another op type")):
        if r.get(key):
            parts.append(f"{r[key]} {label}")
    fb, fn = r.get("float_ops_base"), r.get("float_ops_new")
    if fb is not None and fn is not None and fb != fn:
        parts.append(f"float ops {_times(fb, fn)} ({fb:,.0f} -> {fn:,.0f})")
    if r.get("nodes_resized"):
        ratio = r.get("resized_ratio")
        parts.append(f"{r['nodes_resized']} node(s)' outputs "
                     f"{'' if ratio is None else f'x{ratio:.2g} '}"
                     f"({_bytes(r['out_bytes_base'] or 0)} -> {_bytes(r['out_bytes_new'] or 0)}"
                     " in all)")
    ib, inn = r.get("in_bytes_base"), r.get("in_bytes_new")
    if ib is not None and inn is not None and ib != inn:
        parts.append(f"inputs read {_times(ib, inn)} ({_bytes(ib)} -> {_bytes(inn)})")
    pb, pn = r.get("params_base"), r.get("params_new")
    if pb is not None and pn is not None and pb != pn:
        parts.append(f"parameters {_times(pb, pn)} ({pb:,.0f} -> {pn:,.0f})")
    eb, en = r.get("execs_base"), r.get("execs_new")
    if eb is not None and en is not None and eb != en and not parts:
        parts.append(f"executions per step {eb:g} -> {en:g}")
    if parts:
        return "; ".join(parts)
    facts = [f for f, c in (("output bytes", "out_bytes_base"), ("input bytes", "in_bytes_base"),
                            ("float ops", "float_ops_base"), ("parameters", "params_base"))
             if r.get(c) is not None]
    return (f"work unchanged ({r.get('nodes_base', 0)} nodes, same op types"
            + "".join(f", {f}" for f in facts) + ")")
