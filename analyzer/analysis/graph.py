"""The dataflow graph of a step (networkx) and its critical path.

Edges come from the node inputs of graph.pb and of the partition graphs (which name what
really ran: _Arg, _Retval, Send/Recv, constant-folded nodes); a Send and its Recv are
joined by (tensor_name, send_device, recv_device). Data edges carry the producer's output
bytes. The critical path is the chain of dependent executed ops that ends last, found by
following each op's last-arriving input backwards from the op that ends the step.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np
import polars as pl

from ..grouping import combine, shared_codes
from ..model import Run, kernel_label_expr
from .outside import outside
from .steps import step_times


def edges(run: Run) -> pl.DataFrame:
    """All graph edges: worker, src, dst, slot (-1 for control), control flag.

    Send -> Recv pairs are added as data edges with slot 0.
    """
    g = run.graph_nodes.select("worker", "name", "inputs").explode("inputs").drop_nulls("inputs")
    inp = pl.col("inputs")
    e = g.select(
        "worker",
        src=inp.str.strip_prefix("^").str.replace(r":\d+$", ""),
        dst=pl.col("name"),
        slot=pl.when(inp.str.starts_with("^")).then(-1)
        .otherwise(inp.str.extract(r":(\d+)$", 1).cast(pl.Int32).fill_null(0)),
        control=inp.str.starts_with("^"),
    )
    key = ["worker", "tensor_name", "send_device", "recv_device"]
    gn = run.graph_nodes.filter(pl.col("tensor_name").is_not_null())
    sends = gn.filter(pl.col("op").str.contains("Send")).select(*key, src=pl.col("name"))
    recvs = gn.filter(pl.col("op").str.contains("Recv")).select(*key, dst=pl.col("name"))
    pairs = sends.join(recvs, on=key).select(
        "worker", "src", "dst", slot=pl.lit(0, pl.Int32), control=pl.lit(False)
    )
    return pl.concat([e, pairs]).unique()


def no_dataflow(run: Run) -> str | None:
    """Why `run` has no dataflow edges (graph.pb or partition graph inputs) for a critical
    path to follow, or None when it has some. Without them every op would be a path of its
    own: "0.0% of the step" would be a wrong answer, not a small one."""
    inputs = run.graph_nodes.select(pl.col("inputs").list.len().fill_null(0).sum()).item()
    if inputs:
        return None
    return ("needs graph: " + run.lacks["graph"] if "graph" in run.lacks
            else "needs a dataflow graph: the source holds no graph.pb or partition graphs")


def executed_nodes(run: Run, step: int, worker: str | None = None) -> pl.DataFrame:
    """One row per node executed in `step` on its op lanes: first start, last end, busy time."""
    worker = worker or run.workers[0]
    n = run.nodes.filter(
        (pl.col("step") == step) & (pl.col("worker") == worker)
        & pl.col("lane_kind").is_in(["device", "other", "stream_all"])
    )
    return (
        n.with_columns(end_ns=pl.col("start_ns") + pl.col("op_end_rel_ns"))
        .group_by("node_name")
        .agg(
            op_type=pl.col("op_type").first(),
            kernel=kernel_label_expr().first(),
            device=pl.col("device").first(),
            start_ns=pl.col("start_ns").min(),
            end_ns=pl.col("end_ns").max(),
            busy_ns=pl.col("op_end_rel_ns").sum(),
            executions=pl.len(),
        )
        .sort("start_ns")
    )


def _edge_bytes(run: Run, step: int, worker: str) -> pl.DataFrame:
    o = run.outputs.filter((pl.col("step") == step) & (pl.col("worker") == worker))
    n = run.nodes.filter((pl.col("step") == step) & (pl.col("worker") == worker))
    return (
        o.join(n.select("exec_idx", "node_name"), on="exec_idx")
        .group_by("node_name", "slot")
        .agg(bytes=pl.max_horizontal("requested_bytes", "allocated_bytes").max())
        .rename({"node_name": "src"})
    )


def step_edges(run: Run, step: int, worker: str | None = None) -> pl.DataFrame:
    """Edges between nodes that both executed in `step`, with tensor bytes on data edges."""
    worker = worker or run.workers[0]
    names = executed_nodes(run, step, worker).select("node_name")
    e = edges(run).filter(pl.col("worker") == worker)
    e = e.join(names, left_on="src", right_on="node_name", how="semi")
    e = e.join(names, left_on="dst", right_on="node_name", how="semi")
    e = e.filter(pl.col("src") != pl.col("dst"))
    return (
        e.join(_edge_bytes(run, step, worker), on=["src", "slot"], how="left")
        .with_columns(pl.col("bytes").fill_null(0))
        .group_by("src", "dst")
        .agg(bytes=pl.col("bytes").sum(), control=pl.col("control").all())
        .sort("src", "dst")
    )


def dataflow_graph(run: Run, step: int, worker: str | None = None) -> nx.DiGraph:
    """networkx DiGraph of one step: node attrs from executions, edge attrs bytes/control."""
    nodes = executed_nodes(run, step, worker)
    g = nx.DiGraph()
    g.add_nodes_from((r["node_name"], r) for r in nodes.iter_rows(named=True))
    g.add_edges_from(
        (r["src"], r["dst"], {"bytes": r["bytes"], "control": r["control"]})
        for r in step_edges(run, step, worker).iter_rows(named=True)
    )
    return g


@dataclass(frozen=True)
class CriticalPath:
    step: int
    worker: str
    ops: pl.DataFrame  # one row per execution on the path, in order (see critical_path)
    length_ns: int  # sum of the path's op times
    span_ns: int  # from the first op's start to the last op's end
    step_ns: int  # the step's time (analysis.steps.step_times), as summary gives it

    @property
    def share(self) -> float:
        """The path's op time as a share of the step."""
        return self.length_ns / self.step_ns if self.step_ns else 0.0


