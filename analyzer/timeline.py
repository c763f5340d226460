"""Chrome Trace (Trace Event Format) of traced steps, built from the Run frames.

What `analyze timeline` writes (docs/timeline.md): a process per (worker, device) with a
thread per real thread_id (op lanes) or GPU stream, each op execution a complete event
drawn exactly as tf.timeline draws it (ts = all_start_micros, dur = all_end_rel_micros,
name = the op of its timeline label); a "Steps" process with a slice per step; dataflow
arrows; per-allocator memory counters; each step's critical path on a thread of its own.

Everything is computed over all executions at once: what is the same for every execution
of a node on a thread is computed once per distinct node (a "code", see _executions) and
gathered; the per-execution work is integer arrays (numpy): lanes, flow matching,
critical paths. Each event becomes one row of integer columns, and each kind of event a
line of literals, integers and indexed texts that renders a row as one JSON object
(`Part`, analyzer/jsonrows.py). The outputs, the flows and the memory counters are built
in a second thread; analyzer/render/chrome_trace.py streams the parts to a file, the op
events first, while the last parts may still be building.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from analyzer import jsonrows
from analyzer import timeline_lanes as lanes
from analyzer.errors import RunlensError
from analyzer.graph import asof_last, edges, path_rows
from analyzer.jsonfrag import jescape, jlist, jstr
from analyzer.jsonrows import Int, Line, Lists, Rows, Text, Texts
from analyzer.model import Run
from analyzer.steps import median_step
from analyzer.stepselect import StepChoice, analysed

SCHEMA = 1
OP_LANES = ["device", "other"]  # lane kinds that hold ops (not kernels or copies)
CRITICAL_LANES = ["device", "other", "stream_all"]  # as analyzer/graph.py
_GPU_LANE = r"/stream:|/memcpy"  # tf.timeline's _is_gputrace_device (case-sensitive)
_OP_LABEL = r"^(.*) = (.*)\((.*)\)"  # tf.timeline's _parse_op_label
_KERNEL_LABEL = r"^[^#]*?@@([^#]+)#"  # tf.timeline's _parse_kernel_label


@dataclass(frozen=True)
class TimelineOptions:
    steps: tuple[int, ...]
    dataflow: bool = True
    memory: bool = True
    critical_path: bool = True
    max_counter_points: int = 2000  # per allocator per step


class Part:
    """Events of one kind: rows of a frame rendered as a JSON line each (jsonrows.Rows), or
    the future of them, still being built in a second thread."""

    def __init__(self, kind: str, rows: Rows | Future[Any],
                 make: Callable[[Any], Rows] | None = None) -> None:
        self.kind = kind
        self._rows = rows
        self._make = make  # the future's result -> rows

    @property
    def ready(self) -> bool:
        return not isinstance(self._rows, Future) or self._rows.done()

    @property
    def rows(self) -> Rows:
        if isinstance(self._rows, Future):
            result = self._rows.result()
            self._rows = self._make(result) if self._make else result
        assert isinstance(self._rows, Rows)
        return self._rows

    @property
    def frame(self) -> pl.DataFrame:
        return self.rows.frame


@dataclass
class Trace:
    metadata: list[dict[str, Any]]  # process / thread names and sort order ("ph": "M")
    parts: list[Part]
    other: dict[str, Any] = field(default_factory=dict)

    @property
    def events(self) -> int:
        return len(self.metadata) + sum(p.frame.height for p in self.parts)


# ----------------------------------------------------------------------------- steps


def parse_step_range(text: str) -> tuple[int | None, int | None]:
    """'A:B' (inclusive, either end may be left out) -> (A, B)."""
    lo, sep, hi = text.partition(":")
    try:
        if not sep:
            raise ValueError
        bounds = (int(lo) if lo.strip() else None, int(hi) if hi.strip() else None)
    except ValueError:
        raise RunlensError(f"--steps {text!r}: expected A:B (global steps, inclusive), "
                           "e.g. 10:20, 10: or :20") from None
    if bounds[0] is not None and bounds[1] is not None and bounds[0] > bounds[1]:
        raise RunlensError(f"--steps {text}: the first step is after the last")
    return bounds


def _short(values: list[int]) -> str:
    text = ", ".join(map(str, values[:12]))
    return text + (f", ... ({len(values)} in all)" if len(values) > 12 else "")


def select_steps(run: Run, step: int | None = None, step_range: str | None = None,
                 all_steps: bool = False, default_all: bool = False,
                 choice: StepChoice | None = None) -> tuple[list[int], str]:
    """The steps to draw and a note saying how they were chosen.

    At most one of step / step_range / all_steps; none: the median-time step of the steps
    `choice` keeps (warm-up and outliers left out: analyzer.stepselect), or every step
    when `default_all`, as for one file per step."""
    if sum([step is not None, step_range is not None, all_steps]) > 1:
        raise RunlensError("give only one of --step, --steps and --all-steps")
    traced = run.steps
    where = ", ".join(map(str, run.paths)) or "run"
    if step is not None:
        if step not in traced:
            raise RunlensError(f"{where}: step {step} was not traced "
                               f"(traced steps: {_short(traced)})")
        return [step], f"step {step}"
    if step_range is not None:
        lo, hi = parse_step_range(step_range)
        chosen = [s for s in traced if (lo is None or s >= lo) and (hi is None or s <= hi)]
        if not chosen:
            raise RunlensError(f"{where}: --steps {step_range}: no traced step in that range "
                               f"(traced steps: {_short(traced)})")
        return chosen, f"{len(chosen)} steps ({chosen[0]}..{chosen[-1]})"
    if all_steps or default_all:
        return traced, f"all {len(traced)} steps"
    s = median_step(analysed(run, choice))
    return [s], f"step {s} (median step time)"


# ----------------------------------------------------------------------------- ops


def _labels(n: pl.LazyFrame) -> pl.LazyFrame:
    """Per distinct (stat_name, label, lane type, op_type): what tf.timeline shows (event
    name = op, args.name, inputs) and the static part of our args, as JSON fragments.
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
        scope=pl.col("tf_name").str.extract(r"^(.*)/[^/]*$", 1).fill_null(""),
    )
    graph_op = pl.when(pl.col("op") != pl.col("op_type")).then(
        pl.concat_str(pl.lit(',"graph_op":'), jstr(pl.col("op_type")))).otherwise(pl.lit(""))
    return u.select(
        "stat_name", "timeline_label", "gpu", "op_type",
        op_json=jstr(pl.col("op")), name_json=jstr(pl.col("tf_name")),
        sargs=pl.concat_str(
            pl.lit('"name":'), jstr(pl.col("tf_name")), pl.lit(',"op":'), jstr(pl.col("op")),
            pl.lit(',"scope":'), jstr(pl.col("scope")), pl.lit(',"inputs":'),
            jlist(pl.col("inputs")), graph_op,
        ),
    )


