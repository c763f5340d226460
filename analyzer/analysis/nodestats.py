"""Per graph node numbers for one step (or the average over steps), with tfprof's rules.

Every view aggregates these. The rules (docs/tfprof-semantics.md, verified node by node
against tfprof in tests/test_parity.py):

- An execution counts when all_start_micros > 0; its time is op_end_rel_micros, with 0
  rounded up to 1us. XSpace profiles follow xprof's rules instead (`exact_times`: their
  `timing` frame): the time is op_end_rel_ns / 1000 unrounded, averages divide truly,
  and an op that ran on accelerator streams only counts its device events as runs.
  CPU time sums the device's own (canonical) lane, and so does the run count;
  accelerator time sums `/stream:all`; per-stream, memcpy and other lanes count toward
  neither.
- A node belongs to the first canonical device it runs on; executions on another
  canonical device are ignored, and memory counts only on the canonical device lane.
- requested = sum(memory.total_bytes) + temp + persistent; peak = sum(memory.peak_bytes)
  + temp + persistent; residual = sum(memory.live_bytes) + persistent; output = sum over
  outputs of max(allocated, requested).
- step -1: for each node and each metric on its own (micros too), the sum over the steps
  it appeared in, integer-divided by their count.
- float_ops = op_log float_ops x run count (static float_ops if the node never ran);
  params = product of the node's `shape` attr when fully known.
"""

from __future__ import annotations

import polars as pl

from .. import products
from ..model import Run
from .outside import outside

METRICS = ["micros", "cpu_micros", "accelerator_micros", "requested_bytes", "peak_bytes",
           "residual_bytes", "output_bytes", "occurrence"]
TIME_METRICS = ("micros", "cpu_micros", "accelerator_micros")


def exact_times(run: Run) -> bool:
    """Whether the run's op times follow xprof's rules, not tfprof's (its `timing` frame:
    an XSpace profile): each execution's nanoseconds summed as they are (Float64 micros),
    never rounded to a whole microsecond with 0 counted as 1 (docs/xplane.md "Times")."""
    rules = run.timing.get_column("rules")
    return len(rules) > 0 and bool((rules == "xprof").all())


def execution_us(exact: bool) -> pl.Expr:
    """An execution's time as the views count it, in microseconds: xprof's rules
    (`exact`) its nanoseconds as they are; tfprof's its whole microseconds, 0 as 1. The
    one expression of it: the views, and compare's per-step samples (gate/samples.py)."""
    if exact:
        return pl.col("op_end_rel_ns") / 1000.0
    return pl.when(pl.col("op_end_rel_us") == 0).then(1).otherwise(pl.col("op_end_rel_us"))