PATH_LANES = ["device", "other", "stream_all"]  # lane kinds whose executions a path follows


def _executions(run: Run, steps: list[int] | None, worker: str | None) -> pl.DataFrame:
    keep = pl.col("lane_kind").is_in(PATH_LANES)
    if steps is not None:
        keep &= pl.col("step").is_in(steps)
    if worker is not None:
        keep &= pl.col("worker") == worker
    away = outside(run)  # work outside the steps is on no step's path
    nodes = run.nodes.with_columns(away.alias("_outside")) if away.any() else run.nodes
    if away.any():
        keep &= ~pl.col("_outside")
    return nodes.filter(keep).select(
        "worker", "step", "exec_idx", "node_name", "op_type", "device", "start_ns",
        kernel=kernel_label_expr(),
        end_ns=pl.col("start_ns") + pl.col("op_end_rel_ns"),
        busy_ns=pl.col("op_end_rel_ns"),
    )


def _span(frame: pl.DataFrame) -> int:
    return int(frame.select(pl.col("end_ns").max() - pl.col("start_ns").min()).item())


def node_ids(x: pl.DataFrame) -> tuple[np.ndarray, pl.DataFrame]:
    """Integer node ids, in (worker, node_name) order, so that the walks key on integers:
    the id of each row of `x` (with worker, node_name), and the ids (worker, node_name,
    nid) for edge_pairs."""
    ids = (x.select("worker", "node_name").unique().sort("worker", "node_name")
           .with_row_index("nid"))
    nid = x.select("worker", "node_name").join(
        ids, on=["worker", "node_name"], how="left", maintain_order="left")["nid"]
    return nid.cast(pl.Int64).to_numpy(), ids


Edges = tuple[np.ndarray, np.ndarray]  # (src, dst) node ids, each pair once


def edge_pairs(ids: pl.DataFrame, e: pl.DataFrame) -> tuple[Edges, Edges]:
    """The data edges and all edges (data and control) of `e` (edges()) between the nodes
    of `ids` (node_ids), self-loops left out. Names are matched by their categorical codes
    (two polars joins cost more on frames this small)."""
    n, m = ids.height, e.height
    worker = shared_codes(ids.get_column("worker"), e.get_column("worker"))
    name = shared_codes(ids.get_column("node_name"), e.get_column("src"), e.get_column("dst"))
    key, k = combine([np.concatenate([worker, worker[n:]]), name])
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


