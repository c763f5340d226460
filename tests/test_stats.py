"""The gate's statistics (analyzer/gate/stats.py) against SciPy and textbook values."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy import stats as scipy_stats

from runlens.analyzer.gate.stats import (
    benjamini_hochberg,
    hodges_lehmann,
    mann_whitney_greater,
    smallest_p,
    u_null_cdf,
)


def test_exact_p_values_are_scipys_and_beat_the_normal_approximation():
    rng = np.random.default_rng(3)
    new, base = rng.normal(1.0, 1, (40, 10)), rng.normal(0.0, 1, (40, 10))
    p, method = mann_whitney_greater(new, base)
    assert method == "exact Mann-Whitney U"
    for row in range(40):
        ref = scipy_stats.mannwhitneyu(new[row], base[row], alternative="greater",
                                       method="exact").pvalue
        assert p[row] == pytest.approx(ref, rel=1e-12)
    # Every new step slower than every base step: 1 / C(20, 10), not the 9e-5 of the
    # normal approximation that Holm over 180 metrics could never get below 0.01.
    sep, _ = mann_whitney_greater(np.arange(10, 20.0)[None], np.arange(10.0)[None])
    assert sep[0] == pytest.approx(1 / 184756) == pytest.approx(smallest_p(10, 10))
    normal = scipy_stats.mannwhitneyu(np.arange(10, 20.0), np.arange(10.0),
                                      alternative="greater", method="asymptotic").pvalue
    assert normal >= 9e-5 > 10 * sep[0]


def test_all_tied_samples_give_no_evidence():
    p, _ = mann_whitney_greater(np.full((1, 6), 5.0), np.full((1, 6), 5.0))
    assert p[0] == 1.0


@pytest.mark.parametrize("m, n", [(3, 4), (5, 5), (10, 10), (7, 12)])
def test_u_null_distribution_matches_scipys_exact_p_values(m, n):
    cdf = u_null_cdf(m, n)
    assert len(cdf) == m * n + 1 and cdf[-1] == pytest.approx(1.0)
    rng = random.Random(m * 100 + n)
    for _ in range(20):
        values = rng.sample(range(1000), m + n)
        x, y = np.array(values[:m], float), np.array(values[m:], float)
        res = scipy_stats.mannwhitneyu(x, y, alternative="greater", method="exact")
        u = int(res.statistic)
        ours = 1.0 - (cdf[u - 1] if u > 0 else 0.0)  # P(U >= u)
        assert ours == pytest.approx(res.pvalue, rel=1e-9)


def test_hodges_lehmann_shift_and_moses_interval():
    rng = np.random.default_rng(5)
    new, base = rng.normal(3, 1, (1, 10)), rng.normal(0, 1, (1, 10))
    shift, low, high = hodges_lehmann(new, base)
    diffs = np.sort((new[0][:, None] - base[0][None, :]).ravel())
    assert shift[0] == pytest.approx(np.median(diffs))
    # Textbook: for 10 vs 10 the two-sided 5% critical value of U is 23 (reject when
    # U <= 23), so the 95% interval is the 24th smallest to the 24th largest difference.
    assert low[0] == diffs[23] and high[0] == diffs[100 - 24]
    # Too few samples for 95%: the interval is the whole range of differences.
    _, lo2, hi2 = hodges_lehmann(new[:, :2], base[:, :2])
    d2 = (new[0, :2][:, None] - base[0, :2][None, :]).ravel()
    assert lo2[0] == d2.min() and hi2[0] == d2.max()


def test_benjamini_hochberg_matches_the_textbook_procedure():
    p = np.array([0.01, 0.04, 0.03, 0.005, 0.2])
    m = len(p)
    order = np.argsort(p)
    expected = np.empty(m)
    running = 1.0
    for rank in range(m - 1, -1, -1):
        i = order[rank]
        running = min(running, p[i] * m / (rank + 1))
        expected[i] = running
    assert benjamini_hochberg(p) == pytest.approx(expected)


def test_smallest_attainable_p():
    assert smallest_p(5, 5) == pytest.approx(1 / 252)
    assert smallest_p(20, 20) == pytest.approx(1 / math.comb(40, 20))
