"""Machine speed between two runs: one machine-wide factor, and a factor per node-duration
class turned into one factor per compared metric.

One factor per run (machine_factor) cannot absorb a per-op overhead: in one
same-config process every tiny op ran 3-4x slower (GradientDescent update nodes 11 us
against 3.5, AddN 16 against 3) while MatMuls ran 1.4x and the median step was unchanged,
so a scope of many tiny ops (`train/GradientDescent`) was called a regression (docs/ci.md,
issue 11). Here the nodes are put in classes by their base median time (log2 bins, merged
until each holds BIN_MIN_NODES nodes); each class's factor is the median new/base ratio of
its nodes (robust: a real regression touches few nodes of each class). A metric's factor
is what its nodes' new medians would be at base speed: sum(new) / sum(new / class factor)
over the metric's nodes, so a scope of tiny ops is divided by the tiny ops' factor and a
scope of MatMuls by theirs. A scope's nodes are divided by their peers' speed instead
(the same kernel and size outside the scope, LEAVE_OUT), so its own regression cannot
set the factor it is divided by.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

FACTOR_MIN_NODES = 5
FACTOR_MIN_US = 5.0
FACTOR_OUTLIER = 1.5  # nodes whose ratio is this far from the first estimate changed locally

BY_SIZE = True  # False: every metric divided by the one machine-wide factor (as before)
# A scope's own nodes do not set the factor they are divided by: "op" (shipped) divides
# each by the median ratio of its peers, the other nodes of the same op type and log2 bin
# outside the scope (at least LEAVE_OUT_MIN; else its class's factor). Without this a
# scope holding most nodes of its size classes (the MLP's train/gradients: 5 of the 8
# nodes of 64-128 us) moves those factors with it and a 2x regression there is divided
# out (docs/ci.md, "A scope against its peers"). Rejected, kept for the study script:
# "bin" (peers of any op type: a process that ran one kernel 3x slower, tf_base_a's
# optimizer updates, was then called a regression), "class" (within the merged classes,
# which mix sizes whose speed moves differently), "merged" (every metric's classes merged
# again from the other nodes: tripled the MLP's false alarms). None: class factors only.
LEAVE_OUT: str | None = "op"
LEAVE_OUT_MIN = 3  # peers needed: at >= 64 us three agree within 3%
BIN_MIN_NODES = 8  # fewer nodes in a log2 class: merged with the next larger class
BIN_OUTLIER = 1.5  # nodes this far from the class's first estimate changed locally
MIN_US = 1.0  # the trace's resolution: nodes below it carry no timing


def machine_factor(base: Any, new: Any) -> tuple[float, int]:
    """The machine-wide speed factor between two runs (analyzer.gate.samples.Samples), and
    how many nodes it rests on.

    The median new/base time ratio over nodes with real time in both runs; then again
    without the nodes whose ratio is more than FACTOR_OUTLIER away from that first
    estimate (they changed locally, e.g. the layer that regressed), so that a local change
    in a small model does not pass for machine noise. 1.0 when too few nodes qualify.
    """
    timed = pl.col("median_us") >= FACTOR_MIN_US
    both = (base.node_medians.filter(timed).select("name", "median_us")
            .join(new.node_medians.filter(timed).select("name", "median_us"), on="name",
                  suffix="_new")
            .with_columns(ratio=pl.col("median_us_new") / pl.col("median_us")))
    if both.height < FACTOR_MIN_NODES:
        return 1.0, both.height
    first = float(both["ratio"].median())  # type: ignore[arg-type]
    steady = both.filter((pl.col("ratio") / first).is_between(1 / FACTOR_OUTLIER,
                                                              FACTOR_OUTLIER))
    if steady.height < FACTOR_MIN_NODES:
        return first, both.height
    return float(steady["ratio"].median()), steady.height  # type: ignore[arg-type]


def _ratio_median(ratios: np.ndarray) -> float:
    """Median ratio, again without the ratios BIN_OUTLIER away from the first estimate."""
    first = float(np.median(ratios))
    steady = ratios[(ratios / first >= 1 / BIN_OUTLIER) & (ratios / first <= BIN_OUTLIER)]
    return float(np.median(steady)) if steady.size >= BIN_MIN_NODES // 2 else first


def class_factors(b: np.ndarray, ratio: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Classes of nodes by base median `b` (ascending): (upper bound in us, factor) per
    class; None when fewer than BIN_MIN_NODES nodes."""
    if b.size < BIN_MIN_NODES:
        return None
    log_bin = np.floor(np.log2(b)).astype(int)
    groups: list[list[int]] = []  # [first index, end index, log2 bin of the last node]
    for i, lb in enumerate(log_bin):
        if groups and (groups[-1][1] - groups[-1][0] < BIN_MIN_NODES or groups[-1][2] == lb):
            groups[-1][1:] = [i + 1, int(lb)]
        else:
            groups.append([i, i + 1, int(lb)])
    if len(groups) > 1 and groups[-1][1] - groups[-1][0] < BIN_MIN_NODES:
        last = groups.pop()
        groups[-1][1:] = last[1:]
    return (np.array([2.0 ** (lb + 1) for _, _, lb in groups]),
            np.array([_ratio_median(ratio[a:z]) for a, z, _ in groups]))


