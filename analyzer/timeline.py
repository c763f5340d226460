"""Chrome Trace (Trace Event Format) of traced steps, built from the Run frames.

What `analyze timeline` writes (docs/timeline.md): a process per (worker, device) with a
thread per real thread_id (op lanes) or GPU stream, each op execution a complete event
drawn exactly as tf.timeline draws it (ts = all_start_micros, dur = all_end_rel_micros,
name = the op of its timeline label); a "Steps" process with a slice per step; dataflow
arrows; per-allocator memory counters; each step's critical path on a thread of its own.

Everything is computed with polars expressions over all executions at once; each event
becomes one row of a frame plus a polars expression that renders the row as one JSON
object (`Part`). analyzer/render/chrome_trace.py streams those parts to a file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from analyzer import timeline_lanes as lanes
from analyzer.errors import RunlensError
from analyzer.graph import critical_paths, edges, number_nodes
from analyzer.jsonfrag import jlist, jstr
from analyzer.model import Run
from analyzer.steps import median_step

SCHEMA = 1
OP_LANES = ["device", "other"]  # lane kinds that hold ops (not kernels or copies)
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


@dataclass
class Part:
    """Events of one kind: a frame with one row per event, and the expression that renders
    a row as one JSON object."""

    kind: str
    frame: pl.DataFrame
    line: pl.Expr


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
                 all_steps: bool = False, default_all: bool = False
                 ) -> tuple[list[int], str]:
    """The steps to draw and a note saying how they were chosen.

    At most one of step / step_range / all_steps; none: the median-time step (every step
    when `default_all`, as for one file per step)."""
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
    s = median_step(run)
    return [s], f"step {s} (median step time)"


# ----------------------------------------------------------------------------- ops


def _labels(n: pl.DataFrame) -> pl.DataFrame:
    """Per distinct (stat_name, label, lane type, op_type): what tf.timeline shows (event
    name = op, args.name, inputs) and the static part of our args, as JSON fragments."""
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


def _outputs(run: Run, steps: list[int] | None) -> pl.DataFrame:
    """Per execution: its outputs as a JSON list of "dtype[shape]"."""
    o = run.outputs if steps is None else run.outputs.filter(pl.col("step").is_in(steps))
    kinds = o.select("dtype", "shape").unique().with_columns(
        desc=jstr(pl.concat_str(pl.col("dtype"), pl.lit("["),
                                pl.col("shape").cast(pl.List(pl.String)).list.join(","),
                                pl.lit("]"))))
    key = ["worker", "step", "exec_idx"]
    o = o.join(kinds, on=["dtype", "shape"], how="left", nulls_equal=True).with_columns(
        _n=pl.len().over(key))
    # Most executions have one output: no string aggregation for them.
    one = o.filter(pl.col("_n") == 1).select(
        *key, outputs_json=pl.concat_str(pl.lit("["), "desc", pl.lit("]")))
    many = o.filter(pl.col("_n") > 1).group_by(key).agg(outputs_json=pl.concat_str(
        pl.lit("["), pl.col("desc").sort_by("slot").str.join(","), pl.lit("]")))
    return pl.concat([one, many])


def _executions(run: Run, steps: list[int] | None) -> pl.DataFrame:
    n = run.nodes if steps is None else run.nodes.filter(pl.col("step").is_in(steps))
    n = n.with_columns(gpu=pl.col("lane").str.contains(_GPU_LANE))
    n = n.join(_labels(n), on=["stat_name", "timeline_label", "gpu", "op_type"],
               how="left", nulls_equal=True)
    n = n.join(_outputs(run, steps), on=["worker", "step", "exec_idx"], how="left")
    return n.select(
        "worker", "step", "exec_idx", "device", "lane", "lane_kind", "thread_id",
        "node_name", "op_json", "name_json", "sargs",
        ts="all_start_us", dur="all_end_rel_us",
        end=pl.col("all_start_us") + pl.col("all_end_rel_us"),
        outputs_json=pl.col("outputs_json").fill_null("[]"),
        bytes="output_bytes",
    )


def _x(cat: str, name: pl.Expr, args: list[Any]) -> pl.Expr:
    """A complete event: rows need pid, tid, ts and dur; `args` are JSON fragments."""
    return pl.concat_str(
        pl.lit(f'{{"ph":"X","cat":"{cat}","name":'), name, pl.lit(',"pid":'), "pid",
        pl.lit(',"tid":'), "tid", pl.lit(',"ts":'), "ts", pl.lit(',"dur":'), "dur",
        pl.lit(',"args":{'), *args, pl.lit("}}"),
    )


def _op_part(x: pl.DataFrame) -> Part:
    line = _x("Op", pl.col("op_json"), [
        "sargs", pl.lit(',"step":'), "step", pl.lit(',"outputs":'), "outputs_json",
        pl.lit(',"bytes":'), "bytes"])
    return Part("op", x, line)


def _step_rows(x: pl.DataFrame) -> pl.DataFrame:
    return (
        x.group_by("worker", "step")
        .agg(ts=pl.col("ts").min(), end=pl.col("end").max(), node_stats=pl.len())
        .with_columns(dur=pl.col("end") - pl.col("ts"), pid=pl.lit(0, pl.Int64))
        .sort("worker", "step")
    )


# ----------------------------------------------------------------------------- flows etc.


def _flows(run: Run, x: pl.DataFrame) -> pl.DataFrame:
    """One row per data edge between executions of a step on different threads: the
    producer's execution that ended last before the consumer started."""
    e = edges(run).filter(~pl.col("control")).select("worker", "src", "dst").unique()
    ops, e = number_nodes(x.filter(pl.col("lane_kind").is_in(OP_LANES)), e)
    consumers = (
        ops.select("step", dst_nid="nid", c_ts="ts", c_dur="dur", c_pid="pid", c_tid="tid")
        .join(e, on="dst_nid").sort("c_ts")
    )
    producers = ops.select("step", "name_json", src_nid="nid", p_end="end", p_ts="ts",
                           p_dur="dur", p_pid="pid", p_tid="tid").sort("p_end")
    f = consumers.join_asof(
        producers, left_on="c_ts", right_on="p_end", by=["step", "src_nid"],
        strategy="backward", check_sortedness=False,
    ).drop_nulls("p_end").filter((pl.col("p_pid") != pl.col("c_pid"))
                                 | (pl.col("p_tid") != pl.col("c_tid")))
    # Inside the slices (half a microsecond from their edges) so that viewers bind the
    # arrows to the producer and the consumer and not to a neighbour that touches them.
    half = lambda ts, ok: pl.when(ok).then(pl.concat_str(ts, pl.lit(".5")))  # noqa: E731
    return f.with_row_index("id").select(
        "id", name="name_json",
        s_pid="p_pid", s_tid="p_tid",
        s_ts=half(pl.col("p_end") - 1, pl.col("p_dur") >= 1).otherwise(
            pl.col("p_ts").cast(pl.String)),
        f_pid="c_pid", f_tid="c_tid",
        f_ts=half(pl.col("c_ts"), pl.col("c_dur") >= 1).otherwise(
            pl.col("c_ts").cast(pl.String)),
    )


