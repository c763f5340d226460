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
    (with worker, node_name) gains `nid`; edges (worker, src, dst) between nodes of x
    become (src_nid, dst_nid), self-loops left out."""
    ids = (x.select("worker", "node_name").unique().sort("worker", "node_name")
           .with_row_index("nid"))
    src = ids.select("worker", src="node_name", src_nid="nid")
    dst = ids.select("worker", dst="node_name", dst_nid="nid")
    e = (e.join(src, on=["worker", "src"]).join(dst, on=["worker", "dst"])
         .filter(pl.col("src_nid") != pl.col("dst_nid")).select("src_nid", "dst_nid"))
    return x.join(ids, on=["worker", "node_name"]), e


def _path_executions(run: Run, x: pl.DataFrame) -> pl.DataFrame:
    """The rows of `x` (executions of any steps and workers) on the critical path of their
    (worker, step), in path order, with `wait_ns`. See critical_path for the rule."""
    x = x.with_row_index("gid")
    x, e = number_nodes(x, edges(run).select("worker", "src", "dst").unique())
    waiting = (
        x.select("step", d_gid="gid", dst_nid="nid", d_start="start_ns")
        .join(e, on="dst_nid")
        .sort("d_start")
    )
    finished = x.select("step", s_gid="gid", src_nid="nid", s_end="end_ns")
    matched = waiting.join_asof(
        finished.sort("s_end"), left_on="d_start", right_on="s_end",
        by=["step", "src_nid"], strategy="backward", check_sortedness=False,
    ).drop_nulls("s_gid")
    # Ties: the source first in name order (nid follows it within a worker).
    pred_rows = (
        matched.sort(["d_gid", "s_end", "src_nid"], descending=[False, True, False])
        .unique(subset="d_gid", keep="first")
    )
    pred: list[int | None] = (
        x.select("gid").join(pred_rows.select("d_gid", "s_gid"), left_on="gid",
                             right_on="d_gid", how="left")
        .sort("gid").get_column("s_gid").to_list()
    )
    last = (
        x.sort(["end_ns", "node_name"], descending=[True, False])
        .group_by("worker", "step", maintain_order=True).agg(pl.col("gid").first())
        .get_column("gid").to_list()
    )
    gids: list[int] = []
    order: list[int] = []
    for g in last:
        chain = [g]
        seen = {g}
        while (p := pred[chain[-1]]) is not None and p not in seen:
            chain.append(p)
            seen.add(p)
        gids.extend(reversed(chain))
        order.extend(range(len(chain)))
    path = pl.DataFrame({"gid": gids, "order": order},
                        schema={"gid": pl.UInt32, "order": pl.Int64})
    return (
        x.join(path, on="gid").sort("worker", "step", "order").drop("gid", "nid", "order")
        # Time between the predecessor's end and this op's start: a wait the dataflow
        # alone does not explain (a busy thread, a loop frame, a queue).
        .with_columns(wait_ns=(pl.col("start_ns") - pl.col("end_ns").shift(1))
                      .over("worker", "step").fill_null(0))
    )


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
