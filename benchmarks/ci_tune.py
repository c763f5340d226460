"""The --tune grid of benchmarks/ci_validation.py --sessions: with every floor at 0, the
significant rises each draw holds, and the rates each (spread multiple, minimum) floor rule
would give on them (docs/ci.md, "A baseline of several runs")."""

from __future__ import annotations

import polars as pl

import runlens.analyzer.gate.floors as _gate

# The size-class floors as shipped (--tune sets the module's floors to 0 to record).
_CLASS = (dict(_gate.STEP_FLOORS), _gate.SCOPE_FLOORS, _gate.OP_FLOORS)


def class_floor(kind: str, share: float, name: str) -> float | None:
    steps, scopes, ops = _CLASS
    if kind == "step":
        return steps.get(name)
    return next((f for least, f in (ops if kind == "op" else scopes) if share >= least),
                None)


def candidates(result, target: str | None | bool) -> list[tuple]:
    """With every floor at 0 (--tune): the significant rises a floor rule could call,
    as (kind, share %, lower end %, run spread %, size-class floor %, is the target)."""
    rows = result.regressions.filter(pl.col("name") != "step time")
    out = []
    for r in rows.iter_rows(named=True):
        cls = class_floor(r["kind"], r["share_pct"] / 100, r["name"])
        hit = (r["kind"] == "step") if target is None else (
            r["kind"] == "scope" and r["name"] == target)
        out.append((r["kind"], r["effect_low_pct"], r["run_spread_pct"],
                    None if cls is None else cls * 100, bool(hit and target is not False)))
    return out


def _passes(c: tuple, k: int, margin: float, least: float) -> bool:
    kind, low, spread, cls, _ = c
    if cls is None or low is None:
        return False
    if k < 2:
        return low >= cls
    # op time: 10%; op types and metrics of 1-3% (class floor 120%): their class floor
    least = 10.0 if kind == "step" else cls if (cls >= 100 or kind == "op") else least
    floor = max(least, margin * spread)
    return low >= floor


def tune(record: list, margins: list[float], mins: list[float]) -> pl.DataFrame:
    """Rates of each (spread multiple, scope/op minimum) floor rule over the draws."""
    rows = []
    for margin in margins:
        for least in mins:
            for model, label, k, n, case, cands in record:
                called_ = [c for c in cands if _passes(c, k, margin, least)]
                hit = any(c[4] for c in called_) if case != "same" else bool(called_)
                rows.append({"margin": margin, "min": least, "model": model, "set": label,
                             "k": k, "n": n, "case": case, "hit": hit})
    keys = ["margin", "min", "set", "model", "k", "n"]
    d = pl.DataFrame(rows)
    per = d.group_by(*keys, "case").agg(rate=pl.col("hit").mean())
    scope = pl.col("case").str.starts_with("2x ")
    return (d.with_columns(case=pl.when(scope).then(pl.lit("2x")).otherwise("case"))
            .group_by(*keys, "case").agg(rate=pl.col("hit").mean().round(3))
            .pivot(on="case", index=keys, values="rate")
            .join(per.filter(scope).group_by(keys).agg(
                worst_2x=pl.col("rate").min().round(3),
                worst_scope=pl.col("case").sort_by("rate").first().str.slice(3)), on=keys)
            .sort("set", "model", "k", "n", "margin", "min"))
