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
(`Part`, analyzer/timeline/jsonrows.py). The outputs, the flows and the memory counters are built
in a second thread; analyzer/render/chrome_trace.py streams the parts to a file, the op
events first, while the last parts may still be building.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..analysis.graph import edge_pairs, edges, node_ids
from ..analysis.steps import step_times
from ..background import Background
from ..model import Run
from . import events, flows, lanes, memory, trace_events
from .jsonrows import Texts
from .model import SCHEMA, Part, TimelineOptions, Trace


def build_trace(run: Run, options: TimelineOptions) -> Trace:
    """The events of options.steps. The outputs' texts, the flows' producers and the
    memory counters are built in a second thread (numpy and polars release the GIL for
    their array work); the flow and counter parts may still be futures when this returns
    (Part.frame waits for them), so that writing the op events can start."""
    # Not closed here: what was submitted still runs while the caller writes (its threads
    # end with the process); an error is raised where a Part's frame is taken.
    return _build(run, options, Background(1, "timeline"))


def _build(run: Run, options: TimelineOptions, pool: Background) -> Trace:
    steps = list(options.steps)
    subset = None if set(steps) == set(run.steps) else steps  # None: no filtering needed
    counters = pool.submit(memory.counters, run, subset, options.max_counter_points
                           ) if options.memory else None
    ex = events.executions(run, subset)
    nodes = ex.nodes
    if options.dataflow or options.critical_path:
        e = edges(run)
        nid, ids = node_ids(nodes)
    outputs = pool.submit(events.outputs, run, subset, ex)
    step_rows = events.timed_steps(events.step_rows(ex), step_times(run))
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
        data_edges, all_edges = edge_pairs(ids, e)
    pairs = pool.submit(flows.flow_pairs, ex, nid, data_edges, op_track, op_sub
                        ) if options.dataflow else None
    if options.critical_path:
        cp_rows, cp_order, cp_wait = flows.critical(ex, nid, all_edges)
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
    parts = [events.op_part(ex, nodes, tid, outputs.result())]
    if pairs is not None:
        p_pairs = pairs
        names = Texts(nodes["name_json"])
        parts += flows.flow_parts(pool.submit(
            lambda: flows.flows(ex, *p_pairs.result(), pid[code], tid)), names)
    parts.append(Part("step", trace_events.step_rows(placed[1])))
    if options.critical_path:
        cp = pl.DataFrame({
            "code": code[cp_rows], "step": step[cp_rows], "order": cp_order,
            "wait_ns": cp_wait, "tid": placed[2]["tid"], "ts": ex.ts[cp_rows],
            "dur": ex.dur[cp_rows]})
        parts.append(Part("critical_path", trace_events.critical_rows(nodes, cp)))
    with_counters: list[str] = []
    if counters is not None:
        allocators = procs.filter(pl.col("device").is_null()).select("worker", "pid")
        p_counters = counters
        parts.append(memory.counter_part(pool.submit(
            lambda: (p_counters.result()[0].join(allocators, on="worker"),
                     p_counters.result()[1]))))
        with_counters = counters.result()[0].get_column("worker").unique().to_list()
    # An Allocators process only for workers with counters.
    procs = procs.filter(pl.col("device").is_not_null() | pl.col("worker").is_in(with_counters))
    other = {"generator": "runlens", "schema": SCHEMA, "steps": steps,
             "workers": workers, "ts_unit": "us (all_start_micros, as tf.timeline)"}
    return Trace(lanes.metadata(procs, threads), parts, other)
