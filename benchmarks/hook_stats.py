"""benchmarks/hook_overhead.py's statistics: the hierarchical bootstrap of a difference of
median step times, the sign test over rounds, and the µs formatting of its tables; numpy
only, kept apart from the TensorFlow loop that measures the step times."""

from __future__ import annotations

from typing import Any

import numpy as np


def median_diff_boot(
    a: np.ndarray, b: np.ndarray, n_boot: int, rng: np.random.Generator
) -> tuple[float, float, float]:
    """median(b) - median(a) and a 95% CI from a hierarchical bootstrap.

    `a` and `b` are (sessions, rounds, steps) arrays measured in the same rounds. Each
    replicate draws rounds with replacement (the same rounds for a and b), then sessions
    with replacement within a and within b, then steps with replacement within every
    (session, round). Rounds carry the machine's drift into the interval, sessions their
    lifelong offsets, steps the step-to-step noise.
    """
    point = float(np.median(b) - np.median(a))
    n_rounds = a.shape[1]
    reps = np.empty(n_boot)
    chunk = max(1, 2_000_000 // max(a.size, b.size))
    for start in range(0, n_boot, chunk):
        k = min(chunk, n_boot - start)
        rounds = rng.integers(0, n_rounds, size=(k, 1, n_rounds))
        meds = []
        for x in (a, b):
            sessions = rng.integers(0, x.shape[0], size=(k, x.shape[0], 1))
            rows = x[sessions, rounds]  # (k, sessions, rounds, steps)
            cols = rng.integers(0, x.shape[2], size=rows.shape)
            meds.append(np.median(np.take_along_axis(rows, cols, axis=3).reshape(k, -1), axis=1))
        reps[start:start + k] = meds[1] - meds[0]
    lo, hi = np.percentile(reps, [2.5, 97.5])
    return point, float(lo), float(hi)


def sign_test_p(diffs: np.ndarray) -> float:
    """Two-sided exact sign test: are the differences positive more often than chance?"""
    from math import comb

    n = int(np.sum(diffs != 0))
    k = int(np.sum(diffs > 0))
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(0, min(k, n - k) + 1)) / 2**n
    return min(1.0, 2 * tail)


def us(x: float) -> str:
    return f"{x * 1e6:,.0f}"


def sus(x: float) -> str:
    return f"{x * 1e6:+,.0f}"


def listing(values: np.ndarray, fmt: Any) -> str:
    """All values when there are few, else their quartiles."""
    if len(values) <= 16:
        return ", ".join(fmt(v) for v in values)
    q = np.percentile(values, [0, 25, 50, 75, 100])
    return "min/q1/median/q3/max " + " / ".join(fmt(v) for v in q)
