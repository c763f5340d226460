"""Validation of the CI gate's verdicts by evidence (issue 24, docs/ci.md "Verdicts by
evidence"): one process a side, on separately captured runs (benchmarks/ci_capture.py).

Per model (transformer tf_*, convnet cnn_*, MLP mlp_*) and capture session:

- same config: every ordered pair of the session's base runs, whole runs (every traced
  step, as `analyze compare runA runB` reads them) and `--draws` draws of `--steps`
  random steps a side per pair. Failed = exit 1; watch = WATCH lines but exit 0.
- real wider layer: every base run against every wide run of the session (whole runs and
  draws): failed, and failed naming the widened scope (or one inside it) with its work
  diff on the line.
- injected, speed only (work unchanged): the smallest depth >= 2 scope of >= 5% of the
  step made 2x and 3x slower in every step of the new run (analyzer's work diff sees
  nothing); and the step 30% slower through op work no scope sees.
- injected, work changed: the same scope 2x slower with its nodes' output bytes, input
  bytes and float ops doubled in the new run's work (what a 2x larger layer shows).
- `--record`: every flagged same-config line (statistics say regression, work
  unchanged) with its lower end, to choose SWING_FLOOR (the choice set only).

usage: python benchmarks/ci_evidence.py --sessions c1=DIR [v1=DIR ...] [--draws 10]
       [--steps 10] [--record] [--models transformer convnet mlp]
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ci_validation import inject, load, pick_scope, subset  # noqa: E402

from runlens.analyzer.gate.compare import Samples, compare  # noqa: E402

MODELS = {"transformer": ("tf_base", "tf_wide", "block3/mlp"),
          "convnet": ("cnn_base", "cnn_wide", "conv1"),
          "mlp": ("mlp_base", "mlp_wide", "dense2")}
SEED = 24


def with_work(s: Samples, scope: str, times: float) -> Samples:
    """`s` whose nodes under `scope` do `times` the work (bytes and float ops)."""
    if s.work is None:
        return s
    under = pl.col("name").str.starts_with(scope + "/")
    work = s.work.with_columns(
        pl.when(under).then(pl.col(c) * times).otherwise(pl.col(c)).alias(c)
        for c in ("out_bytes", "in_bytes", "float_ops"))
    return Samples(s.source, s.samples, s.node_medians, s.scope_depth, s.meta, work)


def names_scope(result, scope: str) -> bool:
    """Failed naming `scope` (or a scope inside it, forward or gradient) with a work diff."""
    reg = result.regressions.filter(pl.col("kind") == "scope")
    hit = reg.filter(pl.col("name").str.contains(f"(^|/){scope}(/|$)")
                     & pl.col("work_changed").fill_null(False))
    return hit.height > 0


def outcome(result) -> str:
    if result.regressions.height:
        return "fail"
    return "watch" if result.watches.height else "pass"


def noise(model: str, base: list[Samples]) -> dict:
    """How noisy the session was: each run's median step time and op time, and the
    largest same-config change of a scope of >= 3% of the step (whole runs, every
    ordered pair): its effect and lower end."""
    med = [s.samples.filter(pl.col("kind") == "step").group_by("name")
           .agg(pl.col("value_us").median()) for s in base]
    step = [float(m.filter(pl.col("name") == "step time")["value_us"][0]) for m in med]
    op = [float(m.filter(pl.col("name") == "op time")["value_us"][0]) for m in med]
    worst = (0.0, 0.0, "")
    for i, j in itertools.permutations(range(len(base)), 2):
        rows = compare(base[i], base[j]).rows.filter(
            (pl.col("kind") == "scope") & (pl.col("share_pct") >= 3)
            & pl.col("effect_pct").is_not_null())
        if rows.height:
            top = rows.sort("effect_pct", descending=True).row(0, named=True)
            if top["effect_pct"] > worst[0]:
                worst = (top["effect_pct"], top["effect_low_pct"] or 0.0, top["name"])
    return {"model": model, "step time median (ms)":
            f"{min(step) / 1000:.2f}-{max(step) / 1000:.2f}",
            "op time median (ms)": f"{min(op) / 1000:.2f}-{max(op) / 1000:.2f}",
            "largest same-config scope change": f"+{worst[0]:.0f}% (CI from +{worst[1]:.0f}%)"
            f" {worst[2]}"}


def study(model: str, base: list[Samples], wide: list[Samples], steps: int, draws: int,
          rng: random.Random, record: list) -> list[dict]:
    _, _, widened = MODELS[model]
    rows: list[dict] = []

    def tally(case: str, results: list, hit=None) -> None:
        out = [outcome(r) for r in results]
        row = {"model": model, "case": case, "n": len(out), "fail": out.count("fail"),
               "watch": out.count("watch")}
        if hit is not None:
            row["named with work diff"] = sum(hit(r) for r in results)
        firsts = [r.regressions.row(0, named=True) for r in results if r.regressions.height]
        row["example"] = (f"{firsts[0]['kind']} {firsts[0]['name']} ({firsts[0]['rule']})"
                          if firsts and hit is None else "")
        rows.append(row)

    pairs = list(itertools.permutations(range(len(base)), 2))
    whole = [compare(base[i], base[j]) for i, j in pairs]
    drawn = [compare(subset(base[i], steps, rng), subset(base[j], steps, rng))
             for i, j in pairs for _ in range(draws)]
    for r in whole + drawn:
        w = r.watches
        record += [(model, x["name"], x["kind"], x["effect_low_pct"], x["share_pct"])
                   for x in w.iter_rows(named=True)]
    tally("same config, whole runs", whole)
    tally(f"same config, {steps} steps a side", drawn)
    if wide:
        ww = [compare(b, w) for b, w in itertools.product(base, wide)]
        wd = [compare(subset(b, steps, rng), subset(w, steps, rng))
              for b, w in itertools.product(base, wide) for _ in range(draws)]
        tally(f"real wider {widened}, whole runs", ww, lambda r: names_scope(r, widened))
        tally(f"real wider {widened}, {steps} steps", wd, lambda r: names_scope(r, widened))
    scope, share = pick_scope(base[0], 0.05)
    for label, pct, work in ((f"{scope} 2x, speed only", 100, False),
                             (f"{scope} 3x, speed only", 200, False),
                             (f"{scope} 2x, work 2x", 100, True)):
        results = []
        for i, j in pairs:
            for _ in range(max(1, draws // 2)):
                new = inject(subset(base[j], steps, rng), scope, pct)
                results.append(compare(subset(base[i], steps, rng),
                                       with_work(new, scope, 2.0) if work else new))
        tally(f"{label} ({share:.0%} of step)", results,
              lambda r, s=scope: bool(((r.regressions["kind"] == "scope")
                                       & (r.regressions["name"] == s)).any()))
    step = [compare(subset(base[i], steps, rng), inject(subset(base[j], steps, rng), None, 30))
            for i, j in pairs for _ in range(max(1, draws // 2))]
    tally("step +30% (op work, no scope)", step,
          lambda r: bool((r.regressions["kind"] == "step").any()))
    return rows


def across(model: str, a: list[Samples], b: list[Samples], wide_b: list[Samples]) -> list[dict]:
    """Whole runs of two sessions against each other, both orders: same config, and each
    run of the first session against the second's wider runs."""
    _, _, widened = MODELS[model]
    same = [compare(x, y) for x, y in itertools.chain(itertools.product(a, b),
                                                      itertools.product(b, a))]
    wide = [compare(x, w) for x, w in itertools.product(a, wide_b)]
    out = [outcome(r) for r in same]
    first = next((r.regressions.row(0, named=True) for r in same if r.regressions.height),
                 None)
    return [{"model": model, "case": "same config across sessions, whole runs",
             "n": len(out), "fail": out.count("fail"), "watch": out.count("watch"),
             "example": "" if first is None else f"{first['kind']} {first['name']}"},
            {"model": model, "case": f"real wider {widened} across sessions, whole runs",
             "n": len(wide), "fail": sum(outcome(r) == "fail" for r in wide),
             "watch": sum(outcome(r) == "watch" for r in wide),
             "named with work diff": sum(names_scope(r, widened) for r in wide)}]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", nargs="+", metavar="LABEL=DIR", required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--draws", type=int, default=10, help="draws per ordered pair")
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--across", nargs=2, metavar="LABEL", default=None,
                    help="only whole runs of these two sessions against each other")
    ap.add_argument("--noise", action="store_true",
                    help="only how noisy each session's same-config runs were")
    ap.add_argument("--record", action="store_true",
                    help="print every same-config WATCH line's lower end (the choice set)")
    args = ap.parse_args()
    if args.record:  # every flagged same-config line stays a WATCH line, to be seen
        import runlens.analyzer.gate.verdicts as rules
        rules.SWING_FLOOR = float("inf")
    started = time.monotonic()
    rows: list[dict] = []
    record: list = []
    dirs = dict(s.split("=", 1) for s in args.sessions)
    if args.across:
        one, two = args.across
        for model in args.models:
            b, w = MODELS[model][:2]
            rows += [{"session": f"{one} x {two}", **r} for r in across(
                model, load(Path(dirs[one]), b), load(Path(dirs[two]), b),
                load(Path(dirs[two]), w))]
        dirs = {}
    for label, folder in dirs.items():
        for model in args.models:
            base_prefix, wide_prefix, _ = MODELS[model]
            base = load(Path(folder), base_prefix)
            if len(base) < 2:
                continue
            if args.noise:
                print(f"| {label} | " + " | ".join(noise(model, base).values()) + " |",
                      flush=True)
                continue
            rng = random.Random(SEED)
            out = study(model, base, load(Path(folder), wide_prefix), args.steps,
                        args.draws, rng, record)
            rows += [{"session": label, **r} for r in out]
            print(f"{label} {model} done ({time.monotonic() - started:.0f}s)", flush=True)
    if args.noise:
        return
    table = pl.DataFrame(rows)
    cols = [c for c in ("session", "model", "case", "n", "fail", "watch",
                        "named with work diff", "example") if c in table.columns]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in table.select(cols).iter_rows():
        print("| " + " | ".join("" if v is None else str(v) for v in r) + " |")
    if args.record and record:
        rec = pl.DataFrame(record, schema=["model", "name", "kind", "low_pct", "share_pct"],
                           orient="row")
        with pl.Config(tbl_rows=40, fmt_str_lengths=60):
            print(rec.sort("low_pct", descending=True).head(30))
            print(rec.group_by("model").agg(pl.len(), max_low=pl.col("low_pct").max()))
    print(f"done in {time.monotonic() - started:.0f}s")


if __name__ == "__main__":
    main()
