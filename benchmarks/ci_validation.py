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

- `--sessions LABEL=DIR ...` (several base runs, analyzer.gate.baseruns): base = k runs of
  one capture session (n steps each), new = one run of another session; same-config
  false alarms, every depth >= 2 scope of >= 5% of the step made 2x slower, and a step
  30% slower through op work. `--held-out` names the sessions kept out of the choice;
  `--set` picks choice / held out / held out with the k base runs from k sessions;
  `--tune CSV` records the draws with every floor at 0 and rates a grid of floor rules.

usage: python benchmarks/ci_validation.py CAPTURE_DIR [--floors] [--resamples 4]
       [--draws 40] [--sizes 5 10 20] [--spike-cap 1.5] [--scope-floors ...]
       python benchmarks/ci_validation.py --sessions A=DIR B=DIR ... [--held-out B ...]
       [--set choice] [--k 1 2 3 4] [--sizes 10] [--tune CSV]
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

from ci_tune import candidates, tune  # noqa: E402  (the --tune grid)

from runlens.analyzer.gate.compare import Samples, compare, samples_from_run  # noqa: E402
from runlens.analyzer.load import load_run  # noqa: E402

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
                   s.node_medians, s.scope_depth, s.meta, s.work)


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
    medians = s.node_medians  # a real regression moves its nodes' medians too
    if scope not in (None, "idle"):
        medians = medians.with_columns(median_us=pl.col("median_us") * pl.when(
            pl.col("name").str.starts_with(scope + "/")).then(1 + pct / 100).otherwise(1.0))
    return Samples(s.source, out, medians, s.scope_depth, s.meta, s.work)


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


# ----------------------------------------------------------------- several base runs


def scopes_over(s: Samples, least_share: float) -> list[str]:
    """Every depth >= 2 scope of at least `least_share` of the step (median)."""
    med = s.samples.group_by("kind", "name").agg(pl.col("value_us").median())
    step = float(med.filter(pl.col("name") == "step time")["value_us"][0])
    return sorted(med.filter((pl.col("kind") == "scope") & pl.col("name").str.contains("/")
                             & (pl.col("value_us") >= least_share * step))["name"].to_list())


def _same_config(draw, same: int, record: list | None, key: tuple) -> dict:
    """`same` same-config draws: how many exit 1, and by which first metric."""
    alarms, first = 0, None
    named: dict[str, int] = {}  # false alarms by the first metric they call
    for _ in range(same):
        base, new, _ = draw()
        r = compare(base, new)
        if record is not None:
            record.append((*key, "same", candidates(r, False)))
        if r.regressions.height:
            alarms += 1
            first = first or r.regressions.select("kind", "name", "effect_pct",
                                                  "floor_pct").row(0)
            top = r.regressions["name"][0]
            named[top] = named.get(top, 0) + 1
    tally = ", ".join(f"{k_} x{v}" for k_, v in sorted(named.items(), key=lambda kv: -kv[1]))
    return {"exit 1": alarms, "rate": alarms / same,
            "example": f"{first}; by first metric: {tally}" if first else ""}


