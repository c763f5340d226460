"""Warm-up and outlier steps, one rule for the whole engine (analyzer.analysis.stepselect): left out
of averages, checks and statistics by default, named where they are left out, kept with
--include-warmup (and by ViewOptions.tfprof()), and --steps A:B on every command.

Fixtures: fixtures/compare/base_b (a real 20-step capture whose steps 4 and 5 are warm-up:
1.44 and 1.66 ms against a 1.03 ms median), fixtures/runs/cnn (step 18 a contention spike,
7.3 ms against 3.3-4.3 ms), fixtures/runs/straggler (stragglers at steps 8 and 13)."""

from __future__ import annotations

import json
import shutil

import polars as pl
import pytest

from runlens import checkers
from runlens.analyzer import cache
from runlens.analyzer.analysis.steps import median_step
from runlens.analyzer.analysis.stepselect import StepChoice, analysed, step_flags
from runlens.analyzer.analysis.views import ViewOptions, code_view, graph_view, op_view, scope_view
from runlens.analyzer.load import load_run
from tests.conftest import FIXTURES, ROOT, run_cli

BASE_B = ROOT / "fixtures" / "compare" / "base_b"
VIEWS = (op_view, scope_view, code_view, graph_view)


def test_warmup_of_a_real_capture_is_flagged_once():
    flags = step_flags(load_run(BASE_B, use_cache=False)).filter(pl.col("left_out"))
    assert flags.select("step", "why").rows() == [(4, "warm-up"), (5, "warm-up")]


@pytest.mark.parametrize("options", [
    ViewOptions(), ViewOptions(include_warmup=True), ViewOptions.tfprof(),
    ViewOptions(first_step=6, last_step=12), ViewOptions(op_types="graph", max_depth=3)])
def test_cold_warm_and_uncached_views_agree(tmp_path, options):
    """The cache holds step -1's numbers for the default steps; every choice of steps
    gives the same rows from a cold load (computed), a warm one (cached) and no cache."""
    for name, src in (("cnn", FIXTURES / "cnn"), ("base_b", BASE_B)):
        shutil.copytree(src, tmp_path / name, ignore=shutil.ignore_patterns(".runlens"))
        runs = [load_run(tmp_path / name, use_cache=False), load_run(tmp_path / name),
                load_run(tmp_path / name)]
        for view in VIEWS:
            rows = [view(run, options).rows for run in runs]
            assert rows[0].equals(rows[1]) and rows[0].equals(rows[2]), (name, view)


def test_default_views_leave_out_what_include_warmup_keeps():
    """cnn: the default average is the average over its steps but 18 (the only one left
    out), computed through --steps, a separate path; with --include-warmup it is all."""
    run = load_run(FIXTURES / "cnn", use_cache=False)
    assert run.steps[-1] == 18
    default = op_view(run, ViewOptions()).rows
    by_range = op_view(run, ViewOptions(include_warmup=True, last_step=17)).rows
    assert default.equals(by_range)
    everything = op_view(run, ViewOptions(include_warmup=True)).rows
    assert everything.equals(op_view(run, ViewOptions.tfprof(op_types="kernel", zero_rows=False,
                                                             depth_from_root=False,
                                                             library_frames=False)).rows)
    conv = [r.filter(pl.col("name") == "Conv2D")["micros"][0] for r in (default, everything)]
    print(f"cnn Conv2D per step: {conv[0]} us without step 18, {conv[1]} us with it")
    assert conv[0] < conv[1]


def test_a_warmup_step_is_no_straggler_but_a_later_one_is():
    base_b = load_run(BASE_B, use_cache=False)
    found = checkers.run_checks(base_b, select=["step-time-variance"])
    assert not [f for f in found if "straggler step" in f.message]
    kept = checkers.run_checks(base_b, select=["step-time-variance"],
                               steps=StepChoice(include_warmup=True))
    assert any(f.where.get("step") == 5 for f in kept)  # 1.6x the median with warm-up kept
    straggler = checkers.run_checks(load_run(FIXTURES / "straggler", use_cache=False),
                                    select=["step-time-variance"])
    steps = {s["step"] for f in straggler for s in f.evidence.get("stragglers", [])}
    assert steps == {8, 13}


def test_summary_names_left_out_steps_and_why():
    doc = json.loads(run_cli(["summary", BASE_B, "--format", "json"]).output)["summary"]
    assert [(d["step"], d["why"]) for d in doc["left_out"]] == [(4, "warm-up"), (5, "warm-up")]
    assert doc["step_time_us"]["count"] == 18
    assert {d["step"] for d in doc["per_step"] if not d["analysed"]} == {4, 5}
    text = run_cli(["summary", BASE_B]).output
    assert "left out   step 4 on worker:0" in text and "warm-up" in text
    doc = json.loads(run_cli(["summary", BASE_B, "--format", "json",
                              "--include-warmup"]).output)["summary"]
    assert doc["left_out"] == [] and doc["step_time_us"]["count"] == 20
    doc = json.loads(run_cli(["summary", BASE_B, "--format", "json",
                              "--steps", "10:14"]).output)["summary"]
    assert doc["step_time_us"]["count"] == 5


