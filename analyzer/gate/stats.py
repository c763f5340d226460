"""Two-sample statistics for the CI gate (docs/ci.md): exact Mann-Whitney p-values, the
Hodges-Lehmann shift with its exact confidence interval, Benjamini-Hochberg.

Small samples (10 steps a side) are the normal case in CI, so p-values are exact
(scipy.stats.mannwhitneyu, method "exact", vectorized over metrics): the normal
approximation's smallest one-sided p at 10 vs 10 is 9e-5, the exact one 5.4e-6. SciPy has
no Hodges-Lehmann interval; its critical value comes from the exact null distribution of U
(`u_null_cdf`, a generating-function count, checked against SciPy's exact p-values in
tests/test_stats.py). scipy is imported lazily: `analyze --help` must start fast.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

EXACT_MAX_N = 50  # exact p-values up to this many samples a side, asymptotic above


def mann_whitney_greater(new: np.ndarray, base: np.ndarray) -> tuple[np.ndarray, str]:
    """One-sided p-values that `new` tends to be larger than `base`, row by row.

    `new` (k x n) and `base` (k x m) hold one metric per row. Returns (p, method name).
    Exact (no tie correction, which makes it slightly conservative with ties) when both
    sides have at most EXACT_MAX_N samples; the normal approximation above.
    """
    from scipy.stats import mannwhitneyu

    exact = max(new.shape[1], base.shape[1]) <= EXACT_MAX_N
    method = "exact" if exact else "asymptotic"
    if new.shape[0] == 0:
        return np.zeros(0), method
    res = mannwhitneyu(new, base, alternative="greater", method=method, axis=1)
    p = np.asarray(res.pvalue, dtype=float)
    tied = (np.ptp(np.concatenate([new, base], axis=1), axis=1) == 0)
    p[tied] = 1.0  # every value the same: no evidence either way
    name = "exact Mann-Whitney U" if exact else "Mann-Whitney U (normal approximation)"
    return p, name


def smallest_p(n_new: int, n_base: int) -> float:
    """The smallest one-sided p the exact test can give: 1 / C(n + m, n)."""
    return 1.0 / math.comb(n_new + n_base, n_new)


@lru_cache(maxsize=256)
def u_null_cdf(m: int, n: int) -> tuple[float, ...]:
    """P(U <= u) for u = 0..m*n under the null (no ties), exactly.

    The counts are the coefficients of the Gaussian binomial [m+n choose m]_q, built by
    the recurrence c(m, n) = c(m-1, n) shifted by n + c(m, n-1).
    """
    table: dict[tuple[int, int], np.ndarray] = {}
    for i in range(m + 1):
        for j in range(n + 1):
            if i == 0 or j == 0:
                table[i, j] = np.ones(1, dtype=object)
                continue
            a, b = table[i - 1, j], table[i, j - 1]
            out = np.zeros(i * j + 1, dtype=object)
            out[j:j + a.size] += a
            out[:b.size] += b
            table[i, j] = out
    counts = table[m, n]
    total = sum(counts)
    return tuple(float(c) for c in np.cumsum(counts) / total)


def hodges_lehmann(new: np.ndarray, base: np.ndarray,
                   level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hodges-Lehmann shift of `new` over `base` per row, with its exact two-sided
    confidence interval (Moses' order statistics of the pairwise differences).

    Returns (shift, low, high). The interval is the k-th smallest and k-th largest of the
    m*n differences, k the largest count with P(U < k) <= (1 - level) / 2; when the
    sample sizes cannot reach `level` (tiny samples), the interval is the full range.
    """
    k_rows, n = new.shape
    m = base.shape[1]
    diffs = np.sort((new[:, :, None] - base[:, None, :]).reshape(k_rows, n * m), axis=1)
    shift = np.median(diffs, axis=1)
    cdf = u_null_cdf(n, m)
    tail = (1.0 - level) / 2
    k = 0  # P(U <= k - 1) <= tail
    while k < len(cdf) and cdf[k] <= tail:
        k += 1
    k = max(k, 1)
    return shift, diffs[:, k - 1], diffs[:, n * m - k]


def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (false discovery rate), via SciPy."""
    from scipy.stats import false_discovery_control

    if p.size == 0:
        return p
    return np.asarray(false_discovery_control(p, method="bh"), dtype=float)
