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

from analyzer.model import Run


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
    step_ns: int

    @property
    def share(self) -> float:
        """The path's op time as a share of the step."""
        return self.length_ns / self.step_ns if self.step_ns else 0.0


def _executions(run: Run, steps: list[int] | None, worker: str | None) -> pl.DataFrame:
    keep = pl.col("lane_kind").is_in(["device", "other", "stream_all"])
    if steps is not None:
        keep &= pl.col("step").is_in(steps)
    if worker is not None:
        keep &= pl.col("worker") == worker
    return run.nodes.filter(keep).select(
        "worker", "step", "exec_idx", "node_name", "op_type", "device", "start_ns",
        end_ns=pl.col("start_ns") + pl.col("op_end_rel_ns"),
        busy_ns=pl.col("op_end_rel_ns"),
    )


def _span(frame: pl.DataFrame) -> int:
    return int(frame.select(pl.col("end_ns").max() - pl.col("start_ns").min()).item())


def number_nodes(x: pl.DataFrame, e: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Integer node ids, in (worker, name) order, so that joins key on integers: `x`
    (with worker, node_name) gains `nid` (rows in their order); edges (worker, src, dst)
    between nodes of x become (src_nid, dst_nid), self-loops left out."""
    ids = (x.select("worker", "node_name").unique().sort("worker", "node_name")
           .with_row_index("nid"))
    return x.join(ids, on=["worker", "node_name"], maintain_order="left"), edge_ids(ids, e)


def edge_ids(ids: pl.DataFrame, e: pl.DataFrame) -> pl.DataFrame:
    """Edges (worker, src, dst) as (src_nid, dst_nid) between the nodes of `ids` (worker,
    node_name, nid), self-loops left out."""
    src = ids.select("worker", src="node_name", src_nid="nid")
    dst = ids.select("worker", dst="node_name", dst_nid="nid")
    return (e.join(src, on=["worker", "src"]).join(dst, on=["worker", "dst"])
            .filter(pl.col("src_nid") != pl.col("dst_nid")).select("src_nid", "dst_nid"))


def asof_last(key: np.ndarray, time: np.ndarray, q_key: np.ndarray, q_time: np.ndarray
              ) -> np.ndarray:
    """For each query (q_key, q_time), the index of the row with the same key and the
    greatest time <= q_time (the last row in index order on ties); -1 when there is none."""
    out = np.full(q_key.size, -1, np.int64)
    if not key.size or not q_key.size:
        return out
    lo = min(int(time.min()), int(q_time.min()))
    span = max(int(time.max()), int(q_time.max())) - lo + 1
    if (max(int(key.max()), int(q_key.max())) + 1) * span >= 1 << 62:  # times by rank instead
        _, rank = np.unique(np.concatenate([time, q_time]), return_inverse=True)
        time, q_time = rank[:time.size].reshape(-1), rank[time.size:].reshape(-1)
        lo, span = 0, time.size + q_time.size
    both = key * span + (time - lo)
    order = np.argsort(both, kind="stable")  # ties in index order
    both = both[order]
    pos = np.searchsorted(both, q_key * span + (q_time - lo), side="right") - 1
    ok = pos >= 0
    ok[ok] = both[pos[ok]] // span == q_key[ok]
    out[ok] = order[pos[ok]]
    return out


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
    nodes = int(max(nid.max(), src.max(initial=0), dst.max(initial=0))) + 1
    by_dst = np.argsort(dst, kind="stable")
    e_src = src[by_dst]
    degree = np.bincount(dst, minlength=nodes)
    first_edge = np.concatenate([[0], np.cumsum(degree)])
    # One query per (execution, input edge): the input's execution that ended last before
    # this one started.
    count = degree[nid]
    q_row = np.repeat(np.arange(n), count)
    within = np.arange(q_row.size) - np.repeat(np.cumsum(count) - count, count)
    q_src = e_src[first_edge[nid[q_row]] + within]
    hit = asof_last(group * nodes + nid, end, group[q_row] * nodes + q_src, start[q_row])
    found = hit >= 0
    q_row, q_src, hit = q_row[found], q_src[found], hit[found]
    # Over the inputs: the one that ended last; ties: the source first in name order.
    pred = np.full(n, -1, np.int64)
    if q_row.size:  # q_row is sorted: each execution's queries are a run
        starts = np.flatnonzero(np.r_[True, q_row[1:] != q_row[:-1]])
        size = np.diff(np.r_[starts, q_row.size])
        h_end = end[hit]
        best = h_end == np.repeat(np.maximum.reduceat(h_end, starts), size)
        src_best = np.where(best, q_src, nodes)
        best &= src_best == np.repeat(np.minimum.reduceat(src_best, starts), size)
        pred[q_row[best]] = hit[best]
    # Each group's path ends at its execution that ends last (ties: name order, then row).
    groups = int(group.max()) + 1
    g_end = np.full(groups, np.iinfo(np.int64).min)
    np.maximum.at(g_end, group, end)
    last = end == g_end[group]
    g_nid = np.full(groups, nodes)
    np.minimum.at(g_nid, group[last], nid[last])
    last &= nid == g_nid[group]
    cand = np.flatnonzero(last)
    cand = cand[np.argsort(group[cand], kind="stable")]
    lasts = cand[np.r_[True, group[cand][1:] != group[cand][:-1]]].tolist()
    back = pred.tolist()
    rows: list[int] = []
    order: list[int] = []
    for last in lasts:
        chain = [last]
        seen = {last}
        while (p := back[chain[-1]]) >= 0 and p not in seen:
            chain.append(p)
            seen.add(p)
        rows.extend(reversed(chain))
        order.extend(range(len(chain)))
    return np.asarray(rows, np.int64), np.asarray(order, np.int64)


def _path_executions(run: Run, x: pl.DataFrame) -> pl.DataFrame:
    """The rows of `x` (executions of any steps and workers) on the critical path of their
    (worker, step), in path order, with `wait_ns`. See critical_path for the rule."""
    x, e = number_nodes(x, edges(run).select("worker", "src", "dst").unique())
    group = x.select(pl.struct("worker", "step").rank("dense").cast(pl.Int64) - 1)
    rows, order = path_rows(
        group.to_series().to_numpy(), x["nid"].cast(pl.Int64).to_numpy(),
        x["start_ns"].to_numpy(), x["end_ns"].to_numpy(),
        e["src_nid"].cast(pl.Int64).to_numpy(), e["dst_nid"].cast(pl.Int64).to_numpy())
    path = x.drop("nid")[rows]
    start, end = path["start_ns"].to_numpy(), path["end_ns"].to_numpy()
    # Time between the predecessor's end and this op's start: a wait the dataflow alone
    # does not explain (a busy thread, a loop frame, a queue).
    wait = np.zeros(rows.size, np.int64)
    wait[1:] = start[1:] - end[:-1]
    wait[order == 0] = 0
    return path.with_columns(wait_ns=pl.Series(wait))


def critical_paths(run: Run, steps: list[int] | None = None) -> pl.DataFrame:
    """The critical paths of many steps (every worker) at once: one row per execution on a
    path, in path order: worker, step, exec_idx, node_name, op_type, device, start_ns,
    end_ns, busy_ns, wait_ns. The same paths as critical_path, step by step."""
    return _path_executions(run, _executions(run, steps, None))


def critical_path(run: Run, step: int, worker: str | None = None) -> CriticalPath:
    """The chain of dependent executions that ends last in `step`.

    Works on executions, not nodes, so ops in a while loop (many executions a step) chain
    correctly. Each execution's predecessor is, over its graph inputs, the input execution
    that finished last before it started (the one it waited for); the path follows those
    links back from the execution that ends last. Ties break by node name.
    """
    worker = worker or run.workers[0]
    x = _executions(run, [step], worker)
    if x.height == 0:
        return CriticalPath(step, worker, x.drop("worker", "step"), 0, 0, 0)
    ops = _path_executions(run, x).drop("worker", "step")
    return CriticalPath(
        step=step,
        worker=worker,
        ops=ops,
        length_ns=int(ops["busy_ns"].sum()),
        span_ns=_span(ops),
        step_ns=_span(x),
    )