def test_advise_says_which_steps_it_left_out():
    out = run_cli(["advise", BASE_B]).output
    assert "left out warm-up step(s) 4 (worker:0), 5 (worker:0)" in out
    doc = json.loads(run_cli(["advise", BASE_B, "--format", "json"]).output)
    assert [d["step"] for d in doc["left_out"]] == [4, 5]
    assert "left_out" not in json.loads(run_cli(["advise", BASE_B, "--format", "json",
                                                 "--include-warmup"]).output)


@pytest.mark.parametrize("command", [["summary"], ["advise"], ["ops"], ["scopes"], ["code"],
                                     ["graph"], ["graph", "--critical-path"]])
def test_every_command_takes_steps_and_include_warmup(command):
    run_cli([*command, BASE_B, "--steps", "6:", "--include-warmup"])
    err = run_cli([*command, BASE_B, "--steps", "9:3"], expect_exit=2).stderr
    assert err.count("\n") == 1 and "--steps" in err


def test_critical_path_and_timeline_use_the_median_of_the_analysed_steps(tmp_path):
    run = load_run(BASE_B, use_cache=False)
    median = median_step(analysed(run))
    out = run_cli(["graph", "--critical-path", BASE_B, "--format", "json"]).output
    assert json.loads(out)["step"] == median
    result = run_cli(["timeline", BASE_B, "-o", tmp_path / "t.json"])
    assert f"step {median} (median step time)" in result.stderr


def test_compare_include_warmup_is_keep_outliers():
    a = run_cli(["compare", BASE_B, ROOT / "fixtures/compare/base_a", "--format", "json",
                 "--include-warmup"]).output
    b = run_cli(["compare", BASE_B, ROOT / "fixtures/compare/base_a", "--format", "json",
                 "--keep-outliers"]).output
    assert a == b


def test_report_and_baseline_take_the_step_options(tmp_path):
    from runlens.analyzer.report.run_data import run_data

    run = load_run(FIXTURES / "cnn", use_cache=False)
    kept = run_data(run, [], "cnn", StepChoice(include_warmup=True))["ops"]["total"]["micros"]
    default = run_data(run, [], "cnn")["ops"]["total"]["micros"]
    assert kept == op_view(run, ViewOptions(include_warmup=True)).root["micros"]
    assert default == op_view(run, ViewOptions()).root["micros"] != kept
    run_cli(["report", FIXTURES / "cnn", "-o", tmp_path / "r.html", "--include-warmup",
             "--steps", "6:"])
    run_cli(["baseline", "save", BASE_B, "-o", tmp_path / "b.json", "--steps", "6:10"])
    doc = json.loads((tmp_path / "b.json").read_text())
    assert len({s for s in json.dumps(doc).split('"') if s.startswith("worker:0/")}) == 5


def test_a_warm_view_reads_no_executions_even_with_steps_left_out(tmp_path):
    """The step flags and the default step -1 numbers come from the cache: a warm `ops`
    on a run with a left-out step never loads the executions (the million-row frame)."""
    shutil.copytree(FIXTURES / "cnn", tmp_path / "cnn", ignore=shutil.ignore_patterns(".runlens"))
    first = load_run(tmp_path / "cnn")
    op_view(first, ViewOptions())  # computes what the cache keeps for the next analysis
    scope_view(first, ViewOptions())
    cache.wait()
    warm = load_run(tmp_path / "cnn")
    assert step_flags(warm)["left_out"].any()
    op_view(warm, ViewOptions())
    scope_view(warm, ViewOptions())
    assert callable(warm._frames["executions"])


def test_views_note_the_steps_they_leave_out_on_stderr():
    result = run_cli(["ops", FIXTURES / "cnn", "--format", "json"])
    assert "averages leave out step(s) 18 (outlier); --include-warmup keeps them" in result.stderr
    json.loads(result.stdout)
    assert "leave out" not in run_cli(["ops", FIXTURES / "cnn", "--tfprof"]).stderr
    assert "leave out" not in run_cli(["ops", FIXTURES / "cnn", "--step", "18"]).stderr


def test_a_gross_first_step_is_warm_up_even_with_few_steps():
    """gpu_mnist has 5 traced steps (fewer than warmup.MIN_STEPS); its first is 91x the
    others. With few steps only such a gross first step is flagged: the same steps with
    the first at 2x the others' median are all kept."""
    from runlens.analyzer.analysis.warmup import FEW_WARMUP_RATIO, flag_steps

    flags = step_flags(load_run(FIXTURES / "gpu_mnist", use_cache=False))
    assert flags.filter(pl.col("left_out")).select("step", "why").rows() == [(1, "warm-up")]
    summary = run_cli(["summary", FIXTURES / "gpu_mnist"]).stdout
    assert "left out   step 1 on worker:0" in summary and "(over 4 steps)" in summary
    times = step_flags(load_run(FIXTURES / "gpu_mnist", use_cache=False)).select(
        "worker", "step", "step_us")
    rest = float(times.filter(pl.col("step") > 1)["step_us"].median())
    for ratio, flagged in ((2.0, False), (FEW_WARMUP_RATIO * 1.01, True)):
        tamed = times.with_columns(step_us=pl.when(pl.col("step") == 1)
                                   .then(ratio * rest).otherwise(pl.col("step_us")))
        assert flag_steps(tamed)["left_out"].to_list()[0] is flagged, ratio
        assert flag_steps(tamed.head(2))["left_out"].sum() == 0  # 2 steps: nothing