# ----------------------------------------------------------------------------- codes
# Nodes repeat every step: what is the same for every execution of a node on a thread
# (its labels, its track, its process, the static part of its JSON) is computed once per
# distinct (worker, lane, thread, stat name, label) -- a "code" -- and gathered by code.
# Per execution there are only integers, handled with numpy.

_CODE = ["worker", "lane", "thread_id", "stat_name", "timeline_label"]


def _dense(key: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense ids 0..k-1 for the distinct values of an int64 array (in value order), k."""
    if not key.size:
        return key.astype(np.int64), 0
    lo, hi = int(key.min()), int(key.max())
    if hi - lo < 4 * key.size + 4096:
        present = np.zeros(hi - lo + 1, bool)
        present[key - lo] = True
        ids = np.cumsum(present) - 1
        return ids[key - lo], int(ids[-1]) + 1
    values, inverse = np.unique(key, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64), int(values.size)


def group_codes(frame: pl.DataFrame, cols: list[str]) -> tuple[np.ndarray, int]:
    """A dense code per row for the distinct values of `cols` (exact: strings are numbered
    through polars categoricals; null is a value of its own), and the number of codes."""
    return _combine([_int_codes(frame.get_column(c), local=True) for c in cols], frame.height)


def _combine(columns: list[np.ndarray], n: int | None = None) -> tuple[np.ndarray, int]:
    """A dense code per row for the distinct rows of integer columns, and their number."""
    key, size = np.zeros(columns[0].size if n is None else n, np.int64), 1
    for values in columns:
        lo = int(values.min(initial=0))
        width = int(values.max(initial=0)) - lo + 1
        if width == 1:
            continue
        if size * width >= 1 << 62:  # too wide for one int64: number what there is so far
            key, size = _dense(key)
            if size * width >= 1 << 62:
                values, width = _dense(values)
                lo = 0
        key, size = key * width + (values - lo), size * width
    return _dense(key)


def _shared_codes(*columns: pl.Series) -> np.ndarray:
    """Int64 codes of the values of several columns, one after the other, comparable
    across them (a categorical's codes are only comparable within one cast in polars 2)."""
    return _int_codes(pl.concat([c.cast(pl.String) if c.dtype == pl.Categorical else c
                                 for c in columns]))


def _int_codes(s: pl.Series, local: bool = False) -> np.ndarray:
    """A column as int64: strings by their categorical codes (comparable within the
    column only), null as -1. `local`: a column of one value (the worker, nearly always)
    may be all zeros, without numbering.

    Series operations: an eager DataFrame.select on the run's wide frames costs ~5 ms
    before it does anything (polars 2.1)."""
    if local and s.len() and s.dtype == pl.String and not s.null_count() and (s == s[0]).all():
        return np.zeros(s.len(), np.int64)
    if s.dtype == pl.String:
        s = s.cast(pl.Categorical).to_physical()
    if s.null_count():
        s = s.cast(pl.Int64).fill_null(-1)
    return np.asarray(s.to_numpy(), np.int64)


def _representatives(code: np.ndarray, k: int) -> np.ndarray:
    """A row of each code (all rows of a code hold the same key)."""
    rep = np.zeros(k, np.int64)
    rep[code] = np.arange(code.size)
    return rep


@dataclass
class _Executions:
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


def _executions(run: Run, steps: list[int] | None) -> _Executions:
    lazy = run.nodes_lazy().select(_COLUMNS)
    if steps is not None:
        lazy = lazy.filter(pl.col("step").is_in(steps))
    n = lazy.collect()
    # worker, lane, thread_id, stat_name and timeline_label determine the other static
    # columns (analyzer/model.py derives device and lane_kind from the lane, node_name from
    # stat_name, op_type from the node name and label).
    code, k = group_codes(n, _CODE)
    reps = n[_representatives(code, k)].lazy().select(
        *_CODE, "node_name", "op_type", "device", "lane_kind",
        gpu=pl.col("lane").str.contains(_GPU_LANE)).with_row_index("code")
    nodes = reps.join(_labels(reps), on=["stat_name", "timeline_label", "gpu", "op_type"],
                      how="left", nulls_equal=True, maintain_order="left").collect()
    ts = n["all_start_us"].to_numpy()
    dur = n["all_end_rel_us"].to_numpy()
    group, _ = group_codes(n, ["worker", "step"])
    return _Executions(n, code, nodes, ts, dur, ts + dur, group)


Outputs = Lists | tuple[np.ndarray, pl.Series]


def _outputs(run: Run, steps: list[int] | None, ex: _Executions) -> Outputs:
    """Per execution: its outputs as a JSON list of "dtype[shape]" (by slot). With the C
    renderer, the lists themselves (jsonrows.Lists); without, an index per execution into
    a series of distinct texts (and that series)."""
    lazy = run.outputs.lazy().select("worker", "step", "exec_idx", "slot", "dtype", "shape")
    o = (lazy if steps is None else lazy.filter(pl.col("step").is_in(steps))).collect()
    if jsonrows.native is not None:
        return _output_lists(o, ex)
    out = np.zeros(ex.frame.height, np.int64)  # index into `texts`; 0: "[]"
    texts = pl.Series(["[]"], dtype=pl.String)
    if not o.height:
        return out, texts
    o, row = _output_rows(o, ex)
    # Outputs repeat with their node: group them by (node code, slot), then check that each
    # output has its group's dtype and shape; the ones that differ get groups of their own.
    slot = o["slot"].cast(pl.Int64).fill_null(-1).to_numpy()
    group, k = _dense(ex.code[row] * (int(slot.max()) + 2) + slot + 1)
    rep = _representatives(group, k)
    same = _same_outputs(o, rep[group])
    if not same.all():
        odd = np.flatnonzero(~same)
        group[odd] = k + np.arange(odd.size)
        k += odd.size
        rep = _representatives(group, k)
    desc = o[rep].select(jstr(pl.concat_str(
        pl.col("dtype"), pl.lit("["),
        pl.col("shape").cast(pl.List(pl.String)).list.join(","), pl.lit("]")))).to_series()
    listed = pl.select(pl.concat_str(pl.lit("["), pl.lit(desc), pl.lit("]"))).to_series()
    count = np.bincount(row, minlength=ex.frame.height)
    one = count[row] == 1
    # Most executions have one output: "[desc]" by group; the others join theirs.
    texts = pl.concat([texts, listed])
    out[row[one]] = 1 + group[one]
    many = np.flatnonzero(~one)
    if many.size:
        joined = (
            pl.DataFrame({"row": row[many], "slot": slot[many],
                          "desc": desc.gather(group[many])})
            .group_by("row").agg(text=pl.concat_str(
                pl.lit("["), pl.col("desc").sort_by("slot").str.join(","), pl.lit("]"))))
        out[joined["row"].to_numpy()] = texts.len() + np.arange(joined.height)
        texts = pl.concat([texts, joined["text"]])
    return out, texts


def _output_rows(o: pl.DataFrame, ex: _Executions) -> tuple[pl.DataFrame, np.ndarray]:
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


def _output_lists(o: pl.DataFrame, ex: _Executions) -> Lists:
    """The outputs of each execution for the C renderer: the dtype's text and the shape's
    dimensions of each output, in (execution, slot) order. A null dtype or shape renders
    as null, a null dimension is left out (as polars' list.join does)."""
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
    code, k = _dense(_int_codes(dtype))
    texts = Texts(dtype.gather(_representatives(code, k)).to_frame()
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


def _same_outputs(o: pl.DataFrame, other: np.ndarray) -> np.ndarray:
    """Whether each output has the dtype and shape of output `other[i]` (numpy on the
    dtype codes and the flattened shapes; a null shape or dimension is a value too)."""
    dtype = _int_codes(o.get_column("dtype"))
    same = dtype == dtype[other]
    shape = o.get_column("shape")
    length = shape.list.len().cast(pl.Int64).fill_null(-1).to_numpy()
    same &= length == length[other]
    size = np.maximum(length, 0)
    if not size.any():
        return same
    # The dimensions only: nothing for an empty or null shape.
    flat = shape.explode(empty_as_null=False, keep_nulls=False).fill_null(-(1 << 62)).to_numpy()
    first = np.cumsum(size) - size
    # Each dimension against the same one of `other` (itself when the lengths differ).
    delta = np.where(same, first[other] - first, 0)
    differ = flat != flat[np.arange(flat.size) + np.repeat(delta, size)]
    seen = np.concatenate([[0], np.cumsum(differ)])
    return same & (seen[first + size] == seen[first])


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
        both = _shared_codes(wx, wo)  # comparable codes across the two frames
        w = [both[:wx.len()], both[wx.len():]]
        if max(int(v.max(initial=0)) for v in w) * width + width < 1 << 30:
            ws = [(wi + 1) * width + (si - lo) for wi, si in zip(w, st, strict=True)]
        else:
            both, _ = _combine([np.concatenate(w), np.concatenate(st)])
            ws = [both[:x.height], both[x.height:]]
    return tuple(  # type: ignore[return-value]
        wsi * (1 << 32) + np.asarray(f.get_column("exec_idx").to_numpy(), np.int64)
        for wsi, f in zip(ws, (x, o), strict=True))


def _op_part(ex: _Executions, nodes: pl.DataFrame, tid: np.ndarray, outputs: Outputs
             ) -> Part:
    """The op events: per row, the texts of its node (code) and outputs and its numbers."""
    if not isinstance(outputs, Lists):
        return _op_part_polars(ex, nodes, tid, outputs)
    head = Texts(nodes.select(pl.concat_str(
        pl.lit('{"ph":"X","cat":"Op","name":'), "op_json", pl.lit(',"pid":'), "pid",
        pl.lit(',"tid":'))).to_series())
    args = Texts(nodes.select(pl.concat_str(
        pl.lit(',"args":{'), "sargs", pl.lit(',"outputs":'))).to_series())
    frame = pl.DataFrame({"code": ex.code, "tid": tid, "bytes": ex.frame["output_bytes"],
                          "step": ex.frame["step"], "ts": ex.ts, "dur": ex.dur})
    line: Line = [Text("code", head), Int("tid"), Text("code", args),
                  outputs, ',"bytes":', Int("bytes"), ',"step":', Int("step"),
                  '},"ts":', Int("ts"), ',"dur":', Int("dur"), "}"]
    return Part("op", Rows(frame, line))


def _op_part_polars(ex: _Executions, nodes: pl.DataFrame, tid: np.ndarray,
                    outputs: tuple[np.ndarray, pl.Series]) -> Part:
    """The op events for polars to render (no C renderer): everything but the step, ts
    and dur is the same for the executions of a node on one thread with the same outputs
    and bytes, so that text is made once per such combination and gathered; a row only
    formats its step, ts and dur (int to text is most of polars' rendering)."""
    out, texts = outputs
    size = np.asarray(ex.frame["output_bytes"].cast(pl.Int64).fill_null(-1).to_numpy())
    combo, k = _combine([ex.code, tid, out])
    rep = _representatives(combo, k)
    odd = np.flatnonzero(size != size[rep[combo]])  # bytes that differ from the node's
    if odd.size:
        extra, more = _combine([combo[odd], size[odd]])
        combo[odd] = k + extra
        k += more
        rep = _representatives(combo, k)
    static = pl.DataFrame({
        "op_json": nodes["op_json"].gather(ex.code[rep]),
        "pid": nodes["pid"].gather(ex.code[rep]), "tid": tid[rep],
        "sargs": nodes["sargs"].gather(ex.code[rep]), "outputs": texts.gather(out[rep]),
        "bytes": ex.frame["output_bytes"].gather(rep),
    }).select(pl.concat_str(
        pl.lit('{"ph":"X","cat":"Op","name":'), "op_json", pl.lit(',"pid":'), "pid",
        pl.lit(',"tid":'), "tid", pl.lit(',"args":{'), "sargs", pl.lit(',"outputs":'),
        "outputs", pl.lit(',"bytes":'), "bytes", pl.lit(',"step":'))).to_series()
    frame = pl.DataFrame({"combo": combo, "step": ex.frame["step"], "ts": ex.ts,
                          "dur": ex.dur})
    return Part("op", Rows(frame, [Text("combo", Texts(static)), Int("step"), '},"ts":',
                                   Int("ts"), ',"dur":', Int("dur"), "}"]))


def _step_rows(ex: _Executions) -> pl.DataFrame:
    groups = int(ex.group.max(initial=-1)) + 1
    ts = np.full(groups, np.iinfo(np.int64).max)
    np.minimum.at(ts, ex.group, ex.ts)
    end = np.full(groups, np.iinfo(np.int64).min)
    np.maximum.at(end, ex.group, ex.end)
    return (
        ex.frame[_representatives(ex.group, groups)].select("worker", "step")
        .with_columns(ts=pl.Series(ts), end=pl.Series(end),
                      node_stats=pl.Series(np.bincount(ex.group, minlength=groups),
                                           dtype=pl.UInt32))
        .with_columns(dur=pl.col("end") - pl.col("ts"), pid=pl.lit(0, pl.Int64))
        .sort("worker", "step")
    )


# ----------------------------------------------------------------------------- flows etc.


def _node_ids(nodes: pl.DataFrame) -> tuple[np.ndarray, pl.DataFrame]:
    """Per code, its node id in (worker, node_name) order; the ids (worker, node_name, nid)
    for graph.edge_ids."""
    ids = (nodes.select("worker", "node_name").unique().sort("worker", "node_name")
           .with_row_index("nid"))
    nid = nodes.select("worker", "node_name").join(
        ids, on=["worker", "node_name"], how="left", maintain_order="left")["nid"]
    return nid.cast(pl.Int64).to_numpy(), ids


Edges = tuple[np.ndarray, np.ndarray]  # (src, dst) node ids, each pair once


def _edge_pairs(ids: pl.DataFrame, e: pl.DataFrame) -> tuple[Edges, Edges]:
    """The data edges and all edges (data and control) between the nodes of `ids`
    (worker, node_name, nid), as graph.edge_ids numbers them, self-loops left out. Names
    are matched by their categorical codes (two polars joins cost more on frames this
    small)."""
    n, m = ids.height, e.height
    worker = _shared_codes(ids.get_column("worker"), e.get_column("worker"))
    name = _shared_codes(ids.get_column("node_name"), e.get_column("src"), e.get_column("dst"))
    key, k = _combine([np.concatenate([worker, worker[n:]]), name])
    nid = np.full(k, -1, np.int64)
    nid[key[:n]] = ids.get_column("nid").cast(pl.Int64).to_numpy()
    src, dst = nid[key[n:n + m]], nid[key[n + m:]]
    ok = (src >= 0) & (dst >= 0) & (src != dst)
    src, dst = src[ok], dst[ok]
    data = ~e.get_column("control").to_numpy()[ok]
    size = int(max(src.max(initial=0), dst.max(initial=0))) + 1

    def once(keep: np.ndarray | None) -> Edges:
        pair = np.unique(src * size + dst if keep is None else (src * size + dst)[keep])
        return pair // size, pair % size

    return once(data), once(None)


def _flow_pairs(ex: _Executions, nid: np.ndarray, e: Edges, track: np.ndarray,
                sub: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per data edge into an execution of an op lane: the producer's execution (same step,
    op lane) that ended last before the consumer started, when the two are on different
    threads (a thread is a track's lane: `track` and `sub` per row). Rows of consumers,
    producers.

    Most consumers read inputs drawn on their own thread (in TF 2.x every CPU op has
    thread 0): a consumer on lane 0 of a track whose input node's executions in the step
    are all on lane 0 of that track gets no arrow from it, whichever execution it read, so
    that query is left out before the search."""
    rows, code, s_step, ts, end, trk, lane = _on_lanes(ex, OP_LANES, ex.group, ex.ts, ex.end,
                                                       track, sub)
    node = nid[code]
    src, dst = e
    nodes = int(max(node.max(initial=0), src.max(initial=0), dst.max(initial=0))) + 1
    by_dst = np.lexsort((src, dst))  # a consumer's inputs in name order: flow ids are stable
    e_src = src[by_dst]
    degree = np.bincount(dst, minlength=nodes)
    first_edge = np.concatenate([[0], np.cumsum(degree)])
    count = degree[node]
    consumer = np.repeat(np.arange(rows.size), count)  # one query per (row, input)
    q_src = e_src[(first_edge[node] - (np.cumsum(count) - count))[consumer]
                  + np.arange(consumer.size)]
    key = s_step * nodes + node
    q_key = (s_step * nodes)[consumer] + q_src
    width = int(max(key.max(initial=0), q_key.max(initial=0))) + 1
    if consumer.size and width <= 4 * (key.size + q_key.size) + 4096:
        # Per (step, node): the track of its executions when they are all on lane 0 of one
        # track; -1 when it has none (no producer: nothing to search); -2 otherwise.
        lo = np.full(width, np.iinfo(np.int64).max)
        np.minimum.at(lo, key, np.where(lane == 0, trk, -2))
        hi = np.full(width, -1)
        np.maximum.at(hi, key, np.where(lane == 0, trk, np.iinfo(np.int64).max))
        only = np.where(lo == hi, lo, -2)
        only[lo == np.iinfo(np.int64).max] = -1
        q_only = only[q_key]
        own = np.where(lane == 0, trk, -3)  # a consumer's own track when on its lane 0
        keep = (q_only != -1) & (q_only != own[consumer])
        consumer, q_key = consumer[keep], q_key[keep]
        # Only the executions of the nodes still asked about need to be searched.
        asked = np.zeros(width, bool)
        asked[q_key] = True
        cand = np.flatnonzero(asked[key])
        producer = asof_last(key[cand], end[cand], q_key, ts[consumer])
        producer = np.where(producer >= 0, cand[np.maximum(producer, 0)], -1)
    else:
        producer = asof_last(key, end, q_key, ts[consumer])
    found = producer >= 0
    c, p = consumer[found], producer[found]
    apart = (trk[p] != trk[c]) | (lane[p] != lane[c])
    return rows[c[apart]], rows[p[apart]]


def _on_lanes(ex: _Executions, kinds: list[str], *columns: np.ndarray) -> list[np.ndarray]:
    """The rows of executions on lanes of `kinds`, their codes, and `columns` at those rows
    (the columns themselves when every row is on such a lane, as in most runs)."""
    on = ex.nodes["lane_kind"].is_in(kinds).to_numpy()
    if on.all():
        return [np.arange(ex.code.size), ex.code, *columns]
    rows = np.flatnonzero(on[ex.code])
    return [rows, ex.code[rows], *(c[rows] for c in columns)]


def _flows(ex: _Executions, c: np.ndarray, p: np.ndarray, pid: np.ndarray, tid: np.ndarray
           ) -> pl.DataFrame:
    """One row per data edge between executions of a step on different threads (pairs
    from _flow_pairs), by the consumer's start."""
    by_start = np.argsort(ex.ts[c], kind="stable")
    c, p = c[by_start], p[by_start]
    # Inside the slices (half a microsecond from their edges) so that viewers bind the
    # arrows to the producer and the consumer and not to a neighbour that touches them.
    s_half = ex.dur[p] >= 1
    f_half = ex.dur[c] >= 1
    f = pl.DataFrame({"id": np.arange(c.size), "code": ex.code[p],
                      "s_pid": pid[p], "s_tid": tid[p], "f_pid": pid[c], "f_tid": tid[c],
                      "s_ts": np.where(s_half, ex.end[p] - 1, ex.ts[p]),
                      "s_half": s_half.astype(np.int64), "f_ts": ex.ts[c],
                      "f_half": f_half.astype(np.int64)})
    return f


_HALF = Texts(["", ".5"])


def _flow_parts(flows: Future[pl.DataFrame], names: Texts) -> list[Part]:
    def part(kind: str, ph: str, end: str) -> Part:
        line: Line = [f'{{"ph":"{ph}",{end}"cat":"DataFlow","name":', Text("code", names),
                      ',"id":', Int("id"), ',"pid":', Int(f"{ph}_pid"), ',"tid":',
                      Int(f"{ph}_tid"), ',"ts":', Int(f"{ph}_ts"), Text(f"{ph}_half", _HALF),
                      "}"]
        return Part(kind, flows, lambda f: Rows(f, line))

    return [part("flow_start", "s", ""), part("flow_end", "f", '"bp":"e",')]


def _counters(run: Run, steps: list[int] | None, points: int
              ) -> tuple[pl.DataFrame, Texts]:
    """Bytes in use per allocator from the allocation records, cumulative within each step
    (a step's records start from what it allocates), one value per timestamp; a step with
    more than `points` of them keeps the maximum of each of `points` time buckets and the
    last value. `name` indexes the allocator names (JSON strings) returned with the frame."""
    key = ["worker", "allocator_name", "step"]
    keep = pl.col("alloc_us") > 0
    if steps is not None:
        keep &= pl.col("step").is_in(steps)
    a = run.allocations.lazy().select(*key, "alloc_us", "alloc_bytes").filter(keep).collect()
    if not a.height:
        return pl.DataFrame(schema={"worker": pl.String, "step": pl.Int64, "name": pl.Int64,
                                    "ts": pl.Int64, "value": pl.Int64}), Texts([])
    code, k = group_codes(a, key)
    t, v = a["alloc_us"].to_numpy(), a["alloc_bytes"].to_numpy()
    o = np.lexsort((t, code))
    code, t, v = code[o], t[o], v[o]
    fresh = np.r_[True, code[1:] != code[:-1]]  # the first record of its key
    total = np.cumsum(v)
    value = total - (total - v)[np.flatnonzero(fresh)][np.cumsum(fresh) - 1]
    # The value after the last record of each timestamp.
    last = np.r_[fresh[1:] | (t[1:] != t[:-1]), True]
    rows, code, t, value = o[last], code[last], t[last], value[last]
    count = np.bincount(code, minlength=k)
    names = a[_representatives(code, k)].select(name=jstr(pl.col("allocator_name")))["name"]
    c = a[rows].select("worker", "allocator_name", "step").with_columns(
        alloc_us=pl.Series(t, dtype=pl.Int64), value=pl.Series(value, dtype=pl.Int64),
        name=pl.Series(code, dtype=pl.Int64), _n=pl.Series(count[code]))
    if c.height and int(count.max()) > points:
        t0, t1 = pl.col("alloc_us").min().over(key), pl.col("alloc_us").max().over(key)
        bucket = (pl.col("alloc_us") - t0) * points // (t1 - t0 + 1)
        many = c.filter(pl.col("_n") > points)
        peaks = many.group_by(*key, "name", bucket.alias("b")).agg(
            alloc_us=pl.col("alloc_us").min(), value=pl.col("value").max())
        lasts = many.group_by(*key, "name").agg(pl.col("alloc_us").last(),
                                                 pl.col("value").last())
        cols = [*key, "name", "alloc_us", "value"]
        c = pl.concat([c.filter(pl.col("_n") <= points).select(cols), peaks.select(cols),
                       lasts.select(cols)])
        c = c.unique([*key, "alloc_us"], keep="first", maintain_order=True)
    return c.select("worker", "step", "name", ts="alloc_us", value="value"), Texts(names)


def _counter_part(c: Future[tuple[pl.DataFrame, Texts]]) -> Part:
    def rows(made: tuple[pl.DataFrame, Texts]) -> Rows:
        frame, names = made
        return Rows(frame, ['{"ph":"C","cat":"Memory","name":', Text("name", names),
                            ',"pid":', Int("pid"), ',"tid":0,"ts":', Int("ts"),
                            ',"args":{"bytes":', Int("value"), "}}"])

    return Part("counter", c, rows)


def _critical(run: Run, ex: _Executions, nid: np.ndarray, e: Edges, group: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows of each step's critical path (critical_paths' executions), in path order,
    with their position on the path and wait_ns."""
    rows, code, group, start, end = _on_lanes(
        ex, CRITICAL_LANES, group, ex.frame["start_ns"].to_numpy(),
        ex.frame["op_end_rel_ns"].to_numpy())
    end = start + end
    path, order = path_rows(group, nid[code], start, end, *e)
    wait = np.zeros(path.size, np.int64)
    wait[1:] = start[path[1:]] - end[path[:-1]]
    wait[order == 0] = 0
    return rows[path], order, wait


# ----------------------------------------------------------------------------- assembly


def build_trace(run: Run, options: TimelineOptions) -> Trace:
    """The events of options.steps. The outputs' texts, the flows' producers and the
    memory counters are built in a second thread (numpy and polars release the GIL for
    their array work); the flow and counter parts may still be futures when this returns
    (Part.frame waits for them), so that writing the op events can start."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="timeline")
    try:
        trace = _build(run, options, pool)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=False)  # what was submitted still runs
    return trace


def _build(run: Run, options: TimelineOptions, pool: ThreadPoolExecutor) -> Trace:
    steps = list(options.steps)
    subset = None if set(steps) == set(run.steps) else steps  # None: no filtering needed
    counters = pool.submit(_counters, run, subset, options.max_counter_points
                           ) if options.memory else None
    ex = _executions(run, subset)
    nodes = ex.nodes
    if options.dataflow or options.critical_path:
        e = edges(run)
        nid, ids = _node_ids(nodes)
    outputs = pool.submit(_outputs, run, subset, ex)
    step_rows = _step_rows(ex)
    # The run's workers: those of the chosen executions when they are all of the run's.
    workers = (step_rows["worker"].unique().sort().to_list() if subset is None
               else run.workers)
    procs = lanes.processes(nodes, workers)
    devices = procs.filter(pl.col("device").is_not_null())
    tables = lanes.number_tracks([
        lanes.op_tracks(nodes, procs, run.threads),
        step_rows.select("worker").unique().select(
            "worker", pid=pl.lit(0, pl.Int64), rank=pl.lit(0, pl.Int64),
            order=pl.lit(0, pl.Int64), name="worker"),
        devices.select("pid", rank=pl.lit(lanes.CRITICAL_RANK, pl.Int64),
                       order=pl.lit(0, pl.Int64), name=pl.lit("critical path")),
    ])
    nodes = nodes.join(tables[0].select("worker", "lane", "thread_id", "track_id", "pid"),
                       on=["worker", "lane", "thread_id"], how="left", maintain_order="left")
    code = ex.code
    track, pid = (nodes[c].cast(pl.Int64).to_numpy() for c in ("track_id", "pid"))
    # The op events' lanes first (their tracks hold nothing else): the flows need them.
    op_track = track[code]
    op_sub = lanes.lanes(op_track, ex.ts, ex.end)
    if options.dataflow or options.critical_path:
        data_edges, all_edges = _edge_pairs(ids, e)
    pairs = pool.submit(_flow_pairs, ex, nid, data_edges, op_track, op_sub
                        ) if options.dataflow else None
    if options.critical_path:
        cp_rows, cp_order, cp_wait = _critical(run, ex, nid, all_edges, ex.group)
    step = ex.frame["step"].to_numpy()
    frames = [pl.DataFrame({"track_id": op_track, "ts": ex.ts, "end": ex.end}),
              step_rows.join(tables[1].select("worker", "track_id"), on="worker")]
    if options.critical_path:
        cp_track = tables[2].select("pid", "track_id")
        by_pid = np.full(int(procs["pid"].to_numpy().max(initial=0)) + 1, -1, np.int64)
        by_pid[cp_track["pid"].to_numpy()] = cp_track["track_id"].to_numpy()
        frames.append(pl.DataFrame({"track_id": by_pid[pid[code[cp_rows]]],
                                    "ts": ex.ts[cp_rows], "end": ex.end[cp_rows]}))
    tracks = pl.concat([t.select("track_id", "pid", "name") for t in tables])
    placed, threads = lanes.place(frames, tracks, [op_sub] + [None] * (len(frames) - 1))
    tid = placed[0]["tid"].to_numpy()
    parts = [_op_part(ex, nodes, tid, outputs.result())]
    if pairs is not None:
        p_pairs = pairs
        names = Texts(nodes["name_json"])
        parts += _flow_parts(pool.submit(
            lambda: _flows(ex, *p_pairs.result(), pid[code], tid)), names)
    sr = placed[1].with_columns(w=pl.int_range(pl.len(), dtype=pl.Int64))
    parts.append(Part("step", Rows(sr, [
        '{"ph":"X","cat":"Step","name":"step ', Int("step"), '","pid":', Int("pid"),
        ',"tid":', Int("tid"), ',"ts":', Int("ts"), ',"dur":', Int("dur"),
        ',"args":{"step":', Int("step"), ',"worker":',
        Text("w", Texts(sr.select(jstr(pl.col("worker"))).to_series())),
        ',"node_stats":', Int("node_stats"), "}}"])))
    if options.critical_path:
        head = Texts(nodes.select(pl.concat_str(
            pl.lit('{"ph":"X","cat":"CriticalPath","name":'), "op_json", pl.lit(',"pid":'),
            "pid", pl.lit(',"args":{'), "sargs", pl.lit(',"step":'))).to_series())
        cp = pl.DataFrame({
            "code": code[cp_rows], "step": step[cp_rows], "order": cp_order,
            "wait_ns": cp_wait, "tid": placed[2]["tid"], "ts": ex.ts[cp_rows],
            "dur": ex.dur[cp_rows]})
        parts.append(Part("critical_path", Rows(cp, [
            Text("code", head), Int("step"), ',"order":', Int("order"), ',"wait_ns":',
            Int("wait_ns"), '},"tid":', Int("tid"), ',"ts":', Int("ts"), ',"dur":', Int("dur"),
            "}"])))
    with_counters: list[str] = []
    if counters is not None:
        allocators = procs.filter(pl.col("device").is_null()).select("worker", "pid")
        p_counters = counters
        parts.append(_counter_part(pool.submit(
            lambda: (p_counters.result()[0].join(allocators, on="worker"),
                     p_counters.result()[1]))))
        with_counters = counters.result()[0].get_column("worker").unique().to_list()
    # An Allocators process only for workers with counters.
    procs = procs.filter(pl.col("device").is_not_null() | pl.col("worker").is_in(with_counters))
    other = {"generator": "runlens", "schema": SCHEMA, "steps": steps,
             "workers": workers, "ts_unit": "us (all_start_micros, as tf.timeline)"}
    return Trace(lanes.metadata(procs, threads), parts, other)
