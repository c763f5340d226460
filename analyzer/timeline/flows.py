"""The timeline's dataflow arrows and critical paths, per execution, with numpy: an
arrow from the producer's execution that ended last before its consumer started; the
critical paths are graph.py's (path_rows, path_waits: the one implementation)."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import polars as pl

from ..analysis.graph import PATH_LANES, Edges, asof_last, path_rows, path_waits
from . import trace_events
from .events import OP_LANES, Executions, on_lanes
from .jsonrows import Texts
from .model import Part


def flow_pairs(ex: Executions, nid: np.ndarray, e: Edges, track: np.ndarray,
                sub: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per data edge into an execution of an op lane: the producer's execution (same step,
    op lane) that ended last before the consumer started, when the two are on different
    threads (a thread is a track's lane: `track` and `sub` per row). Rows of consumers,
    producers.

    Most consumers read inputs drawn on their own thread (in TF 2.x every CPU op has
    thread 0): a consumer on lane 0 of a track whose input node's executions in the step
    are all on lane 0 of that track gets no arrow from it, whichever execution it read, so
    that query is left out before the search."""
    rows, code, s_step, ts, end, trk, lane = on_lanes(ex, OP_LANES, ex.group, ex.ts, ex.end,
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


def flows(ex: Executions, c: np.ndarray, p: np.ndarray, pid: np.ndarray, tid: np.ndarray
           ) -> pl.DataFrame:
    """One row per data edge between executions of a step on different threads (pairs
    from flow_pairs), by the consumer's start."""
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


def flow_parts(flows: Future[pl.DataFrame], names: Texts) -> list[Part]:
    """The arrows' two ends, from the frame of flows() (still being built)."""
    return [Part("flow_start", flows, lambda f: trace_events.flow_rows(f, names, "s")),
            Part("flow_end", flows, lambda f: trace_events.flow_rows(f, names, "f"))]


def critical(ex: Executions, nid: np.ndarray, e: Edges
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows of each step's critical path (graph.path_rows over the executions of
    graph.PATH_LANES, as graph.critical_paths), in path order, with their position on the
    path and wait_ns (graph.path_waits)."""
    rows, code, group, start, end = on_lanes(
        ex, PATH_LANES, ex.group, ex.frame["start_ns"].to_numpy(),
        ex.frame["op_end_rel_ns"].to_numpy())
    end = start + end
    path, order = path_rows(group, nid[code], start, end, *e)
    return rows[path], order, path_waits(start, end, path, order)
