"""False alarms of RL116 (slow-worker) on separate balanced captures.

    python fixtures/generate_workers.py --balanced 8 --out /tmp/balanced
    python benchmarks/slow_worker_alarms.py /tmp/balanced fixtures/workers/*_slow

Each folder given (or each folder below one) is one capture of a 2-worker job. For each,
the numbers the checker's rules read: the unit last most often and in how many steps,
the others' median wait as a share of their step, and the share of the wait its own
numbers explain; then whether RL116 fires, and whether it would without the
consistency and explanation rules (the wait alone). Captures named `*balanced*` count
toward the false-alarm rate, `*slow*` toward detection.
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl

from runlens.analyzer.load import load_run
from runlens.checkers.base import Analysis
from runlens.checkers.slow_worker import (
    LAST_SHARE,
    WARNING_WAIT,
    SlowWorker,
    last_per_step,
    per_unit_step,
)


def captures(args: list[str]) -> list[Path]:
    found = []
    for arg in args:
        p = Path(arg)
        below = sorted(q for q in p.iterdir() if q.is_dir() and (q / "worker0").is_dir())
        found += below if below and not (p / "worker0").is_dir() else [p]
    return found


def measure(path: Path) -> dict:
    a = Analysis(load_run(path, use_cache=False))
    last = last_per_step(per_unit_step(a))
    top = (last.group_by("slow_worker").agg(n=pl.len())
           .sort(["n", "slow_worker"], descending=[True, False]).row(0, named=True))
    wait = last.with_columns(pl.when(pl.col("slow_worker") == top["slow_worker"])
                             .then("wait_share").otherwise(0.0))["wait_share"].median()
    fired = list(SlowWorker().check(a))
    return {"capture": path.name, "last": f"{top['slow_worker']} {top['n']}/{last.height}",
            "wait_share": round(float(wait or 0.0), 3),
            "wait_alone": bool((wait or 0.0) >= WARNING_WAIT),
            "unexplained": bool((wait or 0.0) >= WARNING_WAIT
                                and top["n"] >= LAST_SHARE * last.height),
            "fired": bool(fired),
            "cause": fired[0].evidence["cause"] if fired else ""}


def main() -> None:
    rows = [measure(p) for p in captures(sys.argv[1:])]
    for r in rows:
        print("  ".join(f"{k}={v}" for k, v in r.items()))
    balanced = [r for r in rows if "balanced" in r["capture"]]
    slow = [r for r in rows if "slow" in r["capture"]]
    if balanced:
        print(f"false alarms: {sum(r['fired'] for r in balanced)}/{len(balanced)} balanced "
              f"captures (wait >= {WARNING_WAIT:.0%} alone: "
              f"{sum(r['wait_alone'] for r in balanced)}/{len(balanced)}; and last in "
              f"{LAST_SHARE:.0%} of the steps, without the explanation rule: "
              f"{sum(r['unexplained'] for r in balanced)}/{len(balanced)})")
    if slow:
        print(f"detected: {sum(r['fired'] for r in slow)}/{len(slow)} slowed captures")


if __name__ == "__main__":
    main()
