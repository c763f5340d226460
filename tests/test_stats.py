"""Our Mann-Whitney U and Holm correction against SciPy's (the dev extra installs it)."""

from __future__ import annotations

import random

import polars as pl
import pytest

from analyzer.stats import holm, mann_whitney

scipy_stats = pytest.importorskip("scipy.stats")


def test_mann_whitney_equals_scipy_asymptotic_with_ties():
    rng = random.Random(7)
    rows, expected = [], {}
    for m in range(40):
        base = [float(round(rng.gauss(100, 10))) for _ in range(rng.randint(5, 30))]
        new = [float(round(rng.gauss(100 + m % 13, 10))) for _ in range(rng.randint(5, 30))]
        rows += [(f"m{m}", "base", v) for v in base] + [(f"m{m}", "new", v) for v in new]
        g = scipy_stats.mannwhitneyu(new, base, alternative="greater", method="asymptotic")
        s = scipy_stats.mannwhitneyu(new, base, alternative="less", method="asymptotic")
        expected[f"m{m}"] = (g.statistic, g.pvalue, s.pvalue)
    ours = mann_whitney(pl.DataFrame(rows, schema=["metric", "side", "value"], orient="row"))
    assert ours.height == 40
    for r in ours.iter_rows(named=True):
        u, p_greater, p_less = expected[r["metric"]]
        assert r["u"] == pytest.approx(u)
        assert r["p_greater"] == pytest.approx(p_greater, abs=1e-12)
        assert r["p_less"] == pytest.approx(p_less, abs=1e-12)


def test_all_tied_samples_give_no_evidence():
    rows = [("m", "base", 5.0)] * 6 + [("m", "new", 5.0)] * 6
    out = mann_whitney(pl.DataFrame(rows, schema=["metric", "side", "value"], orient="row"))
    assert out["p_greater"][0] == 1.0 and out["p_less"][0] == 1.0


def test_holm_matches_the_textbook_procedure():
    p = [0.01, 0.04, 0.03, 0.005, 0.2]
    got = pl.DataFrame({"p": p}).select(holm(pl.col("p")))["p"].to_list()
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    expected, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        expected[i] = running
    assert got == pytest.approx(expected)
