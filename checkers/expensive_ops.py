"""RL101 expensive-ops."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from checkers.base import Analysis, Checker, Finding, Severity, pct, register

TOP = 5
DOMINANT = 0.20  # report when one op type takes at least this share of op time


@register
class ExpensiveOps(Checker):
    """Where the step's time goes, when an op type dominates (at least 20% of op time):
    the top op types, name scopes and Python code lines.

    Why: optimization starts with the few things that take most of the time. Scopes are
    ranked by total time (everything under them), not by their own time, so a layer's
    cost shows as one number. How to fix: look at the top entries first; the other
    checkers say what is wrong with them.
    """

    code = "RL101"
    name = "expensive-ops"
    title = "Most expensive op types, scopes and code lines"
    severity = Severity.INFO

    def check(self, a: Analysis) -> Iterable[Finding]:
        nodes = a.nodes.filter(pl.col("micros") > 0)
        total_us = float(nodes["micros"].sum())
        if not total_us:
            return
        op_types = (nodes.group_by("op_type").agg(pl.col("micros").sum(), nodes=pl.len())
                    .sort(["micros", "op_type"], descending=[True, False]).head(TOP))
        top = op_types.row(0, named=True)
        if top["micros"] < DOMINANT * total_us:
            return  # time is spread over many op types: nothing stands out
        yield self.finding(
            f"{top['op_type']} takes {pct(top['micros'] / total_us)} of op time "
            f"({top['micros']:.0f}us per step over {top['nodes']} nodes)",
            where={"op": top["op_type"]},
            evidence={"op_types": [_row(r, total_us, a, "op_type") for r in op_types.iter_rows(
                named=True)], "op_time_us_per_step": total_us,
                "step_time_us": round(a.mean_step_us, 1)},
            suggestion="Start with the op types at the top; see the other findings for why "
                       "they are slow.",
            impact=a.per_step(top["micros"]),
        )
        scopes = _top_scopes(nodes)
        if scopes.height:
            s = scopes.row(0, named=True)
            yield self.finding(
                f"scope {s['scope']} takes {pct(s['micros'] / total_us)} of op time "
                f"({s['micros']:.0f}us per step, including everything under it)",
                where={"scope": s["scope"]},
                evidence={"scopes": [_row(r, total_us, a, "scope")
                                     for r in scopes.iter_rows(named=True)]},
                suggestion="Drill down with `analyze scopes RUN --start-name-regexes "
                           f"'{s['scope']}' --max-depth 4`.",
                impact=a.per_step(s["micros"]),
            )
        lines = _top_code_lines(a)
        if lines:
            c = lines[0]
            yield self.finding(
                f"code {c['name']} creates ops taking {pct(c['micros'] / total_us)} of op "
                f"time ({c['micros']:.0f}us per step)",
                where={"code": c["name"]},
                evidence={"code_lines": [{"code": r["name"], "micros": r["micros"],
                                          "share_of_op_time": round(r["micros"] / total_us, 4)}
                                         for r in lines]},
                suggestion="`analyze code RUN` shows the full call stacks.",
                impact=a.per_step(c["micros"]),
            )


def _row(r: dict, total_us: float, a: Analysis, key: str) -> dict:
    return {key: r[key], "micros": r["micros"],
            "share_of_op_time": round(r["micros"] / total_us, 4),
            "share_of_step": round(a.per_step(r["micros"]), 4)}


def _top_scopes(nodes: pl.DataFrame) -> pl.DataFrame:
    """Top-level and second-level scopes by total time (nodes at the root do not count)."""
    parts = pl.col("name").str.split("/")
    scoped = nodes.filter(parts.list.len() > 1)
    level1 = scoped.select(scope=parts.list.first(), micros="micros")
    level2 = scoped.filter(parts.list.len() > 2).select(
        scope=parts.list.head(2).list.join("/"), micros="micros")
    both = pl.concat([level1, level2]).group_by("scope").agg(pl.col("micros").sum())
    return both.sort(["micros", "scope"], descending=[True, False]).head(TOP)


LIBRARY_PATH = r"(site-packages|dist-packages|/lib/python3[^/]*/|<frozen |<string>)"


def _top_code_lines(a: Analysis) -> list[dict]:
    """The user's code lines whose ops cost most: for each op, the innermost frame of its
    trace outside libraries (TensorFlow, the standard library), as file:line:function."""
    code = a.run.code
    if code.height == 0:
        return []
    user = (
        code.filter(~pl.col("file").str.contains(LIBRARY_PATH))
        .sort("depth")
        .group_by("worker", "name")
        .agg(pl.format("{}:{}:{}", pl.col("file").str.split("/").list.last(),
                       pl.col("lineno"), pl.col("function")).last().alias("line"))
    )
    per_line = (
        a.nodes.join(user, on=["worker", "name"])
        .group_by("line").agg(pl.col("micros").sum())
        .filter(pl.col("micros") > 0)
        .sort(["micros", "line"], descending=[True, False]).head(TOP)
    )
    return [{"name": r["line"], "micros": r["micros"]} for r in per_line.iter_rows(named=True)]
