"""Two-sample statistics for regression checks: Mann-Whitney U and Holm's correction.

Computed for many metrics at once on a long frame (metric, side, value) with polars:
ranks, U and its tie-corrected variance are columns; only the normal tail probability is
a per-metric Python call. The p-values equal scipy.stats.mannwhitneyu's asymptotic method
with continuity correction (tests/test_stats.py checks it against scipy).
"""

from __future__ import annotations

import math

import polars as pl


def _upper_tail(z: float) -> float:
    """P(Z >= z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def mann_whitney(samples: pl.DataFrame) -> pl.DataFrame:
    """One-sided Mann-Whitney U tests of `new` against `base`, per metric.

    `samples` has columns metric (str), side ("base" | "new"), value (float). Returns one
    row per metric with n_base, n_new, u (U of `new`), p_greater (new tends to be larger)
    and p_less, by the normal approximation with tie and continuity corrections.
    Metrics with an empty side get null p-values.
    """
    ranked = samples.with_columns(rank=pl.col("value").rank("average").over("metric"))
    ties = (
        ranked.group_by("metric", "value").agg(t=pl.len())
        .group_by("metric").agg(tie_term=(pl.col("t") ** 3 - pl.col("t")).sum())
    )
    per = (
        ranked.group_by("metric").agg(
            n_base=(pl.col("side") == "base").sum().cast(pl.Int64),
            n_new=(pl.col("side") == "new").sum().cast(pl.Int64),
            rank_new=pl.col("rank").filter(pl.col("side") == "new").sum(),
        )
        .join(ties, on="metric")
        .with_columns(n=pl.col("n_base") + pl.col("n_new"))
        .with_columns(
            u=pl.col("rank_new") - pl.col("n_new") * (pl.col("n_new") + 1) / 2,
            mu=pl.col("n_base") * pl.col("n_new") / 2,
            sigma=(pl.col("n_base") * pl.col("n_new") / 12
                   * ((pl.col("n") + 1) - pl.col("tie_term") / (pl.col("n") * (pl.col("n") - 1)))
                   ).sqrt(),
        )
    )
    p_greater: list[float | None] = []
    p_less: list[float | None] = []
    for u, mu, sigma, nb, nn in per.select("u", "mu", "sigma", "n_base", "n_new").iter_rows():
        if not nb or not nn:
            p_greater.append(None)
            p_less.append(None)
        elif not sigma:  # every value tied: no evidence either way
            p_greater.append(1.0)
            p_less.append(1.0)
        else:
            p_greater.append(_upper_tail((u - mu - 0.5) / sigma))
            p_less.append(_upper_tail((mu - u - 0.5) / sigma))
    return per.select("metric", "n_base", "n_new", "u").with_columns(
        p_greater=pl.Series(p_greater, dtype=pl.Float64),
        p_less=pl.Series(p_less, dtype=pl.Float64),
    )


def holm(p: pl.Expr) -> pl.Expr:
    """Holm-Bonferroni adjusted p-values (family-wise error control) over a column.

    With m tests sorted by p, p_(i) becomes max over j <= i of min(1, (m - j + 1) p_(j)).
    Nulls stay null and do not count as tests.
    """
    m = p.is_not_null().sum()
    order = p.rank("ordinal")
    scaled = ((m - order + 1) * p).clip(upper_bound=1.0)
    # Running maximum in p order, mapped back to the original positions.
    return scaled.sort_by(p).cum_max().gather(order.cast(pl.Int64) - 1)