def _at_speed(b: np.ndarray, new: np.ndarray, classes: tuple[np.ndarray, np.ndarray] | None,
              fallback: float) -> float:
    """sum(new) / sum(new / the factor of each node's class)."""
    if classes is None or not b.size:
        return fallback
    uppers, factors = classes
    cls = np.minimum(np.searchsorted(uppers, b, side="right"), len(uppers) - 1)
    at_base = float(np.sum(new / factors[cls]))
    f = float(np.sum(new)) / at_base if at_base > 0 else fallback
    return f if np.isfinite(f) and f > 0 else fallback


def metric_factors(keys: list[tuple[str, str]], base_nm: pl.DataFrame,
                   new_nm: pl.DataFrame, fallback: float, detail: bool = False
                   ) -> tuple[np.ndarray, ...]:
    """One factor per (kind, name) metric from the classes of the nodes timed in both runs
    (a scope's nodes by their peers where they have them, LEAVE_OUT): scope, the nodes
    under it; op type, its nodes when both sides know node op types (else as op time);
    op time, every node.
    Step time, and every metric when BY_SIZE is off or nodes are too few: `fallback`
    (the machine-wide factor). Second array: the share of each scope's new time whose
    factor came from its peers (other nodes of the same kernel and size; 0 elsewhere).
    With `detail`, two more: how many of the metric's own nodes the classes divided
    (0: the fallback), and how many peer nodes set the speed of the rest."""
    out = np.full(len(keys), fallback, dtype=float)
    no_peers = np.zeros(len(keys))
    none = (np.zeros(len(keys)), np.zeros(len(keys))) if detail else ()
    by_op = "op_type" in base_nm.columns and "op_type" in new_nm.columns
    nodes = (new_nm.select(["name", "median_us"] + (["op_type"] if by_op else []))
             .rename({"median_us": "new_us"})
             .join(base_nm.select("name", base_us="median_us"), on="name")
             .filter((pl.col("base_us") >= MIN_US) & (pl.col("new_us") >= MIN_US))
             .sort("base_us", "name"))
    if not BY_SIZE or nodes.height < BIN_MIN_NODES:
        return (out, no_peers, *none)
    b, new = nodes["base_us"].to_numpy(), nodes["new_us"].to_numpy()
    every = class_factors(b, new / b)
    if LEAVE_OUT == "merged":
        return (_left_out_factors(keys, nodes, every, fallback, by_op), no_peers, *none)
    uppers, factors = every  # type: ignore[misc]  # not None: enough nodes (above)
    cls = np.minimum(np.searchsorted(uppers, b, side="right"), len(uppers) - 1)
    # Each node's new median and what it would be at its class's base speed; a metric's
    # factor is the ratio of their sums over the metric's nodes.
    # Peers: the same kernel at the same size elsewhere ("op"); without node op types
    # there are none ("bin", peers of any kernel, was rejected) and every node keeps its
    # class's factor, as before peers.
    by_peers = LEAVE_OUT in ("bin", "class") or (LEAVE_OUT == "op" and by_op)
    nodes = nodes.with_columns(
        at_base=pl.Series(new / factors[cls]), ratio=pl.Series(new / b),
        group=pl.Series(cls if LEAVE_OUT == "class" else np.floor(np.log2(b)).astype(int)))
    if LEAVE_OUT == "op" and by_op:
        nodes = nodes.with_columns(group=pl.format("{}:{}", "group", "op_type"))
    parts = pl.col("name").str.split("/")
    scopes = (nodes.filter(parts.list.len() > 1)
              .with_columns(level=pl.int_ranges(1, parts.list.len())).explode("level")
              .select(kind=pl.lit("scope"),
                      metric=pl.col("name").str.split("/").list.head(pl.col("level"))
                      .list.join("/"), name="name", group="group", new_us="new_us",
                      at_base="at_base", peer_us=pl.lit(0.0), peer_n=pl.lit(0)))
    if by_peers:
        scopes = _scopes_left_out(scopes, nodes)
    scopes = scopes.select("kind", "metric", "group", "new_us", "at_base", "peer_us",
                           "peer_n")
    plain: dict[str, pl.Expr] = {
        "group": pl.lit(None, scopes.schema["group"]), "new_us": pl.col("new_us"),
        "at_base": pl.col("at_base"), "peer_us": pl.lit(0.0), "peer_n": pl.lit(0)}
    groups = [scopes, nodes.select(kind=pl.lit("step"), metric=pl.lit("op time"), **plain)]
    if by_op:
        groups.append(nodes.select(kind=pl.lit("op"), metric="op_type", **plain))
    sums = (pl.concat(groups, how="vertical_relaxed").group_by("kind", "metric")
            .agg(f=pl.col("new_us").sum() / pl.col("at_base").sum(),
                 peers=pl.col("peer_us").sum() / pl.col("new_us").sum(), own=pl.len(),
                 peer_nodes=pl.struct("group", "peer_n").unique().struct.field("peer_n")
                 .sum()))
    wanted = pl.DataFrame({"kind": [k for k, _ in keys], "metric": [n for _, n in keys]},
                          schema={"kind": pl.String, "metric": pl.String})
    if not by_op:  # op types without node op types: op time's factor
        wanted = wanted.with_columns(metric=pl.when(pl.col("kind") == "op")
                                     .then(pl.lit("op time")).otherwise("metric"),
                                     kind=pl.when(pl.col("kind") == "op").then(pl.lit("step"))
                                     .otherwise("kind"))
    found = wanted.join(sums, on=["kind", "metric"], how="left", maintain_order="left")
    got = found["f"].to_numpy().astype(float)
    peers = np.nan_to_num(found["peers"].to_numpy().astype(float))
    factors = np.where(np.isfinite(got) & (got > 0), got, fallback)
    if not detail:
        return factors, peers
    own = np.where(np.isfinite(got) & (got > 0), found["own"].fill_null(0).to_numpy(), 0)
    return factors, peers, own, found["peer_nodes"].fill_null(0).to_numpy()


