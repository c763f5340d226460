"""The machine factor per node-duration class (analyzer.machinefactor, issue 11), on the
real same-config pair whose new process ran tiny ops 3-4x slower (fixtures/compare:
tf_base_a against tf_base_b)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from runlens.analyzer import machinefactor
from runlens.analyzer.compare import compare, machine_factor


@pytest.fixture(scope="module")
def pair(tf):
    return tf["tf_base_b"], tf["tf_base_a"]


def _nodes(base, new) -> pl.DataFrame:
    return (base.node_medians.join(new.node_medians.select("name", new_us="median_us"),
                                   on="name").sort("median_us", "name"))


def test_tiny_nodes_get_their_own_factor(pair):
    base, new = pair
    nodes = _nodes(base, new)
    uppers, factors = machinefactor.class_factors(
        nodes["median_us"].to_numpy(), (nodes["new_us"] / nodes["median_us"]).to_numpy())
    # Every class holds enough nodes, and the classes cover every node.
    counts = np.diff(np.searchsorted(nodes["median_us"].to_numpy(), uppers, side="left"),
                     prepend=0)
    assert (counts[:-1] >= machinefactor.BIN_MIN_NODES).all()
    # The same as the raw ratios say: the update nodes (ResourceApplyGradientDescent, 2-4 us
    # in the base) ran far slower than the MatMuls, and one machine-wide factor cannot say so.
    ratio = nodes.with_columns(r=pl.col("new_us") / pl.col("median_us"))
    apply_ratio = ratio.filter(pl.col("op_type") == "ResourceApplyGradientDescent")["r"].median()
    matmul_ratio = ratio.filter(pl.col("op_type") == "MatMul")["r"].median()
    assert apply_ratio > 2 * matmul_ratio
    tiny = factors[np.searchsorted(uppers, 3.0, side="right")]
    one = machine_factor(base, new)[0]
    assert abs(tiny - apply_ratio) < abs(one - apply_ratio)
    assert abs(factors[-1] - matmul_ratio) < abs(tiny - matmul_ratio)


def test_a_scope_is_divided_by_its_nodes_classes(pair):
    base, new = pair
    r = compare(base, new)
    nodes = _nodes(base, new)
    uppers, factors = machinefactor.class_factors(
        nodes["median_us"].to_numpy(), (nodes["new_us"] / nodes["median_us"]).to_numpy())
    gd = nodes.filter(pl.col("name").str.starts_with("GradientDescent/"))
    cls = np.minimum(np.searchsorted(uppers, gd["median_us"].to_numpy(), side="right"),
                     len(uppers) - 1)
    by_hand = gd["new_us"].sum() / float(np.sum(gd["new_us"].to_numpy() / factors[cls]))
    row = r.rows.filter((pl.col("kind") == "scope") & (pl.col("name") == "GradientDescent"))
    assert row["new_median_us"][0] / row["norm_median_us"][0] == pytest.approx(by_hand,
                                                                              rel=1e-9)
    assert r.regressions.height == 0  # the false alarm of docs/ci.md is gone


def test_off_means_one_factor_and_no_normalize_means_none(pair, monkeypatch):
    base, new = pair
    plain = compare(base, new, normalize=False).rows
    assert plain["norm_median_us"].to_list() == plain["new_median_us"].to_list()
    monkeypatch.setattr(machinefactor, "BY_SIZE", False)
    one = compare(base, new)
    ratios = (one.rows.filter(pl.col("base_median_us") > 0)
              .select(f=pl.col("new_median_us") / pl.col("norm_median_us"))["f"].drop_nans())
    assert ratios.to_numpy() == pytest.approx(one.factor, rel=1e-9)