def multi_study(name: str, sessions: dict[str, list[Samples]], pairs: list[tuple[str, str]],
                k: int, n: int, rng: random.Random, same: int, per_scope: int, step: int,
                record: list | None = None, label: str = "", new_k: int = 1) -> list[dict]:
    """Base: k runs of one session (n steps each); new: `new_k` runs of another session
    (n steps each, pooled as `analyze compare` pools a baseline file of several runs).
    `pairs` are the (base session, new session) pairs to draw from."""
    from runlens.analyzer.gate.baseruns import merge_runs

    spread_out = label.endswith("sessions")  # one base run from each of k sessions
    news = sorted({b for _, b in pairs})
    if spread_out:
        news = [b for b in news if len({a for a, c in pairs if c == b}) >= k]
        if not news:
            return []
    else:
        pairs = [(a, b) for a, b in pairs if len(sessions[a]) >= k]
        if not pairs:
            return []

    def draw():
        if spread_out:
            b = rng.choice(news)
            picks = [rng.choice(sessions[a]) for a in
                     rng.sample(sorted({a for a, c in pairs if c == b}), k)]
        else:
            a, b = rng.choice(pairs)
            picks = rng.sample(sessions[a], k)
        base = merge_runs([subset(r, n, rng) for r in picks])
        if new_k > 1:
            new_runs = rng.sample(sessions[b], new_k)
            return base, merge_runs([subset(r, n, rng) for r in new_runs]), new_runs[0]
        new_run = rng.choice(sessions[b])
        return base, subset(new_run, n, rng), new_run

    out = [{"set": label, "model": name, "k": k, "n": n, "case": "same config",
            "draws": same, **_same_config(draw, same, record, (name, label, k, n))}]
    scopes = sorted({sc for runs in sessions.values() for r in runs
                     for sc in scopes_over(r, 0.05)})
    per: dict[str, int] = {}
    for scope in scopes:
        per[scope] = 0
        for _ in range(per_scope):
            base, new, _ = draw()
            r = compare(base, inject(new, scope, 100))
            if record is not None:
                record.append((name, label, k, n, f"2x {scope}", candidates(r, scope)))
            per[scope] += called(r, scope)
    worst = min(per, key=lambda s: per[s])
    total = sum(per.values())
    out.append({"set": label, "model": name, "k": k, "n": n,
                "case": f"2x scope of >= 5% ({len(scopes)} scopes)",
                "draws": per_scope * len(scopes), "exit 1": total,
                "rate": total / (per_scope * len(scopes)),
                "example": f"worst {worst} {per[worst]}/{per_scope}"})
    hits = 0
    for _ in range(step):
        base, new, _ = draw()
        r = compare(base, inject(new, None, 30))
        if record is not None:
            record.append((name, label, k, n, "step", candidates(r, None)))
        hits += called(r, None)
    out.append({"set": label, "model": name, "k": k, "n": n,
                "case": "step +30% (op work)", "draws": step, "exit 1": hits,
                "rate": hits / step, "example": ""})
    print(f"  {label} {name} k={k} n={n}: " + "; ".join(
        f"{o['case']} {o['exit 1']}/{o['draws']}" for o in out), flush=True)
    return out


