"""A baseline of several runs (issue 11): the run, not the step, is the unit of variation.

Three same-config captures of the 6-block transformer (fixtures/compare/tf_base_a, _b, _c,
separate processes minutes apart) and the one with block3's MLP 8x wider. With two or
more base runs, each metric's floor comes from the spread of the base runs' medians.
"""

from __future__ import annotations

import json
import re

import polars as pl
import pytest

from runlens.analyzer.errors import InputFileError
from runlens.analyzer.gate.baseline import load_baseline
from runlens.analyzer.gate.baseruns import merge_runs, run_sources
from runlens.analyzer.gate.compare import Samples, compare
from tests.conftest import COMPARE, TF_RUNS, run_cli

RUNS = TF_RUNS


def _dirs(*names: str) -> list:
    return [COMPARE / n for n in names]


# tf_base_a as the new run: its process ran tiny ops 3-4x slower (tests/test_ci_gate.py).
# Against one base run the factor per node-duration class absorbs enough of it; against
# b and c together GradientDescent is still +102% (CI from +67%) above a 40% floor from
# the two runs' spread, and AddN +166%: flagged by the statistics (issue 11, docs/ci.md).
# Their work is the same and the new side is one process, so since issue 24 they are
# WATCH lines, not a failed build (docs/ci.md "Verdicts by evidence").
@pytest.mark.parametrize("base, new", [
    (("tf_base_a", "tf_base_b"), "tf_base_c"),
    (("tf_base_b", "tf_base_c"), "tf_base_a"),
    (("tf_base_c", "tf_base_a"), "tf_base_b")])
def test_two_base_runs_against_a_third_same_config_run_exit_0(tf, base, new):
    result = compare(merge_runs([tf[b] for b in base]), tf[new])
    assert result.base_runs == 2 and len(result.run_factors) == 2
    assert result.regressions.height == 0, result.regressions.select(
        "kind", "name", "effect_pct", "floor_pct").rows()
    if new == "tf_base_a":
        assert {"GradientDescent", "AddN"} <= set(result.watches["name"].to_list())
        assert result.watches["work_changed"].to_list() == [False] * result.watches.height
    called = result.rows.filter(pl.col("floor_pct").is_not_null())
    assert set(called["floor_from"].to_list()) == {"2 base runs"}
    run_cli(["compare", *_dirs(*base), COMPARE / new, "--no-cache"], expect_exit=0)


def test_three_base_runs_catch_the_wider_block_and_say_which_floor_applied(tf):
    base = merge_runs([tf[n] for n in RUNS[:3]])
    assert run_sources(base) == list(RUNS[:3])
    result = compare(base, tf["tf_wide_block3"])
    first_two = result.regressions["name"].head(2).to_list()
    assert "gradients/block3/mlp" in first_two, first_two
    called = result.regressions.filter(pl.col("kind") == "scope")["name"].to_list()
    assert all("block3" in n.split("/")[:2] or n.startswith("GradientDescent") or
               n == "gradients" for n in called), called
    out = run_cli(["compare", *_dirs(*RUNS[:3]), COMPARE / "tf_wide_block3", "--no-cache"],
                  expect_exit=1).output
    assert "base: 3 runs" in out
    regs = out.split("REGRESSIONS")[1].splitlines()[1:]
    assert regs[0].split()[1].rstrip(":") in first_two
    assert "from 3 base runs" in regs[0] and "95% CI" in regs[0]
    # one base run: the size-class floors, as before
    one = run_cli(["compare", COMPARE / "tf_base_a", COMPARE / "tf_wide_block3",
                   "--no-cache"], expect_exit=1).output
    assert "size class" in one.split("REGRESSIONS")[1].splitlines()[1]


def _flagged(result) -> list[str]:
    """What the statistics call a regression: since issue 24, with the same work and one
    process a side, a WATCH line (docs/ci.md "Verdicts by evidence")."""
    return result.rows.filter(pl.col("verdict").is_in(["regression", "watch"]))[
        "name"].to_list()


def _swing(s: Samples, scope: str, factor: float) -> Samples:
    """`scope` (and its ancestors, op time and step time) `factor` x slower in every step
    of the run: a whole-process swing like the attention softmax's (docs/ci.md)."""
    hit = pl.col("kind").eq("scope") & pl.col("name").eq(scope)
    added = s.samples.filter(hit).select("sample", add=pl.col("value_us") * (factor - 1))
    parts = scope.split("/")
    up = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    touched = (pl.col("kind").eq("scope") & pl.col("name").is_in(up)) | pl.col("kind").eq(
        "step")
    out = s.samples.join(added, on="sample", how="left").with_columns(
        value_us=pl.col("value_us") + pl.when(touched).then(pl.col("add")).otherwise(0.0)
    ).drop("add")
    return Samples(s.source, out, s.node_medians, s.scope_depth, s.meta)


def test_a_scope_that_swings_between_base_runs_gets_a_higher_floor(tf):
    # block2/mlp takes a different level in one base process than in the other; the new
    # run sits at that other level. One base run at the low level calls it a regression;
    # two base runs have seen the swing, and the scope's floor rises above it.
    scope = "block2/mlp"
    swung = _swing(tf["tf_base_b"], scope, 2.5)
    new = _swing(tf["tf_base_c"], scope, 2.5)
    alone = compare(tf["tf_base_a"], new)  # flagged; same work, one process: WATCH
    assert scope in _flagged(alone)
    both = compare(merge_runs([tf["tf_base_a"], swung]), new)
    assert scope not in _flagged(both)
    row = both.rows.filter(pl.col("name") == scope).row(0, named=True)
    # the same two base runs without the swing: the swing alone raised this scope's
    # spread between the runs, and its floor with it (floor >= spread)
    plain = compare(merge_runs([tf["tf_base_a"], tf["tf_base_b"]]), new).rows.filter(
        pl.col("name") == scope).row(0, named=True)
    assert row["run_spread_pct"] > plain["run_spread_pct"]
    assert row["floor_pct"] > plain["floor_pct"]
    assert row["floor_pct"] >= row["run_spread_pct"]