def _scopes_left_out(scopes: pl.DataFrame, nodes: pl.DataFrame) -> pl.DataFrame:
    """Each scope's nodes at the speed of the other nodes of their group (op type and log2
    bin for LEAVE_OUT "op"), where the group has at least LEAVE_OUT_MIN others (the
    peers; `peer_us` counts that time); elsewhere at their class's speed.
    The factor is _ratio_median's, per (scope, group), over the group's other nodes."""
    keys = ["metric", "group"]
    touched = (scopes.group_by(keys).agg(inside=pl.len())
               .join(nodes.group_by("group").agg(every=pl.len()), on="group")
               .filter(pl.col("every") - pl.col("inside") >= LEAVE_OUT_MIN))
    others = (touched.select(keys).join(nodes.select("group", "name", "ratio"), on="group")
              .join(scopes.select("metric", "name"), on=["metric", "name"], how="anti"))
    first = others.group_by(keys).agg(first=pl.col("ratio").median(), k=pl.len())
    near = pl.col("ratio") / pl.col("first")
    steady = (others.join(first, on=keys)
              .filter((near >= 1 / BIN_OUTLIER) & (near <= BIN_OUTLIER))
              .group_by(keys).agg(steady=pl.col("ratio").median(), n=pl.len()))
    factor = first.join(steady, on=keys, how="left").select(
        *keys, "k", f=pl.when(pl.col("n") >= BIN_MIN_NODES // 2).then("steady")
        .otherwise("first"))
    peer = pl.col("f").is_not_null()
    return (scopes.join(factor, on=keys, how="left")
            .with_columns(at_base=pl.when(peer).then(pl.col("new_us") / pl.col("f"))
                          .otherwise("at_base"),
                          peer_us=pl.when(peer).then("new_us").otherwise(0.0),
                          peer_n=pl.when(peer).then("k").otherwise(0)))


def _left_out_factors(keys: list[tuple[str, str]], nodes: pl.DataFrame,
                      every: tuple[np.ndarray, np.ndarray] | None, fallback: float,
                      by_op: bool) -> np.ndarray:
    """LEAVE_OUT (the rejected variant, kept for benchmarks/ci_validation.py --leave-out):
    each metric's classes measured again without its own nodes, one metric at a time."""
    out = np.full(len(keys), fallback, dtype=float)
    b, new = nodes["base_us"].to_numpy(), nodes["new_us"].to_numpy()
    ratio = new / b
    names = nodes["name"].to_numpy().astype(str)
    ops = nodes["op_type"].to_numpy().astype(str) if by_op else None
    all_nodes = _at_speed(b, new, every, fallback)

    def factor(member: np.ndarray) -> float:
        if not member.any():
            return fallback
        return _at_speed(b[member], new[member], class_factors(b[~member], ratio[~member]),
                         fallback)

    for i, (kind, name) in enumerate(keys):
        if kind == "scope":
            out[i] = factor(np.char.startswith(names, name + "/"))
        elif kind == "op":
            out[i] = factor(ops == name) if ops is not None else all_nodes
        elif name != "step time":
            out[i] = all_nodes
    return out