def _flow_parts(flows: pl.DataFrame) -> list[Part]:
    def line(ph: str, end: str) -> pl.Expr:
        return pl.concat_str(
            pl.lit(f'{{"ph":"{ph}",{end}"cat":"DataFlow","name":'), "name", pl.lit(',"id":'),
            "id", pl.lit(',"pid":'), f"{ph}_pid", pl.lit(',"tid":'), f"{ph}_tid",
            pl.lit(',"ts":'), f"{ph}_ts", pl.lit("}"))

    return [Part("flow_start", flows, line("s", "")),
            Part("flow_end", flows, line("f", '"bp":"e",'))]


def _counters(run: Run, steps: list[int] | None, points: int) -> pl.DataFrame:
    """Bytes in use per allocator from the allocation records, cumulative within each step
    (a step's records start from what it allocates), one value per timestamp; a step with
    more than `points` of them keeps the maximum of each of `points` time buckets and the
    last value."""
    key = ["worker", "allocator_name", "step"]
    a = run.allocations.filter(pl.col("alloc_us") > 0)
    if steps is not None:
        a = a.filter(pl.col("step").is_in(steps))
    a = (
        a.sort(*key, "alloc_us")
        .with_columns(value=pl.col("alloc_bytes").cum_sum().over(key))
        # The value after the last record of each timestamp.
        .filter(pl.struct(*key, "alloc_us").is_last_distinct())
        .with_columns(_n=pl.len().over(key))
    )
    if a.height and int(a.select(pl.col("_n").max()).item()) > points:
        t0, t1 = pl.col("alloc_us").min().over(key), pl.col("alloc_us").max().over(key)
        bucket = (pl.col("alloc_us") - t0) * points // (t1 - t0 + 1)
        many = a.filter(pl.col("_n") > points)
        peaks = many.group_by(*key, bucket.alias("b")).agg(
            alloc_us=pl.col("alloc_us").min(), value=pl.col("value").max())
        lasts = many.group_by(*key).agg(pl.col("alloc_us").last(), pl.col("value").last())
        a = pl.concat([a.filter(pl.col("_n") <= points).select(*key, "alloc_us", "value"),
                       peaks.drop("b"), lasts.select(peaks.drop("b").columns)])
        a = a.unique([*key, "alloc_us"], keep="first", maintain_order=True)
    return a.select("worker", "step", ts="alloc_us", value="value",
                    name=jstr(pl.col("allocator_name")))