def test_a_baseline_file_of_several_runs_keeps_them_apart(tf, tmp_path):
    path = tmp_path / "baseline.json"
    run_cli(["baseline", "save", *_dirs("tf_base_a", "tf_base_b"), "-o", path,
             "--no-cache"])
    doc = json.loads(path.read_text())
    assert doc["schema"] == 2 and [r["source"] for r in doc["runs"]] == [
        str(COMPARE / "tf_base_a"), str(COMPARE / "tf_base_b")]
    assert {s.split("#")[0] for s in doc["samples"]} == {"0", "1"}
    loaded = load_baseline(path)
    assert len(run_sources(loaded)) == 2 and "run" in loaded.node_medians.columns
    run_cli(["compare", path, COMPARE / "tf_base_c", "--no-cache"], expect_exit=0)
    out = run_cli(["compare", path, COMPARE / "tf_wide_block3", "--no-cache"],
                  expect_exit=1).output
    assert "from 2 base runs" in out
    # a baseline file and a run dir together: three base runs
    out = run_cli(["compare", path, COMPARE / "tf_base_c", COMPARE / "tf_wide_block3",
                   "--no-cache"], expect_exit=1).output
    assert "base: 3 runs" in out
    # one run dir still makes a schema-1 baseline, as before
    one = tmp_path / "one.json"
    run_cli(["baseline", "save", COMPARE / "tf_base_a", "-o", one, "--no-cache"])
    assert json.loads(one.read_text())["schema"] == 1 and "runs" not in json.loads(
        one.read_text())


@pytest.mark.parametrize("damage, message", [
    (lambda d: d.update(runs=d["runs"][:1]), "at least two runs"),
    (lambda d: d["samples"].__setitem__(0, "7#" + d["samples"][0].split("#")[1]),
     "does not name one of the 2 runs"),
    (lambda d: d["runs"][1].update(source=""), "runs[1].source must be"),
    (lambda d: d["runs"][0]["node_medians_us"].update({"x/y": -1}), "not a time"),
    (lambda d: d.pop("runs"), "at least two runs"),
])
def test_damaged_several_run_baselines_exit_2(tmp_path, damage, message):
    path = tmp_path / "baseline.json"
    run_cli(["baseline", "save", *_dirs("tf_base_a", "tf_base_b"), "-o", path,
             "--no-cache"])
    doc = json.loads(path.read_text())
    damage(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(InputFileError, match=re.escape(message)):
        load_baseline(path)
    out = run_cli(["compare", path, COMPARE / "tf_wide_block3", "--no-cache"],
                  expect_exit=2).output
    assert len(out.strip().splitlines()) == 1 and str(path) in out


def test_base_runs_of_different_scope_depths_are_refused(tmp_path):
    path = tmp_path / "deep.json"
    run_cli(["baseline", "save", COMPARE / "tf_base_a", "-o", path, "--scope-depth", "4",
             "--no-cache"])
    out = run_cli(["compare", path, COMPARE / "tf_base_b", COMPARE / "tf_base_c",
                   "--no-cache"], expect_exit=2).output
    assert len(out.strip().splitlines()) == 1 and "depth" in out


def test_several_new_runs_are_pooled_and_a_slow_process_among_them_does_not_fail(tf, tmp_path):
    """--new-runs N: the last N paths are new runs, pooled like a baseline file of several
    runs passed as NEW. tf_base_a (the process that ran every optimizer update 3x slower)
    pooled with tf_base_c against tf_base_b: a median over both processes' steps, exit 0
    (docs/ci.md: with 3 new runs the false alarms of the study went to 0-2/300)."""
    pooled = compare(tf["tf_base_b"], merge_runs([tf["tf_base_c"], tf["tf_base_a"]]))
    assert pooled.regressions.height == 0
    out = run_cli(["compare", *_dirs("tf_base_b", "tf_base_c", "tf_base_a"), "--new-runs",
                   "2", "--no-cache", "--format", "json"], expect_exit=0).stdout
    report = json.loads(out)
    assert report["new"].startswith("2 runs"), report["new"]
    # The same as a baseline file of the two new runs passed as NEW.
    new_file = tmp_path / "new.json"
    run_cli(["baseline", "save", *_dirs("tf_base_c", "tf_base_a"), "-o", new_file,
             "--no-cache"], expect_exit=0)
    as_file = json.loads(run_cli(["compare", COMPARE / "tf_base_b", new_file, "--format",
                                  "json"], expect_exit=0).stdout)
    assert [r["name"] for r in as_file["metrics"]] == [r["name"] for r in report["metrics"]]
    assert [r["effect_pct"] for r in as_file["metrics"]] == [
        r["effect_pct"] for r in report["metrics"]]


def test_new_runs_must_leave_a_base():
    out = run_cli(["compare", *_dirs("tf_base_b", "tf_base_c"), "--new-runs", "2"],
                  expect_exit=2).output
    assert "leaves no BASE" in out
