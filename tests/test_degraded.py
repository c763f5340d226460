"""Degraded analysis is never silent: what a source lacks is declared (Run.lacks) by every
source the same way, and what needs it says it was skipped, or how it did without.

Fixtures: fixtures/runs/gpu_kittibox and gpu_mnist (run dirs converted from public
tf.timeline traces: steps only, no graph.pb, op_log.pb, partition graphs or memory), and
real captures with their graph removed (the executions are the captured ones)."""

from __future__ import annotations

import json

import pytest

from runlens import checkers
from runlens.analyzer.load import load_run
from runlens.analyzer.report.run_data import run_data
from tests.conftest import FIXTURES, ROOT, run_cli

CONVERTED = ["gpu_kittibox", "gpu_mnist"]
TIMELINES = ROOT / "fixtures" / "sources" / "profilerhook"


@pytest.mark.parametrize("name", CONVERTED)
def test_a_run_dir_declares_what_it_lacks(name):
    lacks = load_run(FIXTURES / name, use_cache=False).lacks
    assert set(lacks) == {"graph", "partition graphs", "code", "float_ops", "memory",
                          "outputs"}
    assert "no graph.pb" in lacks["graph"] and "no op_log.pb" in lacks["code"]
    assert load_run(FIXTURES / "cnn", use_cache=False).lacks == {}
    out = run_cli(["summary", FIXTURES / name]).output
    assert "lacks      graph: no graph.pb" in out


@pytest.mark.parametrize("path", [FIXTURES / "gpu_kittibox", TIMELINES])
def test_critical_path_is_skipped_without_a_graph_not_0_percent(path):
    result = run_cli(["graph", "--critical-path", path])
    assert result.stdout == ""
    assert "analyze: critical path skipped: needs graph:" in result.stderr
    advice = run_cli(["advise", path]).output
    assert "skipped RL108 critical-path: needs graph:" in advice
    doc = json.loads(run_cli(["advise", path, "--format", "json"]).output)
    assert "RL108" in {s["code"] for s in doc["skipped"]}
    section = run_data(load_run(path, use_cache=False), [], str(path))["critical_path"]
    assert section["missing"].startswith("No critical path: it needs graph:")


@pytest.mark.parametrize("name", ["input_bound", "estimator_train", "estimator_eval"])
def test_input_bound_without_a_graph_measures_op_time(name):
    """Real input-bound captures with their graph removed: the input ops' own time gives
    the critical path's share within a point (measured: 97.3/97.3, 34.9/34.8, 38.3/38.3%),
    and the finding says how it was measured."""
    run = load_run(FIXTURES / name, use_cache=False)
    bare = run.replace(graph_nodes=run.graph_nodes.clear(),
                       lacks={**run.lacks, "graph": "removed for this test"})
    [with_graph] = checkers.run_checks(run, select=["input-bound"])
    [without] = checkers.run_checks(bare, select=["input-bound"])
    a, b = with_graph.evidence["input_share"], without.evidence["input_share"]
    print(f"{name}: input share {a:.4f} on the critical path, {b:.4f} from op time")
    assert abs(a - b) < 0.01 and with_graph.severity == without.severity
    assert "on the critical path" in with_graph.message
    assert "no dataflow graph" in without.message and without.evidence["measured"] == "op time"
    assert "RL105" not in {s["code"] for s in checkers.skipped_checks(bare)}


def test_code_view_is_skipped_with_the_reason():
    result = run_cli(["code", FIXTURES / "gpu_mnist"])
    assert result.stdout == ""
    assert "code view skipped: needs code: no op_log.pb in the run dir" in result.stderr


def test_nhwc_runs_its_transposes_half_without_a_graph():
    found = checkers.run_checks(load_run(FIXTURES / "gpu_kittibox", use_cache=False),
                                select=["nhwc-on-gpu"])
    assert any("layout optimizer" in f.message for f in found)


def test_timeline_says_it_drew_no_critical_path_without_a_graph(tmp_path):
    result = run_cli(["timeline", FIXTURES / "gpu_kittibox", "-o", tmp_path / "t.json"])
    assert "timeline: critical path skipped: needs graph:" in result.stderr
    trace = json.loads((tmp_path / "t.json").read_text())
    names = {e.get("args", {}).get("name") for e in trace["traceEvents"] if e.get("ph") == "M"}
    assert "critical path" not in names
    result = run_cli(["timeline", FIXTURES / "cnn", "-o", tmp_path / "c.json"])
    assert "critical path skipped" not in result.stderr
    trace = json.loads((tmp_path / "c.json").read_text())
    names = {e.get("args", {}).get("name") for e in trace["traceEvents"] if e.get("ph") == "M"}
    assert "critical path" in names