def _counter_part(c: pl.DataFrame) -> Part:
    line = pl.concat_str(
        pl.lit('{"ph":"C","cat":"Memory","name":'), "name", pl.lit(',"pid":'), "pid",
        pl.lit(',"tid":0,"ts":'), "ts", pl.lit(',"args":{"bytes":'), "value", pl.lit("}}"))
    return Part("counter", c, line)


def _critical(run: Run, steps: list[int] | None, x: pl.DataFrame) -> pl.DataFrame:
    """Copies of the executions on each step's critical path (x's rows), in path order."""
    cp = critical_paths(run, steps).select(
        "worker", "step", "exec_idx", "wait_ns",
        path_order=pl.int_range(pl.len()).over("worker", "step"))
    return cp.join(x.drop("track_id"), on=["worker", "step", "exec_idx"])


# ----------------------------------------------------------------------------- assembly


def build_trace(run: Run, options: TimelineOptions) -> Trace:
    steps = list(options.steps)
    subset = None if set(steps) == set(run.steps) else steps  # None: no filtering needed
    x = _executions(run, subset)
    procs = lanes.processes(x, run.workers)
    devices = procs.filter(pl.col("device").is_not_null())
    step_rows = _step_rows(x)
    tables = lanes.number_tracks([
        lanes.op_tracks(x, procs, run.threads),
        step_rows.select("worker").unique().select(
            "worker", pid=pl.lit(0, pl.Int64), rank=pl.lit(0, pl.Int64),
            order=pl.lit(0, pl.Int64), name="worker"),
        devices.select("pid", rank=pl.lit(lanes.CRITICAL_RANK, pl.Int64),
                       order=pl.lit(0, pl.Int64), name=pl.lit("critical path")),
    ])
    x = x.join(tables[0].select("worker", "lane", "thread_id", "track_id", "pid"),
               on=["worker", "lane", "thread_id"])
    frames = [x, step_rows.join(tables[1].select("worker", "track_id"), on="worker")]
    if options.critical_path:
        frames.append(_critical(run, subset, x).join(tables[2].select("pid", "track_id"),
                                                     on="pid"))
    tracks = pl.concat([t.select("track_id", "pid", "name") for t in tables])
    placed, threads = lanes.place(frames, tracks)
    x = placed[0]
    parts = [_op_part(x)]
    if options.dataflow:
        parts += _flow_parts(_flows(run, x))
    parts.append(Part("step", placed[1], _x("Step", jstr(pl.concat_str(
        pl.lit("step "), pl.col("step"))), [pl.lit('"step":'), "step", pl.lit(',"worker":'),
                                             jstr(pl.col("worker")), pl.lit(',"node_stats":'),
                                             "node_stats"])))
    if options.critical_path:
        parts.append(Part("critical_path", placed[2], _x("CriticalPath", pl.col("op_json"), [
            "sargs", pl.lit(',"step":'), "step", pl.lit(',"order":'), "path_order",
            pl.lit(',"wait_ns":'), "wait_ns"])))
    with_counters: list[str] = []
    if options.memory:
        c = _counters(run, subset, options.max_counter_points).join(
            procs.filter(pl.col("device").is_null()).select("worker", "pid"), on="worker")
        parts.append(_counter_part(c))
        with_counters = c.get_column("worker").unique().to_list()
    # An Allocators process only for workers with counters.
    procs = procs.filter(pl.col("device").is_not_null() | pl.col("worker").is_in(with_counters))
    other = {"generator": "runlens", "schema": SCHEMA, "steps": steps,
             "workers": run.workers, "ts_unit": "us (all_start_micros, as tf.timeline)"}
    return Trace(lanes.metadata(procs, threads), [p for p in parts if p.frame.height], other)
