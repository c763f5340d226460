"""RL101 expensive-ops."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from ..analyzer.analysis.codepaths import (
    GRADIENT_SUFFIX,
    code_paths,
    qualified_names,
    with_qualnames,
)
from ..analyzer.analysis.collectives import WAIT_TYPE
from ..analyzer.analysis.jaxscopes import folded
from ..analyzer.model import TIMED_LANES, kernel_label_expr
from ..analyzer.units import fmt_us
from .base import Analysis, Checker, Finding, Severity, pct, register

TOP = 5
DOMINANT = 0.20  # report when one kernel takes at least this share of op time


@register
class ExpensiveOps(Checker):
    """Where the step's time goes, when one kernel dominates (at least 20% of op time):
    one finding naming the top kernel (the op that actually ran, e.g. a fused
    `_FusedConv2D (Conv2D+BiasAdd+Relu)`), with the top kernels, name scopes and user
    code lines as its evidence. The wait for peers in collectives (op type `peer-wait`)
    is left out: collective-wait (RL117) reports it.

    Why: optimization starts with the few things that take most of the time. Scopes are
    ranked by total time (everything under them), not by their own time, so a layer's
    cost shows as one number; a code line is the innermost frame of the user's code
    (not TensorFlow's) and counts its ops' gradients too. Op time summed over several
    devices or workers is not one device's step: when it exceeds the step, shares of the
    step are of their N steps together, and the finding says "summed over N devices".
    How to fix: look at the top entries first; the other checkers say what is wrong with
    them.
    """

    code = "RL101"
    name = "expensive-ops"
    title = "Most expensive kernels, scopes and code lines"
    severity = Severity.INFO

    def check(self, a: Analysis) -> Iterable[Finding]:
        # The wait for peers in collectives is no kernel to optimize: RL117's.
        nodes = a.nodes.filter((pl.col("micros") > 0) & (pl.col("op_type") != WAIT_TYPE))
        total_us = float(nodes["micros"].sum())
        if not total_us:
            return
        kernels = (nodes.with_columns(kernel=kernel_label_expr())
                   .group_by("kernel").agg(_sum_us(), nodes=pl.len(),
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
        workers = a.workers  # op time is summed over workers; each has its own step
        per_worker = total_us / workers
        each = f" a worker (mean over {workers})" if workers > 1 else ""
        devices = _devices(a)  # (worker, device) pairs with op time
        scale = workers  # shares of one worker's step
        if step_us and per_worker > step_us and len(devices) > workers:
            # Op time summed over several devices of a worker is not one device's step:
            # its shares are of their steps together.
            scale = len(devices)
            parallel = (f"; op time per step{each} ({fmt_us(per_worker)}) is summed over "
                        f"{scale} devices ({', '.join(devices)}), so shares of the step are "
                        f"of their {scale} steps together ({fmt_us(scale / workers * step_us)}"
                        f"{' a worker' if workers > 1 else ''})")
        else:
            parallel = _over_step(a, nodes, per_worker, step_us, each)
        shared = scale if timed else 0  # 0: no step, no share of it
        evidence = {
            "kernels": [{**_row(r, total_us, a, "kernel", shared), "op_types": r["op_types"]}
                        for r in kernels.iter_rows(named=True)],
            "scopes": [_row(r, total_us, a, "scope", shared)
                       for r in scopes.iter_rows(named=True)],
            "code_lines": [_row(r, total_us, a, "code", shared) for r in lines],
            "op_time_us_per_step": total_us,
            "op_time_us_per_worker_step": round(per_worker, 1),
            "workers": workers,
            "mean_step_us": round(step_us, 1),  # over the analysed steps (summary's mean)
            **({"summed_over_devices": scale} if scale > workers else {}),
        }
        yield self.finding(
            f"{top['kernel']}{graph_note} takes {pct(top['micros'] / total_us)} of op time "
            f"({fmt_us(top['micros'] / workers)} per step{each} over {top['nodes']} nodes)"
            + (f"; {', '.join(also)}" if also else "") + parallel,
            where={"op": top["kernel"], "scope": scopes["scope"][0] if scopes.height else None,
                   "code": lines[0]["code"] if lines else None},
            evidence={k: v for k, v in evidence.items() if v != []},
            suggestion="Start with the kernels, scopes and code lines at the top (`analyze "
                       "ops RUN`, `analyze scopes RUN --max-depth 2`, `analyze code RUN`); "
                       "the other findings say why they are slow.",
            impact=a.per_step(top["micros"]) / scale if timed else 0.0,  # no step: no share
        )


def _over_step(a: Analysis, nodes: pl.DataFrame, total_us: float, step_us: float,
               each: str = "") -> str:
    """Why op time per step (`each`: of a worker) exceeds the step: on accelerators, ops
    ran in parallel (streams); on a CPU, op times are wall times summed over the threads
    that ran them, waiting for a core or a rendezvous included (the trace holds no core
    count)."""
    if not step_us or total_us <= step_us:
        return ""
    said = (f"; op time per step{each} ({fmt_us(total_us)}) exceeds the step "
            f"({fmt_us(step_us)})")
    if float(nodes["accelerator_micros"].sum()):
        return said + " because ops ran in parallel, so shares of the step add up to more " \
                      "than 100%"
    threads = a.run.threads.group_by("worker", "step").agg(n=pl.col("thread_id").n_unique())
    n = int(threads.select(pl.col("n").max()).item() or 0) if threads.height else 0
    return (said + f": it is summed over {n} concurrent threads, waits included (the "
            "trace does not hold the core count), so shares of the step add up to more "
            "than 100%")


def _row(r: dict, total_us: float, a: Analysis, key: str, scale: int = 1) -> dict:
    """A row's time, its share of op time and (`scale` > 0) of the step: of `scale`
    workers' or devices' steps together; 0: the run times no step."""
    row = {key: r[key], "micros": r["micros"],
           "share_of_op_time": round(r["micros"] / total_us, 4)}
    return ({**row, "share_of_step": round(a.per_step(r["micros"]) / scale, 4)} if scale
            else row)


def _devices(a: Analysis) -> list[str]:
    """The (worker, device) pairs whose executions carry op time (CPU and accelerator
    lanes, tfprof's), as "device" or "worker device" when there are several workers."""
    counted = pl.col("lane_kind").is_in(TIMED_LANES) & (pl.col("op_end_rel_ns") > 0)
    pairs = (a.run.nodes_lazy().filter(counted).select("worker", "device").unique()
             .sort("worker", "device").collect())
    several = pairs.get_column("worker").n_unique() > 1
    return [f"{w} {d}" if several else d for w, d in pairs.iter_rows()]


def _sum_us() -> pl.Expr:
    """A group's microseconds, summed to the picosecond (XSpace's unit): a float sum's last
    bits depend on the order polars' threads add the rows in, and the same input must
    print the same bytes."""
    return pl.col("micros").sum().round(6)


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
    both = pl.concat([level1, level2]).group_by("scope").agg(_sum_us())
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
        .group_by("code").agg(_sum_us())
        .filter(pl.col("micros") > 0)
        .sort(["micros", "code"], descending=[True, False]).head(TOP)
    )
    # The line by its full qualified name (the code view's rows cut the function's).
    return (with_qualnames(per_line, "code", qualified_names(a.run))
            .with_columns(code=pl.coalesce("qualname", "code")).drop("qualname").to_dicts())
