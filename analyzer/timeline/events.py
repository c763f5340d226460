"""The timeline's executions: the run's node rows of the chosen steps as integer arrays,
each row's node "code" with what tf.timeline shows of it (its labels, as JSON fragments),
its outputs, and the op and step events.

What is the same for every execution of a node on a thread is computed once per distinct
node (a code) and gathered; per execution there are only integers (numpy)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from ..analysis.jaxscopes import FOLDED, fold_series
from ..grouping import (
    combine,
    dense,
    group_codes,
    int_codes,
    representatives,
    shared_codes,
)
from ..model import Run
from . import trace_events
from .jsonfrag import jescape
from .jsonrows import Lists, Texts
from .model import Part

OP_LANES = ["device", "other"]  # lane kinds that hold ops (not kernels or copies)
_GPU_LANE = r"/stream:|/memcpy"  # tf.timeline's _is_gputrace_device (case-sensitive)
_OP_LABEL = r"^(.*) = (.*)\((.*)\)"  # tf.timeline's _parse_op_label
_KERNEL_LABEL = r"^[^#]*?@@([^#]+)#"  # tf.timeline's _parse_kernel_label


def _labels(n: pl.LazyFrame) -> pl.LazyFrame:
    """Per distinct (stat_name, label, lane type, op_type): what tf.timeline shows (event
    name = op, args.name, inputs) and the static part of our args, as JSON fragments
    (trace_events.node_json).
    (One lazy query: a few hundred rows, where polars' cost is per query.)"""
    u = n.select("stat_name", "timeline_label", "gpu", "op_type").unique()
    kernel = pl.coalesce(pl.col("timeline_label").str.extract(_KERNEL_LABEL, 1),
                         pl.col("stat_name")).str.split(":")
    label = pl.col("timeline_label").str.extract_groups(_OP_LABEL)
    u = u.with_columns(
        tf_name=pl.when("gpu").then(kernel.list.first()).otherwise("stat_name"),
        tf_op=pl.when("gpu").then(kernel.list.get(1, null_on_oob=True))
        .when(pl.col("stat_name") == "RecvTensor").then(pl.lit("RecvTensor"))
        .otherwise(label.struct.field("2")),
        inputs=pl.when(~pl.col("gpu") & (pl.col("stat_name") != "RecvTensor"))
        .then(label.struct.field("3")).str.split(", ").list.eval(
            pl.element().filter(pl.element() != "")),
    ).with_columns(
        # tf.timeline says "unknown" when the label does not parse: we know better.
        op=pl.when(pl.col("tf_op").is_null() | (pl.col("tf_op") == "unknown"))
        .then("op_type").otherwise("tf_op"),
    ).with_columns(
        # JAX names fold into the user's scope (analyzer.jaxscopes): `block3/mlp` for the
        # forward and the backward op alike, the pass said apart; TF names are unchanged.
        folded=pl.col("tf_name").map_batches(fold_series, return_dtype=FOLDED),
    ).with_columns(
        scope=pl.col("folded").struct.field("scope").str.extract(r"^(.*)/[^/]*$", 1)
        .fill_null(""),
        jax_pass=pl.col("folded").struct.field("direction").fill_null(""),
    )
    return u.select("stat_name", "timeline_label", "gpu", "op_type", **trace_events.node_json())


# Nodes repeat every step: what is the same for every execution of a node on a thread
# (its labels, its track, its process, the static part of its JSON) is computed once per
# distinct (worker, lane, thread, stat name, label) -- a "code" -- and gathered by code.
# Per execution there are only integers, handled with numpy.

_CODE = ["worker", "lane", "thread_id", "stat_name", "timeline_label"]


@dataclass
class Executions:
    frame: pl.DataFrame  # the run's node rows of the chosen steps
    code: np.ndarray  # per row
    nodes: pl.DataFrame  # per code: the static columns, the labels' JSON fragments, gpu
    ts: np.ndarray
    dur: np.ndarray
    end: np.ndarray
    group: np.ndarray  # per row: a dense id of its (worker, step)



# The columns of the run's node rows that the timeline reads.
_COLUMNS = [*_CODE, "step", "exec_idx", "node_name", "op_type", "device", "lane_kind",
            "all_start_us", "all_end_rel_us", "start_ns", "op_end_rel_ns", "output_bytes"]


def executions(run: Run, steps: list[int] | None) -> Executions:
    lazy = run.nodes_lazy().select(_COLUMNS)
    if steps is not None:
        lazy = lazy.filter(pl.col("step").is_in(steps))
    n = lazy.collect()
    # worker, lane, thread_id, stat_name and timeline_label determine the other static
    # columns (analyzer/model.py derives device and lane_kind from the lane, node_name from
    # stat_name, op_type from the node name and label).
    code, k = group_codes(n, _CODE)
    reps = n[representatives(code, k)].lazy().select(
        *_CODE, "node_name", "op_type", "device", "lane_kind",
        gpu=pl.col("lane").str.contains(_GPU_LANE)).with_row_index("code")
    nodes = reps.join(_labels(reps), on=["stat_name", "timeline_label", "gpu", "op_type"],
                      how="left", nulls_equal=True, maintain_order="left").collect()
    ts = n["all_start_us"].to_numpy()
    dur = n["all_end_rel_us"].to_numpy()
    group, _ = group_codes(n, ["worker", "step"])
    return Executions(n, code, nodes, ts, dur, ts + dur, group)


def outputs(run: Run, steps: list[int] | None, ex: Executions) -> Lists:
    """Per execution: its outputs as a JSON list of "dtype[shape]" (by slot), as
    jsonrows.Lists: the dtype's text and the shape's dimensions of each output, in
    (execution, slot) order. A null dtype or shape renders as null, a null dimension is
    left out (as polars' list.join does)."""
    lazy = run.outputs.lazy().select("worker", "step", "exec_idx", "slot", "dtype", "shape")
    o = (lazy if steps is None else lazy.filter(pl.col("step").is_in(steps))).collect()
    n = ex.frame.height
    if not o.height:
        return Lists(np.zeros(n + 1, np.int64), np.zeros(0, np.int64), Texts([]),
                     np.zeros(1, np.int64), np.zeros(0, np.int64))
    o, row = _output_rows(o, ex)
    slot = o["slot"].cast(pl.Int64).fill_null(-1).to_numpy()
    if not ((row[1:] > row[:-1]) | ((row[1:] == row[:-1]) & (slot[1:] >= slot[:-1]))).all():
        order = np.lexsort((slot, row))
        o, row = o[order], row[order]
    dtype = o.get_column("dtype")
    code, k = dense(int_codes(dtype))
    texts = Texts(dtype.gather(representatives(code, k)).to_frame()
                  .select(jescape(pl.first())).to_series())
    shape = o.get_column("shape")
    length = shape.list.len().cast(pl.Int64).fill_null(-1).to_numpy()
    item = np.where((length < 0) | dtype.is_null().to_numpy(), -1, code)
    flat = shape.explode(empty_as_null=False, keep_nulls=False)  # nothing for [] or null
    known = np.concatenate([[0], np.cumsum(flat.is_not_null().to_numpy())])
    flat_first = np.concatenate([[0], np.cumsum(np.maximum(length, 0))])
    first = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(row, minlength=n), out=first[1:])
    return Lists(first, item, texts, known[flat_first],
                 flat.drop_nulls().cast(pl.Int64).to_numpy())


