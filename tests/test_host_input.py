"""RL105 on TF2 tf.data profiles (fixtures/gen_host.py: a py_function that sleeps 2 ms an
element, no parallelism): the share of the step the training thread waits for input is
xprof's input pipeline analyzer's (its infeed time over its step time, computed here from
xprof's own table), within 15 points; the finding names the slowest stage and the fix."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from runlens.checkers import REGISTRY
from runlens.checkers.base import Analysis
from tests.xplane_run import fixture_file, xplane_run

pytest.importorskip("xprof", reason="xprof (dev extra) is the oracle")

SLOW = ["host_input_step", "host_input_fn"]


def xprof_input_share(path: Path) -> float:
    """Sum of xprof's per-step input time over the sum of its step times."""
    from xprof.convert import raw_to_tool_data

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        shutil.copy(path, copy)
        raw, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], "input_pipeline_analyzer",
                                                      {})
    table = json.loads(raw)[1]
    ids = [c["id"] for c in table["cols"]]
    rows = [[c.get("v") for c in r["c"]] for r in table["rows"]]
    assert rows, "xprof found no steps"
    infeed = sum(r[ids.index("infeedTimeMs")] for r in rows)
    step = sum(r[ids.index("stepTimeMs")] for r in rows)
    return infeed / step


def input_findings(name: str) -> list:
    run = xplane_run(fixture_file(name))
    return list(REGISTRY["RL105"]().check(Analysis(run)))


@pytest.mark.parametrize("name", SLOW)
def test_input_bound_share_is_xprofs(name: str) -> None:
    want = xprof_input_share(fixture_file(name))
    assert want > 0.5  # the capture is input-bound by construction
    (finding,) = input_findings(name)
    assert finding.severity.name == "WARNING"
    got = finding.evidence["input_share"]
    assert abs(got - want) <= 0.15, (got, want)
    assert finding.evidence["measured"] == "iterator wait"
    assert all(s["input_us"] <= s["step_us"] for s in finding.evidence["per_step"])


@pytest.mark.parametrize("name", SLOW)
def test_input_bound_names_the_stage_and_the_fix(name: str) -> None:
    (finding,) = input_findings(name)
    assert "MapAndBatch" in finding.evidence["slowest_stage"]
    assert "slowest tf.data stage Iterator::Root::MapAndBatch" in finding.message
    # The map runs a py_function, without num_parallel_calls and without prefetch.
    for fix in ("py_function", "num_parallel_calls", "prefetch"):
        assert fix in finding.suggestion, finding.suggestion


def test_compute_bound_tf2_run_is_not_input_bound() -> None:
    """The tf_function fixture feeds constant tensors: no iterator, no finding."""
    assert input_findings("tf_function") == []
