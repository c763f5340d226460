"""Validation study of the CI gate (`analyze compare`): false alarms and detection rates
measured on separate real runs (docs/ci.md has the method and the results table).

Inputs are the run dirs written by benchmarks/ci_capture.py: 8 same-config captures of
the 6-block transformer (tf_base_*) and of the small MLP (mlp_base_*), each its own
process, started about a minute apart, 30 traced steps each.

- Same-config pairs: base and new are always two *different* runs (processes); each
  side is n steps drawn at random (without replacement) from its run. Every ordered
  pair of runs, `--resamples` times. A pair that exits 1 is a false alarm.
- Detection: the same pairs, with a slowdown injected into the new side: one scope
  (and its ancestors, op time and step time) gets s% more time in every step, s in 5,
  10, 20, 50, 100, 200; or the step gets 30% longer through op work no scope sees (op
  time and step time), or through idle time alone (step time only).
  Detected = exit 1 with the injected scope (or a step-level metric) called a regression.
- Real regression: tf_wide_* / mlp_wide_* (one block's MLP 8x wider / dense2 4x wider)
  against tf_base_* / mlp_base_*.
- `--floors`: the run-to-run variation that sets the effect-size floors: for every
  ordered pair of same-config runs (all 30 steps, warm-up left out), each metric's
  normalized Hodges-Lehmann change (p95, p99, max) and the largest lower end of its 95%
  interval, by the metric's share of the step.

usage: python benchmarks/ci_validation.py CAPTURE_DIR [--floors] [--resamples 4]
       [--draws 40] [--sizes 5 10 20] [--spike-cap 1.5] [--scope-floors ...]
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzer.compare import Samples, compare, samples_from_run  # noqa: E402
from analyzer.load import load_run  # noqa: E402

SLOWDOWNS = (5, 10, 20, 50, 100, 200)
SIZES = (5, 10, 20)
SEED = 11


def load(capture: Path, prefix: str) -> list[Samples]:
    runs = sorted(p for p in capture.glob(f"{prefix}_*") if (p / "manifest.json").is_file())
    return [samples_from_run(load_run(p, use_cache=False), p.name) for p in runs]


def subset(s: Samples, n: int, rng: random.Random) -> Samples:
    ids = sorted(s.samples["sample"].unique().to_list())
    chosen = rng.sample(ids, n)
    return Samples(s.source, s.samples.filter(pl.col("sample").is_in(chosen)),
                   s.node_medians, s.scope_depth, s.meta)


def inject(s: Samples, scope: str | None, pct: float) -> Samples:
    """`scope` (its ancestors, op time and step time) `pct`% slower in every step.

    scope None: `pct`% of the step time more op work spread thin (no scope or op type of
    the family sees it; op time and step time grow by it); scope "idle": the step time
    alone grows (waiting no op explains, e.g. an input stall).
    """
    step = pl.col("kind") == "step"
    wall = step & (pl.col("name") == "step time")
    if scope is None or scope == "idle":
        added = (s.samples.filter(wall).select("sample", added=pl.col("value_us") * pct / 100))
        hit = step if scope is None else wall
    else:
        added = (s.samples.filter((pl.col("kind") == "scope") & (pl.col("name") == scope))
                 .select("sample", added=pl.col("value_us") * pct / 100))
        parts = scope.split("/")
        ancestors = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        hit = step | ((pl.col("kind") == "scope") & pl.col("name").is_in(ancestors))
    out = s.samples.join(added, on="sample", how="left").with_columns(
        value_us=pl.col("value_us") + pl.when(hit).then(pl.col("added")).otherwise(0.0)
    ).drop("added")
    return Samples(s.source, out, s.node_medians, s.scope_depth, s.meta)


def pick_scope(s: Samples, least_share: float) -> tuple[str, float]:
    """The depth >= 2 scope whose median share of the step is smallest but >= least."""
    med = s.samples.group_by("kind", "name").agg(pl.col("value_us").median())
    step = float(med.filter(pl.col("name") == "step time")["value_us"][0])
    scopes = (med.filter((pl.col("kind") == "scope") & pl.col("name").str.contains("/"))
              .with_columns(share=pl.col("value_us") / step)
              .filter(pl.col("share") >= least_share).sort("share", "name"))
    return scopes["name"][0], float(scopes["share"][0])


def called(result, scope: str | None) -> bool:
    reg = result.regressions
    if scope is None or scope == "idle":
        return bool((reg["kind"] == "step").any())
    return bool(((reg["kind"] == "scope") & (reg["name"] == scope)).any())


def floors(runs: list[Samples]) -> pl.DataFrame:
    rows = []
    for a, b in itertools.permutations(runs, 2):
        r = compare(a, b).rows
        rows.append(r.select("kind", "name", "share_pct", "effect_pct", "effect_low_pct"))
    d = pl.concat(rows).filter(pl.col("effect_pct").is_not_null())
    size = (pl.when(pl.col("kind") == "step").then(pl.col("name"))
            .when(pl.col("share_pct") >= 10).then(pl.lit(">=10% of step"))
            .when(pl.col("share_pct") >= 3).then(pl.lit("3-10%"))
            .when(pl.col("share_pct") >= 1).then(pl.lit("1-3%"))
            .otherwise(pl.lit("<1%")))
    return (d.with_columns(size=size, up=pl.col("effect_pct"))
            .group_by("size").agg(metrics=pl.len(),
                                  p95=pl.col("up").quantile(0.95).round(1),
                                  p99=pl.col("up").quantile(0.99).round(1),
                                  max=pl.col("up").max().round(1),
                                  max_ci_low=pl.col("effect_low_pct").max().round(1))
            .sort("size"))


def study(name: str, base: list[Samples], wide: list[Samples], resamples: int,
          rng: random.Random, sizes: tuple[int, ...] = SIZES, draws: int = 40,
          split: int | None = None) -> list[dict]:
    """The rates table of one model; with `split`, only pairs of one run below index
    `split` and one from `split` on (two capture sessions against each other)."""
    out = []
    pairs = [(i, j) for i, j in itertools.permutations(range(len(base)), 2)
             if split is None or (i < split) != (j < split)]
    scope5, share5 = pick_scope(base[0], 0.05)
    scope3, share3 = pick_scope(base[0], 0.03)
    print(f"{name}: {len(base)} runs, {len(pairs)} ordered pairs; injected scope "
          f"{scope5} ({share5:.1%} of step), {scope3} ({share3:.1%})", flush=True)
    for n in sizes:
        alarms = total = 0
        first = None
        for i, j in pairs:
            for _ in range(resamples):
                r = compare(subset(base[i], n, rng), subset(base[j], n, rng))
                total += 1
                if r.regressions.height:
                    alarms += 1
                    first = first or r.regressions.select("kind", "name",
                                                          "effect_pct").row(0)
        out.append({"model": name, "n": n, "case": "same config (false alarms)",
                    "pairs": total, "exit 1": alarms, "rate": alarms / total,
                    "example": str(first) if first else ""})
        cases = [(scope5, s, f"{scope5} +{s}% ({share5:.0%} of step)") for s in SLOWDOWNS]
        cases += [(scope3, 200, f"{scope3} 3x ({share3:.0%} of step)"),
                  (None, 30, "step time +30% (more op work, no scope)"),
                  ("idle", 30, "step time +30% (idle, no op time)")]
        for scope, pct, label in cases:
            hits = 0
            # `draws` pairs: without replacement while there are enough, else with
            # (each draw has its own random steps on both sides).
            chosen = (rng.sample(pairs, draws) if len(pairs) >= draws
                      else [rng.choice(pairs) for _ in range(draws)])
            for i, j in chosen:
                new = inject(subset(base[j], n, rng), scope, pct)
                hits += called(compare(subset(base[i], n, rng), new), scope)
            out.append({"model": name, "n": n, "case": label, "pairs": len(chosen),
                        "exit 1": hits, "rate": hits / len(chosen), "example": ""})
        if wide:
            hits = total = 0
            for b, w in itertools.product(base, wide):
                r = compare(subset(b, n, rng), subset(w, n, rng))
                total += 1
                hits += bool(r.regressions.height)
            out.append({"model": name, "n": n, "case": "real wider MLP (captured)",
                        "pairs": total, "exit 1": hits, "rate": hits / total, "example": ""})
        print(f"  n={n} done", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("capture", type=Path)
    ap.add_argument("--floors", action="store_true", help="only the run-to-run variation")
    ap.add_argument("--resamples", type=int, default=4,
                    help="same-config draws per ordered pair of runs")
    ap.add_argument("--draws", type=int, default=40, help="draws per injected case")
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES),
                    help="steps a side to study")
    ap.add_argument("--against", type=Path, default=None,
                    help="pair each run of CAPTURE_DIR only with the same config's runs "
                         "of this other capture session (both orders)")
    ap.add_argument("--spike-cap", type=float, default=None,
                    help="try another analyzer.compare.SPIKE_CAP (0: no cap)")
    ap.add_argument("--scope-floors", type=float, nargs=3, metavar=("BIG", "MID", "SMALL"),
                    help="try other scope floors (%%, for >=10%%, 3-10%%, 1-3%% of step)")
    ap.add_argument("--op-floors", type=float, nargs=3, metavar=("BIG", "MID", "SMALL"),
                    help="try other op type floors (%%, for >=10%%, 3-10%%, 1-3%% of step)")
    ap.add_argument("--step-floors", type=float, nargs=2, metavar=("STEP", "OP"),
                    help="try other step time / op time floors (%%)")
    args = ap.parse_args()
    started = time.monotonic()
    import analyzer.compare as gate

    if args.scope_floors:
        big, mid, small = (f / 100 for f in args.scope_floors)
        gate.SCOPE_FLOORS = ((0.10, big), (0.03, mid), (gate.NOISE_FLOOR, small))
    if args.op_floors:
        big, mid, small = (f / 100 for f in args.op_floors)
        gate.OP_FLOORS = ((0.10, big), (0.03, mid), (gate.NOISE_FLOOR, small))
    if args.step_floors:
        gate.STEP_FLOORS = {gate.STEP_TIME: args.step_floors[0] / 100,
                            gate.OP_TIME: args.step_floors[1] / 100}
    if args.spike_cap is not None:
        gate.SPIKE_CAP = args.spike_cap or None
    print(f"floors: step {gate.STEP_FLOORS}, scopes {gate.SCOPE_FLOORS}, op types "
          f"{gate.OP_FLOORS}; at least {gate.NOISE_FLOOR_US} us; "
          f"spike cap {gate.SPIKE_CAP}")
    models = {"transformer": ("tf_base", "tf_wide"), "mlp": ("mlp_base", "mlp_wide")}
    pl.Config.set_tbl_rows(100)
    pl.Config.set_tbl_width_chars(200)
    pl.Config.set_fmt_str_lengths(80)
    results = []
    for name, (b, w) in models.items():
        base = load(args.capture, b)
        split = None
        if args.against:
            split = len(base)
            base += load(args.against, b)
        if args.floors:
            print(name, "normalized change between separate same-config runs (%):")
            print(floors(base))
            continue
        if len(base) < 2:
            continue
        results += study(name, base, load(args.capture, w), args.resamples,
                         random.Random(SEED), tuple(args.sizes), args.draws, split)
    if results:
        table = pl.DataFrame(results).with_columns(pl.col("rate").round(3))
        print(table.drop("example"))
        for r in table.filter(pl.col("example") != "").iter_rows(named=True):
            print(f"false alarm example ({r['model']}, n={r['n']}): {r['example']}")
        print("| model | steps a side | case | pairs | exit 1 | rate |")
        print("|---|---|---|---|---|---|")
        for r in table.iter_rows(named=True):
            print(f"| {r['model']} | {r['n']} | {r['case']} | {r['pairs']} | {r['exit 1']} "
                  f"| {r['rate']:.0%} |")
    print(f"done in {time.monotonic() - started:.0f}s; numpy {np.__version__}")


if __name__ == "__main__":
    main()
