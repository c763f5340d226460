"""The Chrome Trace encoding of the timeline's events: for each kind of event, the JSON
line (jsonrows.Line) that renders one row of its integer frame. The timeline
(analyzer/timeline/) builds the frames; docs/timeline.md says what each field means."""

from __future__ import annotations

import polars as pl

from .jsonfrag import jlist, jstr
from .jsonrows import Int, Lists, Rows, Text, Texts


def node_json() -> dict[str, pl.Expr]:
    """The JSON fragments of a node on a thread, from its columns op (what tf.timeline
    names it), tf_name, scope, inputs, op_type (the graph's) and jax_pass: the event's name
    (op_json), args' name for arrows (name_json) and the static part of args (sargs;
    graph_op only when it differs from op)."""
    graph_op = pl.when(pl.col("op") != pl.col("op_type")).then(
        pl.concat_str(pl.lit(',"graph_op":'), jstr(pl.col("op_type")))).otherwise(pl.lit(""))
    # JAX: "forward" or "backward" (a column jax_pass, "" when neither or not JAX).
    jax_pass = pl.when(pl.col("jax_pass") != "").then(
        pl.concat_str(pl.lit(',"pass":'), jstr(pl.col("jax_pass")))).otherwise(pl.lit(""))
    return {
        "op_json": jstr(pl.col("op")), "name_json": jstr(pl.col("tf_name")),
        "sargs": pl.concat_str(
            pl.lit('"name":'), jstr(pl.col("tf_name")), pl.lit(',"op":'), jstr(pl.col("op")),
            pl.lit(',"scope":'), jstr(pl.col("scope")), pl.lit(',"inputs":'),
            jlist(pl.col("inputs")), graph_op, jax_pass,
        ),
    }


def op_rows(nodes: pl.DataFrame, frame: pl.DataFrame, outputs: Lists) -> Rows:
    """Op events ("ph": "X", "cat": "Op"): per row (code, tid, bytes, step, ts, dur) the
    texts of its node (`nodes`: op_json, pid, sargs per code) and its outputs' list."""
    head = Texts(nodes.select(pl.concat_str(
        pl.lit('{"ph":"X","cat":"Op","name":'), "op_json", pl.lit(',"pid":'), "pid",
        pl.lit(',"tid":'))).to_series())
    args = Texts(nodes.select(pl.concat_str(
        pl.lit(',"args":{'), "sargs", pl.lit(',"outputs":'))).to_series())
    return Rows(frame, [Text("code", head), Int("tid"), Text("code", args),
                        outputs, ',"bytes":', Int("bytes"), ',"step":', Int("step"),
                        '},"ts":', Int("ts"), ',"dur":', Int("dur"), "}"])


def step_rows(frame: pl.DataFrame) -> Rows:
    """Step slices ("cat": "Step"): per row (worker, step, pid, tid, ts, dur, node_stats)."""
    frame = frame.with_columns(w=pl.int_range(pl.len(), dtype=pl.Int64))
    workers = Texts(frame.select(jstr(pl.col("worker"))).to_series())
    return Rows(frame, [
        '{"ph":"X","cat":"Step","name":"step ', Int("step"), '","pid":', Int("pid"),
        ',"tid":', Int("tid"), ',"ts":', Int("ts"), ',"dur":', Int("dur"),
        ',"args":{"step":', Int("step"), ',"worker":', Text("w", workers),
        ',"node_stats":', Int("node_stats"), "}}"])


def critical_rows(nodes: pl.DataFrame, frame: pl.DataFrame) -> Rows:
    """Copies of the ops on a critical path ("cat": "CriticalPath"): per row (code, step,
    order, wait_ns, tid, ts, dur)."""
    head = Texts(nodes.select(pl.concat_str(
        pl.lit('{"ph":"X","cat":"CriticalPath","name":'), "op_json", pl.lit(',"pid":'),
        "pid", pl.lit(',"args":{'), "sargs", pl.lit(',"step":'))).to_series())
    return Rows(frame, [
        Text("code", head), Int("step"), ',"order":', Int("order"), ',"wait_ns":',
        Int("wait_ns"), '},"tid":', Int("tid"), ',"ts":', Int("ts"), ',"dur":', Int("dur"),
        "}"])


_HALF = Texts(["", ".5"])


def flow_rows(frame: pl.DataFrame, names: Texts, ph: str) -> Rows:
    """One end of the dataflow arrows ("ph" "s" or "f", "cat": "DataFlow"): per row the
    producer's code (its name in `names`), id, and {ph}_pid, _tid, _ts, _half (ts + .5)."""
    end = '"bp":"e",' if ph == "f" else ""
    return Rows(frame, [f'{{"ph":"{ph}",{end}"cat":"DataFlow","name":', Text("code", names),
                        ',"id":', Int("id"), ',"pid":', Int(f"{ph}_pid"), ',"tid":',
                        Int(f"{ph}_tid"), ',"ts":', Int(f"{ph}_ts"),
                        Text(f"{ph}_half", _HALF), "}"])


def counter_rows(frame: pl.DataFrame, names: Texts) -> Rows:
    """Memory counters ("ph": "C", "cat": "Memory"): per row the allocator (its name in
    `names`), pid, ts and the bytes allocated since the step began (the rise within the
    step, analysis.stepmemory: not the allocator's bytes in use, so the series says so)."""
    return Rows(frame, ['{"ph":"C","cat":"Memory","name":', Text("name", names),
                        ',"pid":', Int("pid"), ',"tid":0,"ts":', Int("ts"),
                        ',"args":{"allocated_since_step_start":', Int("value"), "}}"])