def _per_node(run: Run, step: int, average: str = "node") -> pl.DataFrame:
    """One row per (worker, node_name) that has executions: the tfprof metrics for `step`
    (-1: average), `steps_run` (0 when no counted execution) and `exec_op`.

    What depends on strings (the node, the lane kind, the device) is decided per key, a
    few thousand rows; the executions only gather small integers and flags by key_id, and
    everything is summed in one group-by on the node's number. The sum over steps of
    per-step sums is the sum over executions, so the average is that sum integer-divided
    by the number of steps the node ran in (`average` "node"), or by the number of steps
    of its worker (`average` "steps": runlens's views, docs/views.md). Work outside the
    steps (analysis.outside: before or between step markers) counts in no step.
    """
    nodes, per_key, per_node = _keys_of_nodes(run)
    flags = _key_flags(per_key)
    key_id = run.executions.get_column("key_id")
    ex = run.executions.lazy().with_columns(flags.select(pl.all().gather(key_id)).get_columns())
    keep = _COUNTED & ~pl.col("dropped")
    if step >= 0:
        keep = keep & (pl.col("step") == step)
    away = outside(run)
    if away.any():
        ex = ex.with_columns(away.alias("outside"))
        keep = keep & ~pl.col("outside")
    exact = exact_times(run)
    # Summed per node over the executions (exact times as integer nanoseconds: their sum
    # does not depend on the order or chunking of the rows, so a host's node gives the
    # same bits read alone or in the whole run), then divided on the few thousand nodes.
    sums = _masked(ex, keep, exact).group_by("node_id").agg(
        *[pl.col(c).sum() for c in METRICS],
        steps_run=pl.col("step_run").drop_nulls().n_unique(),
    ).collect()
    per_name = "steps_run"
    if average == "steps" and step < 0:  # every node by its worker's steps
        workers = (run.nodes_lazy().group_by("worker").agg(n_steps=pl.col("step").n_unique())
                   .collect())
        per_id = nodes.with_row_index("node_id").join(workers, on="worker").select(
            pl.col("node_id").cast(sums.schema["node_id"]), "n_steps")
        sums = sums.join(per_id, on="node_id", how="left")
        per_name = "n_steps"
    times = []
    if exact:  # ns / (1000 x steps): one correctly rounded division of two Series; an
        # expression's divisor that polars holds as one broadcast value (a host of one
        # worker) is divided as a product by its reciprocal, 1 ulp off the Run's bits
        divisor = sums.get_column(per_name).cast(pl.Float64) * 1000.0
        times = [sums.get_column(c).cast(pl.Float64) / divisor for c in TIME_METRICS]
    per = pl.col(per_name)
    sums = sums.select(
        "node_id",
        *[(pl.col(c) // per).cast(pl.Int64) for c in METRICS
          if not (exact and c in TIME_METRICS)],
        steps_run=pl.col("steps_run").cast(pl.UInt32),
    ).with_columns(times)
    return (
        nodes.with_row_index("node_id")
        .join(per_node, on="node_id", how="left")
        .join(sums, on="node_id", how="left")
        .select("worker", "node_name", *METRICS, device="canonical", steps_run="steps_run",
                exec_op="exec_op", kernel="kernel", fused_ops="fused_ops")
    )


# An execution counts when it has a start (tfprof's rule: all_start_micros > 0).
_COUNTED = pl.col("all_start_us") > 0
_ON_DEVICE = pl.col("lane_kind") == "device"


def _keys_of_nodes(run: Run) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(the distinct nodes; each key with its node's number, first execution and first
    counted execution; per node: its canonical device, exec_op, kernel, fused ops).
    exec_op is the op type of a node's first execution, and a node belongs to the first
    canonical device it runs on (tfprof)."""
    keys = run.keys
    nodes = keys.select("worker", "node_name").unique(maintain_order=True)
    key_node = keys.join(nodes.with_row_index("node_id"), on=["worker", "node_name"],
                         how="left", maintain_order="left").get_column("node_id")
    order = pl.col("step") * (1 << 32) + pl.col("exec_idx").cast(pl.Int64)
    firsts = (
        run.executions.lazy().with_row_index("row").group_by("key_id")
        .agg(first_row=pl.col("row").min(), first_counted=order.filter(_COUNTED).min())
        .collect()
    )
    per_key = (
        keys.with_row_index("key_id").with_columns(node_id=key_node)
        .join(firsts, on="key_id", how="left")
    )
    ran_on_device = _ON_DEVICE & pl.col("first_counted").is_not_null()
    per_node = per_key.group_by("node_id").agg(
        canonical=pl.col("device").filter(ran_on_device)
        .sort_by(pl.col("first_counted").filter(ran_on_device)).first(),
        exec_op=pl.col("op_type").sort_by("first_row").first(),
        kernel=pl.col("kernel").sort_by("first_row").first(),
        fused_ops=pl.col("fused_ops").sort_by("first_row").first(),
    )
    per_key = per_key.join(per_node, on="node_id", how="left").sort("key_id")
    return nodes, per_key, per_node


def _key_flags(per_key: pl.DataFrame) -> pl.DataFrame:
    """Per key (in key_id order): its node and on which lanes its executions count."""
    canonical = pl.col("canonical")
    return per_key.select(
        node_id=pl.col("node_id"),
        cpu=_ON_DEVICE,
        accel=pl.col("lane_kind") == "stream_all",
        # Executions on a second canonical device are dropped, as tfprof does.
        dropped=_ON_DEVICE & canonical.is_not_null() & (pl.col("device") != canonical),
        on_canonical=(_ON_DEVICE & (pl.col("device") == canonical)).fill_null(False),
        device_only=canonical.is_null(),  # ran on accelerator streams only (a JAX kernel)
    )


def _masked(ex: pl.LazyFrame, keep: pl.Expr, exact: bool) -> pl.LazyFrame:
    """Each execution's contribution to each metric (0 where it does not count)."""
    us = pl.col("op_end_rel_ns") if exact else execution_us(exact)  # exact: ns (sums)
    cpu_lane, accel_lane, on_canonical = pl.col("cpu"), pl.col("accel"), pl.col("on_canonical")

    def where(mask: pl.Expr, value: pl.Expr) -> pl.Expr:
        return pl.when(keep & mask).then(value).otherwise(0)

    return ex.select(
        "node_id",
        step_run=pl.when(keep).then(pl.col("step")),
        cpu_micros=where(cpu_lane, us),
        accelerator_micros=where(accel_lane, us),
        micros=where(cpu_lane | accel_lane, us),
        # Runs: on the canonical lane (tfprof); under xprof's rules also an accelerator-only
        # op's device events, as xprof's HLO op stats count them.
        occurrence=where(cpu_lane | (accel_lane & pl.col("device_only") & exact),
                         pl.lit(1, pl.Int64)),
        requested_bytes=where(on_canonical, pl.col("mem_total_bytes") + pl.col("temp_bytes")
                              + pl.col("persistent_bytes")),
        peak_bytes=where(on_canonical, pl.col("mem_peak_bytes") + pl.col("temp_bytes")
                         + pl.col("persistent_bytes")),
        residual_bytes=where(on_canonical, pl.col("mem_live_bytes")
                             + pl.col("persistent_bytes")),
        output_bytes=where(on_canonical, pl.col("output_bytes")),
    )


def executed_stats(run: Run, step: int = -1) -> pl.DataFrame:
    """One row per executed (worker, node_name): the tfprof metrics for `step` (-1: average)."""
    return _executed(_per_node(run, step))


def _executed(per_node: pl.DataFrame) -> pl.DataFrame:
    return per_node.filter(pl.col("steps_run") > 0).drop("exec_op", "kernel", "fused_ops")


def _params(shape: pl.Expr) -> pl.Expr:
    """Product of a shape's dims; 0 when the node has no shape attr or a dim is unknown."""
    known = shape.list.eval(pl.element() >= 0).list.all()
    product = shape.list.eval(pl.element().product()).list.first().fill_null(1)
    return pl.when(shape.is_null() | ~known).then(0).otherwise(product).cast(pl.Int64)


def node_stats(run: Run, step: int = -1, average: str = "node") -> pl.DataFrame:
    """Every node tfprof knows (graph.pb nodes and executed nodes), with its metrics.

    Columns: worker, name, op_type (the graph's, as tfprof), kernel and fused_ops (what
    ran: analyzer.model.derive_keys), types (op type, op_log types, canonical device),
    device, micros ... occurrence (METRICS), params, float_ops, executed.
    Step -1 averages over steps: tfprof's way (`average` "node": each node over the steps
    it ran in) or runlens's views' (`average` "steps": over the steps analysed, per
    worker, so that per-step numbers add up to a step).
    A product (analyzer.products): computed once per Run, step and average, and cached, so
    a warm analysis never aggregates the executions again.
    """
    # tfprof's averaging keeps its cache key as it was (step only).
    return NODE_STATS(run, step) if average == "node" else NODE_STATS(run, step, average)


def _node_stats(run: Run, step: int, average: str = "node") -> pl.DataFrame:
    per_node = _per_node(run, step, average)
    executed = _executed(per_node)
    graph = (
        run.graph_nodes.filter(pl.col("source") == "graph")
        .unique(subset=["worker", "name"], keep="first", maintain_order=True)
        .select("worker", "name", graph_op="op", params=_params(pl.col("shape")))
    )
    exec_types = per_node.select("worker", "kernel", "fused_ops", name="node_name",
                                 exec_op="exec_op")
    ex = executed.rename({"node_name": "name"})
    nodes = (
        graph.join(ex, on=["worker", "name"], how="full", coalesce=True)
        .join(exec_types, on=["worker", "name"], how="left")
        .join(run.op_log.rename({"float_ops": "static_float_ops", "types": "log_types"}),
              on=["worker", "name"], how="left")
    )
    metric_fill = [pl.col(c).fill_null(0) for c in METRICS if c in nodes.columns]
    nodes = nodes.with_columns(
        *metric_fill,
        op_type=pl.coalesce("graph_op", "exec_op", pl.lit("unknown")),
        params=pl.col("params").fill_null(0),
        executed=pl.col("steps_run").is_not_null(),
    )
    float_ops = pl.col("static_float_ops").fill_null(0)
    nodes = nodes.with_columns(kernel=pl.coalesce("kernel", "op_type"))
    return nodes.with_columns(
        float_ops=pl.when(pl.col("executed")).then(float_ops * pl.col("occurrence"))
        .otherwise(float_ops),
        types=pl.concat_list(
            pl.col("op_type"),
            pl.col("log_types").fill_null(pl.lit([], dtype=pl.List(pl.String))),
            pl.col("device").fill_null(""),
        ).list.eval(pl.element().filter(pl.element() != "")),
    ).select(
        "worker", "name", "op_type", "kernel", "fused_ops", "types", "device", *METRICS,
        "params", "float_ops", "executed",
    ).sort("worker", "name")


NODE_STATS = products.register("node_stats", _node_stats)