def asof_last(key: np.ndarray, time: np.ndarray, q_key: np.ndarray, q_time: np.ndarray
              ) -> np.ndarray:
    """For each query (q_key, q_time), the index of the row with the same key and the
    greatest time <= q_time (the last row in index order on ties); -1 when there is none.
    Keys are small non-negative integers."""
    out = np.full(q_key.size, -1, np.int64)
    if not key.size or not q_key.size:
        return out
    width = max(int(key.max()), int(q_key.max())) + 1
    if width > 4 * (key.size + q_key.size) + 4096:
        return _asof_sorted(key, time, q_key, q_time)
    count = np.bincount(key, minlength=width)
    q_count = count[q_key]
    single = q_count == 1
    if 2 * int(np.count_nonzero(single)) < q_key.size:  # mostly keys of many rows
        levels = int(count.max()).bit_length()
        if levels <= BISECT_LEVELS:
            return _asof_blocks(key, time, q_key, q_time, count, levels)
        return _asof_sorted(key, time, q_key, q_time)
    # A key with one row (a node that ran once in the step) needs no search.
    only = np.zeros(width, np.int64)
    once = count[key] == 1
    only[key[once]] = np.flatnonzero(once)
    single = np.flatnonzero(single)
    cand = only[q_key[single]]
    hit = time[cand] <= q_time[single]
    out[single[hit]] = cand[hit]
    many = np.flatnonzero(q_count > 1)
    if many.size:
        rows = np.flatnonzero(~once)
        found = _asof_sorted(key[rows], time[rows], q_key[many], q_time[many])
        out[many] = np.where(found >= 0, rows[found], -1)
    return out


BISECT_LEVELS = 6  # keys of up to 2^6 - 1 rows: searched by bisection within their rows


def _asof_blocks(key: np.ndarray, time: np.ndarray, q_key: np.ndarray, q_time: np.ndarray,
                 count: np.ndarray, levels: int) -> np.ndarray:
    """asof_last by sorting the rows by (key, time) and bisecting each query's key's rows
    (count[k] rows of key k, at most 2^levels - 1), all queries at once, one level a round
    (branchless: each round halves every query's range): cheaper than a search of the whole
    array when keys have few rows."""
    lo_t = min(int(time.min()), int(q_time.min()))
    span = max(int(time.max()), int(q_time.max())) - lo_t + 1
    if (count.size + 1) * span >= 1 << 62:
        return _asof_sorted(key, time, q_key, q_time)
    order = np.argsort(key * span + (time - lo_t), kind="stable")  # ties in index order
    order = np.append(order, -1)  # past the last row: no row
    t = np.append(time[order[:-1]], np.iinfo(np.int64).max)
    first = np.zeros(count.size, np.int64)
    np.cumsum(count[:-1], out=first[1:])
    base, n = first[q_key], count[q_key]
    # Invariant: the answer is in [base, base + n) or there is none; t[base] <= q_time
    # unless base is still the first row of the key.
    for _ in range(levels):
        half = n >> 1
        probe = base + half
        base = np.where(t[probe] <= q_time, probe, base)
        n -= half
    return np.where((n > 0) & (t[base] <= q_time), order[base], -1)


def _asof_sorted(key: np.ndarray, time: np.ndarray, q_key: np.ndarray, q_time: np.ndarray
                 ) -> np.ndarray:
    """asof_last by sorting the rows by (key, time) and searching."""
    if not key.size or not q_key.size:
        return np.full(q_key.size, -1, np.int64)
    lo = min(int(time.min()), int(q_time.min()))
    span = max(int(time.max()), int(q_time.max())) - lo + 1
    if (max(int(key.max()), int(q_key.max())) + 1) * span >= 1 << 62:  # times by rank instead
        _, rank = np.unique(np.concatenate([time, q_time]), return_inverse=True)
        time, q_time = rank[:time.size].reshape(-1), rank[time.size:].reshape(-1)
        lo, span = 0, time.size + q_time.size
    both = key * span + (time - lo)
    order = np.argsort(both, kind="stable")  # ties in index order
    pos = np.searchsorted(both[order], q_key * span + (q_time - lo), side="right") - 1
    at = np.maximum(pos, 0)
    return np.where((pos >= 0) & (key[order[at]] == q_key), order[at], -1)


WALK_ROUNDS = 1000  # paths walked in lockstep up to this length; then all links at once
LINK_ROUNDS = 8  # rounds of searches before the few paths left are walked by lookups,
LINK_SHARE = 8  # ... when at most 1 / LINK_SHARE of them are left