def _output_rows(o: pl.DataFrame, ex: Executions) -> tuple[pl.DataFrame, np.ndarray]:
    """The outputs that belong to an execution of `ex`, and the row of that execution.
    (worker, step, exec_idx) is unique in the nodes frame."""
    x_key, key_codes = _exec_keys(ex.frame, o)
    if (x_key[1:] > x_key[:-1]).all():  # the run's order: no sort needed
        row = np.minimum(np.searchsorted(x_key, key_codes), x_key.size - 1)
    else:
        order = np.argsort(x_key, kind="stable")
        row = order[np.minimum(np.searchsorted(x_key, key_codes, sorter=order),
                               x_key.size - 1)]
    ok = x_key[row] == key_codes
    if not ok.all():
        o, row = o.filter(pl.Series(ok)), row[ok]
    return o, row


def _exec_keys(x: pl.DataFrame, o: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """int64 keys of (worker, step, exec_idx) for the rows of x and of o, comparable."""
    wx, wo = x.get_column("worker"), o.get_column("worker")
    first = wx[0] if wx.len() else None
    one_worker = first is not None and not (wx.null_count() or wo.null_count()) and bool(
        (wx == first).all() and (wo == first).all())
    st = [np.asarray(f.get_column("step").to_numpy(), np.int64) for f in (x, o)]
    lo = min(int(v.min(initial=0)) for v in st)
    width = max(int(v.max(initial=0)) for v in st) - lo + 1
    if one_worker:
        ws = [si - lo for si in st]
    else:
        both = shared_codes(wx, wo)  # comparable codes across the two frames
        w = [both[:wx.len()], both[wx.len():]]
        if max(int(v.max(initial=0)) for v in w) * width + width < 1 << 30:
            ws = [(wi + 1) * width + (si - lo) for wi, si in zip(w, st, strict=True)]
        else:
            both, _ = combine([np.concatenate(w), np.concatenate(st)])
            ws = [both[:x.height], both[x.height:]]
    return tuple(  # type: ignore[return-value]
        wsi * (1 << 32) + np.asarray(f.get_column("exec_idx").to_numpy(), np.int64)
        for wsi, f in zip(ws, (x, o), strict=True))


def op_part(ex: Executions, nodes: pl.DataFrame, tid: np.ndarray, outputs: Lists) -> Part:
    """The op events: per row, its node (code), thread, output bytes, step and times."""
    frame = pl.DataFrame({"code": ex.code, "tid": tid, "bytes": ex.frame["output_bytes"],
                          "step": ex.frame["step"], "ts": ex.ts, "dur": ex.dur})
    return Part("op", trace_events.op_rows(nodes, frame, outputs))


def step_rows(ex: Executions) -> pl.DataFrame:
    groups = int(ex.group.max(initial=-1)) + 1
    ts = np.full(groups, np.iinfo(np.int64).max)
    np.minimum.at(ts, ex.group, ex.ts)
    end = np.full(groups, np.iinfo(np.int64).min)
    np.maximum.at(end, ex.group, ex.end)
    return (
        ex.frame[representatives(ex.group, groups)].select("worker", "step")
        .with_columns(ts=pl.Series(ts), end=pl.Series(end),
                      node_stats=pl.Series(np.bincount(ex.group, minlength=groups),
                                           dtype=pl.UInt32))
        .with_columns(dur=pl.col("end") - pl.col("ts"), pid=pl.lit(0, pl.Int64))
        .sort("worker", "step")
    )


def timed_steps(rows: pl.DataFrame, times: pl.DataFrame) -> pl.DataFrame:
    """step_rows with each step's span as analysis.steps gives it (`times`: step_times),
    so the Steps slice is the step time summary and advise print (an XSpace step marker's
    span, not its executions'); whole microseconds, as the op events."""
    spans = times.select("worker", "step", start_us=pl.col("start_ns") // 1000,
                         end_us=pl.col("end_ns") // 1000)
    return (rows.join(spans, on=["worker", "step"], how="left", maintain_order="left")
            .with_columns(ts=pl.coalesce("start_us", "ts"), end=pl.coalesce("end_us", "end"))
            .with_columns(dur=pl.col("end") - pl.col("ts"))
            .drop("start_us", "end_us"))


def on_lanes(ex: Executions, kinds: list[str], *columns: np.ndarray) -> list[np.ndarray]:
    """The rows of executions on lanes of `kinds`, their codes, and `columns` at those rows
    (the columns themselves when every row is on such a lane, as in most runs)."""
    on = ex.nodes["lane_kind"].is_in(kinds).to_numpy()
    if on.all():
        return [np.arange(ex.code.size), ex.code, *columns]
    rows = np.flatnonzero(on[ex.code])
    return [rows, ex.code[rows], *(c[rows] for c in columns)]
