"""Verdicts by evidence: what a regression must show before it fails the build (docs/ci.md,
"Verdicts by evidence", issue 24).

Two processes of the same program do the same work (analyzer.gate.workdiff); their times
do not, and one process a side cannot tell a process that runs a kernel slowly from a
regression. So a scope or op type is judged by what changed:

1. its work changed (nodes, op types, output or input bytes, float ops, parameters):
   a regression when its time went up significantly by at least WORK_FLOOR (the lower
   end of the 95% interval of the normalized change); one process a side is enough, the
   cause is in the diff;
2. its work did not change (or was not recorded) and a side has one process: the
   statistical rule (significant, beyond its size-class floor) only flags it; it fails
   the build when it cannot be process noise: op time is a regression too and this line
   makes at least MOVES_OP_TIME of op time's change, or its lower end is beyond
   SWING_FLOOR, the largest same-config swing measured, with margin. Otherwise it is a
   WATCH line with WATCH_ADVICE, never dropped;
3. its work did not change and both sides have two or more processes: the statistical
   rule with floors from the base runs' spread, as before.

Step time and op time keep their own verdict (analyzer.gate.compare.verdict_stage). Every
row says which rule judged it (`rule`).
"""

from __future__ import annotations

import polars as pl

from .samples import OP_TIME, STEP_TIME
from .workdiff import DIFF_SCHEMA

WORK_FLOOR = 0.20  # work changed: the normalized change's lower end must reach +20%
MOVES_OP_TIME = 0.5  # work unchanged, one process: share of op time's change it must make
# work unchanged, one process: a lower end beyond this is not process noise: above the
# largest same-config change recorded at one process a side (op type Sum +367%, issue 24;
# the choice session c1 flagged no same-config line at all, docs/ci.md), rounded up.
SWING_FLOOR = 4.00
WATCH_ADVICE = "run 3 base and 3 new processes (--new-runs 3) to judge it"


STEP_RULE = "step level: significant (Bonferroni over step time and op time) and beyond its floor"
WALL_RULE = ("step level: the wall span is shown, op time decides on a shared machine "
             "(--no-normalize lets it decide)")


def judge(rows: pl.DataFrame, diff: pl.DataFrame, processes: int, threshold_pct: float,
          testable: bool, normalize: bool) -> pl.DataFrame:
    """`rows` (one per metric, with the statistical `verdict` and `significant`) with the
    work diff's columns, `verdict` by evidence (regression, watch, ...), `rule` and
    `contribution_pct` (share of op time's normalized change)."""
    if not diff.height:
        diff = pl.DataFrame(schema=DIFF_SCHEMA)
    rows = rows.join(diff, on=["kind", "name"], how="left")
    op = rows.filter((pl.col("kind") == "step") & (pl.col("name") == OP_TIME))
    op_regressed = bool(op.height and op["verdict"][0] == "regression")
    op_delta = float(op["delta_us"][0]) if op.height else 0.0
    near = pl.col("effect_low_pct" if testable else "effect_pct")
    kind, verdict = pl.col("kind"), pl.col("verdict")
    callable_ = (kind != "step") & pl.col("floor_pct").is_not_null() & ~verdict.is_in(
        ["new", "vanished", "below-floor"])
    changed = pl.col("work_changed").fill_null(False)
    by_work = callable_ & changed
    work_regressed = pl.col("significant") & (near >= max(WORK_FLOOR * 100, threshold_pct))
    share = pl.col("delta_us") / op_delta if op_delta > 0 else pl.lit(None, pl.Float64)
    moves = (share >= MOVES_OP_TIME).fill_null(False) & op_regressed
    beyond = (near >= max(SWING_FLOOR * 100, threshold_pct)).fill_null(False)
    one = processes < 2
    flagged = callable_ & ~changed & (verdict == "regression")
    no_work = pl.when(pl.col("work_changed").is_null()).then(pl.lit("work not recorded")) \
        .otherwise(pl.lit("work unchanged"))
    new_verdict = (pl.when(by_work).then(pl.when(work_regressed).then(pl.lit("regression"))
                                         .when(verdict == "regression").then(pl.lit("unchanged"))
                                         .otherwise(verdict))
                   .when(flagged & one).then(pl.when(moves | beyond).then(pl.lit("regression"))
                                             .otherwise(pl.lit("watch")))
                   .otherwise(verdict))
    pct = (share * 100).round(0).cast(pl.Int64).cast(pl.String)
    wall = (pl.col("name") == STEP_TIME) & normalize
    rule = (
        pl.when(kind == "step").then(pl.when(wall).then(pl.lit(WALL_RULE))
                                     .otherwise(pl.lit(STEP_RULE)))
        .when(verdict == "below-floor").then(pl.lit("too small to call (under 1% of the step "
                                                    "or 20 us)"))
        .when(verdict.is_in(["new", "vanished"])).then(pl.lit("on one side only"))
        .when(by_work).then(pl.lit(f"work changed: a regression when significant and at "
                                   f"least +{WORK_FLOOR:.0%} (lower end of the 95% CI)"))
        .when(flagged & one & moves).then(pl.format(
            "{}, one process a side: it makes {}% of op time's change, and op time is a "
            "regression",
            no_work, pct))
        .when(flagged & one & beyond).then(pl.format(
            "{}, one process a side: beyond the largest same-config swing (lower end >= "
            f"+{SWING_FLOOR:.0%})", no_work))
        .when(flagged & one).then(pl.format("{}, one process a side: WATCH, {}", no_work,
                                            pl.lit(WATCH_ADVICE)))
        .when(pl.lit(one)).then(pl.format(
            "{}, one process a side: significant and beyond its floor, and op time or "
            f"beyond +{SWING_FLOOR:.0%}", no_work))
        .otherwise(pl.format("{}, several processes a side: significant and beyond its "
                             "floor", no_work)))
    return rows.with_columns(verdict=new_verdict, rule=rule,
                             contribution_pct=pl.when(kind != "step").then(share * 100))
