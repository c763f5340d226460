"""RL101 expensive-ops."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from ..analyzer.analysis.codepaths import GRADIENT_SUFFIX, code_paths
from ..analyzer.analysis.jaxscopes import folded
from ..analyzer.model import kernel_label_expr
from ..analyzer.units import fmt_us
from .base import Analysis, Checker, Finding, Severity, pct, register

TOP = 5
DOMINANT = 0.20  # report when one kernel takes at least this share of op time


@register
class ExpensiveOps(Checker):
    """Where the step's time goes, when one kernel dominates (at least 20% of op time):
    one finding naming the top kernel (the op that actually ran, e.g. a fused
    `_FusedConv2D (Conv2D+BiasAdd+Relu)`), with the top kernels, name scopes and user
    code lines as its evidence.

    Why: optimization starts with the few things that take most of the time. Scopes are
    ranked by total time (everything under them), not by their own time, so a layer's
    cost shows as one number; a code line is the innermost frame of the user's code
    (not TensorFlow's) and counts its ops' gradients too. How to fix: look at the top
    entries first; the other checkers say what is wrong with them.
    """

    code = "RL101"
    name = "expensive-ops"
    title = "Most expensive kernels, scopes and code lines"
    severity = Severity.INFO

    def check(self, a: Analysis) -> Iterable[Finding]:
        nodes = a.nodes.filter(pl.col("micros") > 0)
        total_us = float(nodes["micros"].sum())
        if not total_us:
            return
        kernels = (nodes.with_columns(kernel=kernel_label_expr())
                   .group_by("kernel").agg(pl.col("micros").sum(), nodes=pl.len(),
                                           op_types=pl.col("op_type").unique().sort())
                   .sort(["micros", "kernel"], descending=[True, False]).head(TOP))
        top = kernels.row(0, named=True)
        if top["micros"] < DOMINANT * total_us:
            return  # time is spread over many kernels: nothing stands out
        scopes = _top_scopes(nodes)
        lines = _top_code_lines(a, nodes)
        also = []
        if scopes.height:
            s = scopes.row(0, named=True)
            also.append(f"top scope {s['scope']} {pct(s['micros'] / total_us)}")
        if lines:
            also.append(f"top code line {lines[0]['code']} {pct(lines[0]['micros'] / total_us)}")
        graph_types = [t for t in top["op_types"] if t != top["kernel"]]
        graph_note = f" (graph op type {', '.join(graph_types)})" if graph_types else ""
        # Markers that cover only the dispatch (sources/xplane_async.py) time no step.
        timed = not (a.step_times["kind"] == "dispatch").any()
        step_us = a.mean_step_us if timed else 0.0
        parallel = _over_step(a, nodes, total_us, step_us)
        evidence = {
            "kernels": [{**_row(r, total_us, a, "kernel", timed), "op_types": r["op_types"]}
                        for r in kernels.iter_rows(named=True)],
            "scopes": [_row(r, total_us, a, "scope", timed)
                       for r in scopes.iter_rows(named=True)],
            "code_lines": [_row(r, total_us, a, "code", timed) for r in lines],
            "op_time_us_per_step": total_us,
            "step_time_us": round(step_us, 1),
        }
        yield self.finding(
            f"{top['kernel']}{graph_note} takes {pct(top['micros'] / total_us)} of op time "
            f"({fmt_us(top['micros'])} per step over {top['nodes']} nodes)"
            + (f"; {', '.join(also)}" if also else "") + parallel,
            where={"op": top["kernel"], "scope": scopes["scope"][0] if scopes.height else None,
                   "code": lines[0]["code"] if lines else None},
            evidence={k: v for k, v in evidence.items() if v != []},
            suggestion="Start with the kernels, scopes and code lines at the top (`analyze "
                       "ops RUN`, `analyze scopes RUN --max-depth 2`, `analyze code RUN`); "
                       "the other findings say why they are slow.",
            impact=a.per_step(top["micros"]) if timed else 0.0,  # no step: no share
        )


def _over_step(a: Analysis, nodes: pl.DataFrame, total_us: float, step_us: float) -> str:
    """Why op time per step exceeds the step: on accelerators, ops ran in parallel
    (streams); on a CPU, op times are wall times summed over the threads that ran them,
    waiting for a core or a rendezvous included (the trace holds no core count)."""
    if not step_us or total_us <= step_us:
        return ""
    said = (f"; op time per step ({fmt_us(total_us)}) exceeds the step ({fmt_us(step_us)})")
    if float(nodes["accelerator_micros"].sum()):
        return said + " because ops ran in parallel, so shares of the step add up to more " \
                      "than 100%"
    threads = a.run.threads.group_by("worker", "step").agg(n=pl.col("thread_id").n_unique())
    n = int(threads.select(pl.col("n").max()).item() or 0) if threads.height else 0
    return (said + f": it is summed over {n} concurrent threads, waits included (the "
            "trace does not hold the core count), so shares of the step add up to more "
            "than 100%")


def _row(r: dict, total_us: float, a: Analysis, key: str, timed: bool = True) -> dict:
    row = {key: r[key], "micros": r["micros"],
           "share_of_op_time": round(r["micros"] / total_us, 4)}
    return {**row, "share_of_step": round(a.per_step(r["micros"]), 4)} if timed else row


def _top_scopes(nodes: pl.DataFrame) -> pl.DataFrame:
    """Top-level and second-level scopes by total time (nodes at the root do not count),
    as the scope view shows them: JAX's transform wrappers (`jit(f)/`, `jvp(...)`,
    `transpose(...)`) folded into the user's scope, forward and backward together."""
    nodes = folded(nodes, "name")
    parts = pl.col("name").str.split("/")
    scoped = nodes.filter(parts.list.len() > 1)
    level1 = scoped.select(scope=parts.list.first(), micros="micros")
    level2 = scoped.filter(parts.list.len() > 2).select(
        scope=parts.list.head(2).list.join("/"), micros="micros")
    both = pl.concat([level1, level2]).group_by("scope").agg(pl.col("micros").sum())
    return both.sort(["micros", "scope"], descending=[True, False]).head(TOP)


def _top_code_lines(a: Analysis, nodes: pl.DataFrame) -> list[dict]:
    """The user's code lines whose ops cost most: the innermost frame of each op's code
    path without library frames, as the code view shows it; a gradient op counts toward
    the forward op's line (analyzer.analysis.codepaths)."""
    if a.run.code.height == 0:
        return []
    paths = code_paths(a.run).filter(pl.col("user_path").list.len() > 0).select(
        "worker", "name",
        code=pl.col("user_path").list.last().str.strip_suffix(GRADIENT_SUFFIX))
    per_line = (
        nodes.join(paths, on=["worker", "name"])
        .group_by("code").agg(pl.col("micros").sum())
        .filter(pl.col("micros") > 0)
        .sort(["micros", "code"], descending=[True, False]).head(TOP)
    )
    return per_line.to_dicts()
