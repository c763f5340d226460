"""The work diff and the verdicts by evidence (issue 24, docs/ci.md "Verdicts by evidence")
on real captures (fixtures/compare): same-config processes do the same work; the 8x wider
MLP block and the 4x wider dense2 show it in their scopes' work; every line's numbers can
be redone from what it prints."""

from __future__ import annotations

import json

import polars as pl
import pytest

from runlens.analyzer.gate.baseline import load_baseline, save_baseline
from runlens.analyzer.gate.compare import compare, samples_from_run
from runlens.analyzer.gate.workdiff import work_diff, work_from_run, work_note
from runlens.analyzer.load import load_run
from tests.conftest import COMPARE, run_cli

SAME = [("tf_base_a", "tf_base_b"), ("tf_base_b", "tf_base_c"), ("tf_base_c", "tf_base_a"),
        ("base_a", "base_b")]


@pytest.fixture(scope="module")
def work():
    names = {n for pair in SAME for n in pair} | {"tf_wide_block3", "slow_dense2"}
    return {n: work_from_run(load_run(COMPARE / n, use_cache=False)) for n in names}


@pytest.mark.parametrize("base, new", SAME)
def test_same_config_processes_do_the_same_work(work, base, new):
    diff = work_diff(work[base], work[new], 3)
    assert diff.height >= 20 and not diff["work_changed"].any()
    step = diff.filter(pl.col("name") == "op time").row(0, named=True)
    assert work_note(step).startswith(f"work unchanged ({step['nodes_base']} nodes")


def test_the_wider_block_changes_its_scopes_work_and_nothing_else(work):
    diff = work_diff(work["tf_base_a"], work["tf_wide_block3"], 3)
    changed = set(diff.filter((pl.col("kind") == "scope") & pl.col("work_changed"))["name"])
    assert {"block3/mlp", "block3/mlp/fc1", "gradients/block3/mlp",
            "GradientDescent/update_block3/mlp"} <= changed
    # no other block's scope
    assert not any(n.split("/")[0] in ("block0", "block1", "block2", "block4", "block5")
                   or n.split("/")[1:2] in (["block0"], ["block2"], ["block5"])
                   for n in changed), changed
    fc1 = diff.filter(pl.col("name") == "block3/mlp/fc1").row(0, named=True)
    # 64 -> 256 becomes 64 -> 2048: 8x the weights and 8x the hidden activations
    assert fc1["params_new"] == 8 * fc1["params_base"] == 8 * 64 * 256
    assert fc1["resized_ratio"] == pytest.approx(8.0)
    assert "parameters x8 (16,384 -> 131,072)" in work_note(fc1)
    # the optimizer's update of the 8x larger weights writes nothing but reads 8x more
    update = diff.filter(pl.col("name") == "GradientDescent/update_block3/mlp").row(
        0, named=True)
    assert update["in_bytes_new"] == pytest.approx(8 * update["in_bytes_base"], rel=0.01)


def test_a_wider_layer_fails_naming_its_scope_with_the_work_diff():
    out = run_cli(["compare", COMPARE / "base_a", COMPARE / "slow_dense2", "--no-cache"],
                  expect_exit=1).stdout
    regs = out.split("REGRESSIONS")[1]
    first = regs.splitlines()[1]
    assert "dense2" in first.split()[1]
    assert "work: " in regs.splitlines()[2] and "x4" in regs.splitlines()[2]
    assert regs.splitlines()[3].strip().startswith("rule: work changed")


def test_every_line_can_be_redone_from_its_numbers():
    """raw new / factor = normalized median; raw and normalized change against the base
    median; the contribution against op time's change (JSON, the numbers printed)."""
    doc = json.loads(run_cli(["compare", COMPARE / "tf_base_b", COMPARE / "tf_wide_block3",
                              "--no-cache", "--format", "json"], expect_exit=1).stdout)
    op = next(m for m in doc["metrics"] if m["name"] == "op time")
    op_delta = op["normalized_median_us"] - op["base_median_us"]
    lines = [m for m in doc["metrics"] if m["verdict"] in ("regression", "watch")]
    assert lines
    for m in lines:
        base, new, f = m["base_median_us"], m["new_median_us"], m["factor"]
        assert m["normalized_median_us"] == pytest.approx(new / f, rel=1e-3, abs=0.1)
        # to the precision printed (medians to 0.1 us)
        assert 1 + m["raw_change_pct"] / 100 == pytest.approx(new / base, rel=0.01)
        assert 1 + m["normalized_change_pct"] / 100 == pytest.approx(
            m["normalized_median_us"] / base, rel=0.01)
        assert m["factor_from"] and m["rule"] and m["work"]
        if m["kind"] == "scope":
            assert m["contribution_pct"] == pytest.approx(
                (m["normalized_median_us"] - base) / op_delta * 100, rel=1e-2, abs=0.2)
    assert all(m["work_diff"]["work_changed"] for m in lines if m["kind"] == "scope")


def test_same_work_slower_at_one_process_a_side_is_a_watch_line_shown_with_its_advice():
    """tf_base_a's process ran every optimizer update 2-3x slower; against two base runs
    of the same program the statistics flag GradientDescent and AddN. Same work, one new
    process: WATCH lines with the advice, exit 0 (issue 24)."""
    out = run_cli(["compare", COMPARE / "tf_base_b", COMPARE / "tf_base_c",
                   COMPARE / "tf_base_a", "--no-cache"], expect_exit=0).stdout
    watch = out.split("WATCH (same work, not failing the build) (")[1]
    assert "GradientDescent" in watch and "work unchanged" in watch
    assert "run 3 base and 3 new processes (--new-runs 3) to judge it" in watch
    assert "result: OK (0 regression(s), 2 WATCH line(s))" in out
    args = ["compare", COMPARE / "tf_base_b", COMPARE / "tf_base_c", COMPARE / "tf_base_a",
            "--no-cache"]
    md = run_cli([*args, "--format", "markdown"]).stdout
    assert "WATCH (same work, not failing):" in md and "| 👁️ | scope | `GradientDescent`" in md
    junit = run_cli([*args, "--format", "junit"]).stdout
    assert 'failures="0"' in junit and "watch: GradientDescent: raw " in junit
    doc = json.loads(run_cli([*args, "--format", "json"]).stdout)
    assert doc["watches"] == 2 and doc["regressions"] == 0


def test_baseline_files_keep_the_work_and_refuse_bad_work(tmp_path):
    s = samples_from_run(load_run(COMPARE / "base_a", use_cache=False), "base_a")
    path = tmp_path / "b.json"
    save_baseline(s, path)
    back = load_baseline(path)
    assert back.work is not None and back.work.height == s.work.height
    assert back.work.sort("name").equals(s.work.sort("name"))
    new = samples_from_run(load_run(COMPARE / "slow_dense2", use_cache=False), "new")
    assert compare(back, new).regressions.filter(pl.col("name") == "dense2")[
        "work_changed"][0] is True
    doc = json.loads(path.read_text())
    name = next(iter(doc["node_work"]))
    doc["node_work"][name][2] = -5
    path.write_text(json.dumps(doc))
    out = run_cli(["compare", path, COMPARE / "base_b", "--no-cache"], expect_exit=2).output
    assert "invalid baseline: node_work" in out and len(out.strip().splitlines()) == 1