def path_rows(group: np.ndarray, nid: np.ndarray, start: np.ndarray, end: np.ndarray,
              src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The critical path of each group of executions (a worker's step), see critical_path.

    Executions are rows: `group` (dense, in the order paths are wanted), `nid` (node id,
    in name order within a worker; ties break by it), start and end times. Edges
    src -> dst are node ids. Returns the rows on the paths, group by group, each path in
    order, and each row's position on its path."""
    n = group.size
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    links = _Links(group, nid, start, end, src, dst)
    # Each group's path ends at its execution that ends last (ties: name order, then row).
    groups = int(group.max()) + 1
    g_end = np.full(groups, np.iinfo(np.int64).min)
    np.maximum.at(g_end, group, end)
    last = end == g_end[group]
    g_nid = np.full(groups, links.nodes)
    np.minimum.at(g_nid, group[last], nid[last])
    last &= nid == g_nid[group]
    cand = np.flatnonzero(last)
    cand = cand[np.argsort(group[cand], kind="stable")]
    heads = cand[np.concatenate(([True], group[cand][1:] != group[cand][:-1]))]
    # Walk the paths back, all at once: each round links the head of every path to its
    # predecessor. A path stops at an execution without one (or one it already holds).
    # Most paths are short; once few are left, the predecessors of every execution of their
    # groups are found at once and the walk goes on by lookups (a round then costs a few
    # small array operations instead of a search).
    chain = np.arange(heads.size)
    seen = np.zeros(n, bool)
    seen[heads] = True
    walked_rows, walked_chain = [heads], [chain]
    back: np.ndarray | None = None
    for rounds in range(WALK_ROUNDS):
        if not heads.size:
            break
        if back is None and rounds >= LINK_ROUNDS and LINK_SHARE * heads.size <= groups:
            active = np.zeros(groups, bool)
            active[group[heads]] = True
            rest = np.flatnonzero(active[group])
            back = np.full(n, -1, np.int64)
            back[rest] = links.predecessors(rest)
        pred = links.predecessors(heads) if back is None else back[heads]
        keep = pred >= 0
        keep[keep] = ~seen[pred[keep]]
        heads, chain = pred[keep], chain[keep]
        seen[heads] = True
        walked_rows.append(heads)
        walked_chain.append(chain)
    rows = np.concatenate(walked_rows)
    chains = np.concatenate(walked_chain)
    depth = np.concatenate([np.full(r.size, i, np.int64) for i, r in enumerate(walked_rows)])
    if heads.size:  # long paths: link every execution, then follow the links in Python
        linked = (links.predecessors(np.arange(n)) if back is None else back).tolist()
        more_rows: list[int] = []
        more_chain: list[int] = []
        more_depth: list[int] = []
        for h, c in zip(heads.tolist(), chain.tolist(), strict=True):
            d = WALK_ROUNDS
            while (p := linked[h]) >= 0 and not seen[p]:
                seen[p] = True
                d += 1
                more_rows.append(p)
                more_chain.append(c)
                more_depth.append(d)
                h = p
        rows = np.concatenate([rows, np.asarray(more_rows, np.int64)])
        chains = np.concatenate([chains, np.asarray(more_chain, np.int64)])
        depth = np.concatenate([depth, np.asarray(more_depth, np.int64)])
    o = np.lexsort((-depth, chains))
    rows, chains, depth = rows[o], chains[o], depth[o]
    length = np.bincount(chains, minlength=int(chains.max()) + 1)
    return rows, length[chains] - 1 - depth


class _Links:
    """Each execution's predecessor: over its graph inputs, the input's execution (same
    group) that ended last at or before it started; ties: the input first in name order,
    then its last execution in row order."""

    def __init__(self, group: np.ndarray, nid: np.ndarray, start: np.ndarray,
                 end: np.ndarray, src: np.ndarray, dst: np.ndarray) -> None:
        self.nodes = int(max(nid.max(), src.max(initial=0), dst.max(initial=0))) + 1
        self.group, self.nid, self.start, self.end = group, nid, start, end
        by_dst = np.argsort(dst, kind="stable")
        self.e_src = src[by_dst]
        self.degree = np.bincount(dst, minlength=self.nodes)
        self.first_edge = np.concatenate([[0], np.cumsum(self.degree)])
        key = group * self.nodes + nid
        lo = min(int(start.min()), int(end.min()))
        span = max(int(start.max()), int(end.max())) - lo + 1
        t_end, t_start = end - lo, start - lo
        if (int(key.max()) + 1) * span >= 1 << 62:  # times by rank instead
            _, rank = np.unique(np.concatenate([end, start]), return_inverse=True)
            rank = rank.reshape(-1)
            t_end, t_start = rank[:end.size], rank[end.size:]
            span = 2 * end.size
        self.span, self.t_start = span, t_start
        both = key * span + t_end
        self.order = np.argsort(both, kind="stable")  # ties in row order
        self.sorted = both[self.order]

    def predecessors(self, rows: np.ndarray) -> np.ndarray:
        nid = self.nid[rows]
        count = self.degree[nid]
        q = np.repeat(np.arange(rows.size), count)  # one query per (row, input)
        q_rows = rows[q]
        before = np.cumsum(count) - count
        q_src = self.e_src[np.repeat(self.first_edge[nid] - before, count) + np.arange(q.size)]
        q_key = self.group[q_rows] * self.nodes + q_src
        pos = np.searchsorted(self.sorted, q_key * self.span + self.t_start[q_rows],
                              side="right") - 1
        ok = (pos >= 0) & (self.sorted[np.maximum(pos, 0)] // self.span == q_key)
        q, q_src, hit = q[ok], q_src[ok], self.order[pos[ok]]
        pred = np.full(rows.size, -1, np.int64)
        if q.size:  # q is sorted: each row's inputs are a run
            starts = np.flatnonzero(np.concatenate(([True], q[1:] != q[:-1])))
            size = np.diff(np.append(starts, q.size))
            h_end = self.end[hit]
            best = h_end == np.repeat(np.maximum.reduceat(h_end, starts), size)
            src_best = np.where(best, q_src, self.nodes)
            best &= src_best == np.repeat(np.minimum.reduceat(src_best, starts), size)
            pred[q[best]] = hit[best]
        return pred


def _path_executions(run: Run, x: pl.DataFrame) -> pl.DataFrame:
    """The rows of `x` (executions of any steps and workers) on the critical path of their
    (worker, step), in path order, with `wait_ns`. See critical_path for the rule."""
    nid, ids = node_ids(x)
    _, every = edge_pairs(ids, edges(run))
    group = x.select(pl.struct("worker", "step").rank("dense").cast(pl.Int64) - 1)
    start, end = x["start_ns"].to_numpy(), x["end_ns"].to_numpy()
    rows, order = path_rows(group.to_series().to_numpy(), nid, start, end, *every)
    return x[rows].with_columns(wait_ns=pl.Series(path_waits(start, end, rows, order)))


def path_waits(start: np.ndarray, end: np.ndarray, rows: np.ndarray, order: np.ndarray
               ) -> np.ndarray:
    """Per row of path_rows' paths: the time between its predecessor's end and its start,
    a wait the dataflow alone does not explain (a busy thread, a loop frame, a queue); 0
    for the first op of a path."""
    wait = np.zeros(rows.size, np.int64)
    wait[1:] = start[rows[1:]] - end[rows[:-1]]
    wait[order == 0] = 0
    return wait


def critical_paths(run: Run, steps: list[int] | None = None) -> pl.DataFrame:
    """The critical paths of many steps (every worker) at once: one row per execution on a
    path, in path order: worker, step, exec_idx, node_name, op_type (the graph's), device,
    start_ns, kernel (what ran, e.g. "_FusedConv2D (Conv2D+BiasAdd+Relu)"), end_ns, busy_ns,
    wait_ns. The same paths as critical_path, step by step."""
    return _path_executions(run, _executions(run, steps, None))


def critical_path(run: Run, step: int, worker: str | None = None) -> CriticalPath:
    """The chain of dependent executions that ends last in `step`.

    Works on executions, not nodes, so ops in a while loop (many executions a step) chain
    correctly. Each execution's predecessor is, over its graph inputs, the input execution
    that finished last before it started (the one it waited for); the path follows those
    links back from the execution that ends last. Ties break by node name.
    """
    return step_critical_paths(run, [step], worker)[0]


def step_critical_paths(run: Run, steps: list[int], worker: str | None = None
                        ) -> list[CriticalPath]:
    """critical_path of each of `steps` (one worker), computed in one pass: the executions
    are filtered once, not once a step (16 sampled steps of a 1M-execution run: 0.67 ->
    0.1 s)."""
    worker = worker or run.workers[0]
    x = _executions(run, steps, worker)
    paths = _path_executions(run, x) if x.height else x.with_columns(wait_ns=pl.lit(0))
    # The step's time is the one every output cites (analysis.steps), not the span of
    # the executions a path may follow.
    spans = dict(step_times(run).filter(pl.col("worker") == worker)
                 .select("step", "duration_ns").iter_rows())
    by_step = {key[0]: part.drop("worker", "step")
               for key, part in paths.partition_by("step", as_dict=True).items()}
    empty = paths.clear().drop("worker", "step")
    out = []
    for step in steps:
        ops = by_step.get(step, empty)
        out.append(CriticalPath(
            step=step, worker=worker, ops=ops, length_ns=int(ops["busy_ns"].sum()),
            span_ns=_span(ops) if ops.height else 0, step_ns=int(spans.get(step, 0))))
    return out