def run_sessions(args) -> None:
    """--sessions: base = k runs of one session, new = a run of another session."""
    import runlens.analyzer.gate.baseruns as runs_rule

    if args.tune:  # every floor at 0: record what each floor rule would call
        runs_rule.RUN_SPREAD_X = 0.0
        runs_rule.RUN_FLOOR_MIN = {"step": 0.0, "scope": 0.0}
        import runlens.analyzer.gate.floors as gate
        gate.SCOPE_FLOORS = ((0.10, 0.0), (0.03, 0.0), (gate.NOISE_FLOOR, 0.0))
        gate.OP_FLOORS = gate.SCOPE_FLOORS
        gate.STEP_FLOORS = {gate.STEP_TIME: 0.0, gate.OP_TIME: 0.0}
    print(f"several base runs: floor {runs_rule.RUN_SPREAD_X} x spread, minimum "
          f"{runs_rule.RUN_FLOOR_MIN}")
    labels = [s.split("=")[0] for s in args.sessions]
    dirs = dict(s.split("=", 1) for s in args.sessions)
    held = set(args.held_out or [])
    results, record = [], []
    for name, prefix in (("transformer", "tf_base"), ("mlp", "mlp_base"),
                         ("convnet", "cnn_base")):
        if args.models and name not in args.models:
            continue
        sessions = {lab: load(Path(dirs[lab]), prefix) for lab in labels}
        every = [(a, b) for a in labels for b in labels if a != b]
        sets = {"choice": [p for p in every if not (set(p) & held)],
                "held out": [p for p in every if set(p) & held],
                # CI keeps the last k main-branch runs: base runs of k other sessions
                "held out, base from k sessions": [p for p in every if p[1] in held]}
        for label, pairs in sets.items():
            if args.set and label != args.set:
                continue
            for n in args.sizes:
                for k in args.k:
                    rng = random.Random(SEED + 1000 * k + n)
                    results += multi_study(name, sessions, pairs, k, n, rng, args.same,
                                           args.per_scope, args.step_draws,
                                           record if args.tune else None, label,
                                           args.new_k)
    if args.tune:
        import pickle

        args.tune.with_suffix(".pkl").write_bytes(pickle.dumps(record))
        t = tune(record, args.margins, args.mins)
        t.write_csv(args.tune)
        print(f"tuning grid -> {args.tune}")
        with pl.Config(tbl_rows=500, tbl_width_chars=200, tbl_cols=20):
            print(t)
        return
    table = pl.DataFrame(results).with_columns(pl.col("rate").round(3))
    print(table)
    print("| set | model | base runs | steps a side | case | draws | exit 1 | rate | note |")
    print("|---|---|---:|---:|---|---:|---:|---:|---|")
    for r in table.iter_rows(named=True):
        print(f"| {r['set']} | {r['model']} | {r['k']} | {r['n']} | {r['case']} | "
              f"{r['draws']} | {r['exit 1']} | {r['rate']:.1%} | {r['example']} |")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("capture", type=Path, nargs="?")
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
                    help="try another analyzer.gate.compare.SPIKE_CAP (0: no cap)")
    ap.add_argument("--scope-floors", type=float, nargs=3, metavar=("BIG", "MID", "SMALL"),
                    help="try other scope floors (%%, for >=10%%, 3-10%%, 1-3%% of step)")
    ap.add_argument("--op-floors", type=float, nargs=3, metavar=("BIG", "MID", "SMALL"),
                    help="try other op type floors (%%, for >=10%%, 3-10%%, 1-3%% of step)")
    ap.add_argument("--step-floors", type=float, nargs=2, metavar=("STEP", "OP"),
                    help="try other step time / op time floors (%%)")
    ap.add_argument("--sessions", nargs="+", metavar="LABEL=DIR",
                    help="several base runs: capture sessions; base = k runs of one "
                         "session, new = one run of another")
    ap.add_argument("--held-out", nargs="*", metavar="LABEL",
                    help="sessions held out: pairs touching them form the held-out set")
    ap.add_argument("--set", choices=["choice", "held out", "held out, base from k sessions"],
                    default=None)
    ap.add_argument("--models", nargs="*", default=None)
    ap.add_argument("--k", type=int, nargs="+", default=[1, 2, 3, 4],
                    help="base runs per comparison")
    ap.add_argument("--new-k", type=int, default=1,
                    help="new runs per comparison (pooled, as a baseline file of several "
                         "runs passed as NEW)")
    ap.add_argument("--same", type=int, default=240, help="same-config draws")
    ap.add_argument("--per-scope", type=int, default=10,
                    help="draws per scope of >= 5%% made 2x slower")
    ap.add_argument("--step-draws", type=int, default=100, help="draws of a 30%% slower step")
    ap.add_argument("--tune", type=Path, default=None, metavar="CSV",
                    help="record the draws with every floor at 0 and write the rates of "
                         "each --margins x --mins rule")
    ap.add_argument("--margins", type=float, nargs="+", default=[1, 1.5, 2, 3],
                    help="multiples of the base runs' spread to try (--tune)")
    ap.add_argument("--mins", type=float, nargs="+", default=[20, 30, 40, 60],
                    help="scope/op type floor minimums to try, %% (--tune)")
    ap.add_argument("--one-factor", action="store_true",
                    help="one machine factor per run (analyzer.gate.machinefactor.BY_SIZE off)")
    ap.add_argument("--leave-out", default="op", choices=["op", "none", "bin", "class", "merged"],
                    help="how a scope's own nodes are kept out of its factor "
                         "(machinefactor.LEAVE_OUT): op (shipped: peers of the same op type "
                         "and log2 bin), none (every node by its class's factor, every "
                         "scope of >= 3%% at the 60%% floor: as before), bin / class / "
                         "merged (rejected variants)")
    return ap


def main() -> None:
    args = _parser().parse_args()
    started = time.monotonic()
    import runlens.analyzer.gate.machinefactor as mf
    mf.BY_SIZE = not args.one_factor
    mf.LEAVE_OUT = None if args.leave_out == "none" else args.leave_out
    print(f"machine factor per node-duration class {mf.BY_SIZE}, leave-out {mf.LEAVE_OUT}")
    if args.sessions:
        run_sessions(args)
        print(f"done in {time.monotonic() - started:.0f}s")
        return
    import runlens.analyzer.gate.compare as gate
    import runlens.analyzer.gate.floors as floors

    if args.scope_floors:
        big, mid, small = (f / 100 for f in args.scope_floors)
        floors.SCOPE_FLOORS = ((0.10, big), (0.03, mid), (floors.NOISE_FLOOR, small))
    if args.op_floors:
        big, mid, small = (f / 100 for f in args.op_floors)
        floors.OP_FLOORS = ((0.10, big), (0.03, mid), (floors.NOISE_FLOOR, small))
    if args.step_floors:
        floors.STEP_FLOORS = {floors.STEP_TIME: args.step_floors[0] / 100,
                            floors.OP_TIME: args.step_floors[1] / 100}
    if args.spike_cap is not None:
        gate.SPIKE_CAP = args.spike_cap or None
    print(f"floors: step {floors.STEP_FLOORS}, scopes {floors.SCOPE_FLOORS}, op types "
          f"{floors.OP_FLOORS}; at least {floors.NOISE_FLOOR_US} us; "
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
