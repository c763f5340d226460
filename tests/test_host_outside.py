"""Work outside the steps (fixtures/gen_host.py host_input_outside: `next(iterator)` before
each step's marker opens, a tf.data map on tf.data's own threads): its own row, never a
share of a step; per-step numbers divide by the steps analysed (tfprof's per-node
averaging with --tfprof); the critical path lies within the step it names. Expected
numbers come from the run's executions, step markers and thread names."""

from __future__ import annotations

import json

import polars as pl
import pytest

from runlens.analyzer.analysis.graph import step_critical_paths
from runlens.analyzer.analysis.nodestats import node_stats
from runlens.analyzer.analysis.steps import step_times
from runlens.analyzer.analysis.stepselect import StepChoice, analysed
from runlens.checkers import REGISTRY
from runlens.checkers.base import Analysis
from tests.conftest import run_cli
from tests.xplane_run import FIXTURES, fixture_file, xplane_run

OUTSIDE = FIXTURES / "host_input_outside"


def in_steps(run) -> pl.DataFrame:  # type: ignore[no-untyped-def]
    """The executions that began inside their step's marker, on a thread no tf.data
    pool owns (tf_data_iterator_get_next is the step's own wait)."""
    spans = step_times(run).select("worker", "step", lo="start_ns", hi="end_ns")
    pools = run.threads.filter(pl.col("name").str.starts_with("tf_data")
                               & ~pl.col("name").str.starts_with("tf_data_iterator_get_next"))
    return (run.nodes.join(spans, on=["worker", "step"])
            .filter((pl.col("start_ns") >= pl.col("lo")) & (pl.col("start_ns") < pl.col("hi")))
            .join(pools.select("worker", "step", "lane", "thread_id"),
                  on=["worker", "step", "lane", "thread_id"], how="anti"))


def test_background_work_is_no_share_of_a_step() -> None:
    a = Analysis(xplane_run(fixture_file("host_input_outside")))
    (top,) = REGISTRY["RL101"]().check(a)
    for group in ("kernels", "scopes"):
        shares = [r["share_of_step"] for r in top.evidence.get(group, [])]
        assert shares and max(shares) <= 1.0, (group, shares)
    # Before: Dataset 1991% of a 0.9 ms step (the map on tf.data's threads, the waits
    # between the markers).
    assert "Dataset" not in [k["kernel"] for k in top.evidence["kernels"]]


def test_outside_work_is_its_own_row() -> None:
    run = xplane_run(fixture_file("host_input_outside"))
    inside = in_steps(run)
    want_ms = (run.nodes["op_end_rel_ns"].sum() - inside["op_end_rel_ns"].sum()) / 1e6
    assert want_ms > 50  # the waits between the steps and the map's threads
    out = run_cli(["ops", OUTSIDE]).output
    (note,) = [ln for ln in out.splitlines() if "outside steps:" in ln]
    assert f"{want_ms:.2f}ms" in note
    assert "per step: sums over the steps analysed" in out
    summary = run_cli(["summary", OUTSIDE]).output
    assert f"outside    {want_ms:.2f}ms of op time ran outside the steps" in summary


def test_per_step_numbers_divide_by_the_steps_analysed() -> None:
    fewer = 0
    for name in ("host_input_outside", "host_input_keras", "host_eager"):
        run = analysed(xplane_run(fixture_file(name)), StepChoice(True))
        inside = in_steps(run)
        n = len(run.steps)
        want = inside.group_by("node_name").agg(ns=pl.col("op_end_rel_ns").sum(),
                                                ran=pl.col("step").n_unique())
        ours = node_stats(run, -1, "steps").select("name", "micros")
        tfprof = node_stats(run, -1, "node").select("name", "micros")
        both = want.join(ours, left_on="node_name", right_on="name").join(
            tfprof, left_on="node_name", right_on="name", suffix="_tfprof")
        assert both.height == want.height
        assert ((both["micros"] - both["ns"] / 1000 / n).abs() < 1e-6).all(), name
        assert ((both["micros_tfprof"] - both["ns"] / 1000 / both["ran"]).abs()
                < 1e-6).all(), name
        fewer += int((both["ran"] < n).sum())
    assert fewer  # some node ran in fewer steps: the two averages differ there
    out = run_cli(["ops", OUTSIDE, "--format", "json", "--include-warmup", "--tfprof"]).output
    doc = json.loads(out[out.index("{"):])
    assert doc["options"]["average"] == "node"


@pytest.mark.parametrize("name", ["host_input_outside", "host_input_step"])
def test_the_critical_path_lies_within_its_step(name: str) -> None:
    run = xplane_run(fixture_file(name))
    spans = {r["step"]: (r["start_ns"], r["end_ns"]) for r in step_times(run).iter_rows(
        named=True)}
    paths = step_critical_paths(run, run.steps)
    assert any(p.ops.height for p in paths)
    for p in paths:
        lo, hi = spans[p.step]
        assert p.ops.filter((pl.col("start_ns") < lo) | (pl.col("start_ns") >= hi)).height == 0
        assert p.length_ns <= p.step_ns <= hi - lo


def test_input_wait_between_the_markers_is_said_not_shared() -> None:
    """xprof's input share of this profile is 0% (its waits lie outside the markers):
    no in-step input finding; one finding says the loop waits outside the markers."""
    a = Analysis(xplane_run(fixture_file("host_input_outside")))
    findings = list(REGISTRY["RL105"]().check(a))
    assert [f for f in findings if "input_share" in f.evidence] == []
    (outside,) = findings
    assert outside.evidence["outside_steps_share"] > 0.5
    assert "outside the step markers" in outside.message
    assert "next(iterator) inside the step" in outside.suggestion
