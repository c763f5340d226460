"""Every checker fires on a real fixture that has the problem and stays quiet on one that
does not; the registry, the advise command and its exit codes."""

from __future__ import annotations

import json

import pytest

from runlens import checkers
from runlens.analyzer.load import load_run
from runlens.checkers.base import REGISTRY, Checker, register
from tests.conftest import FIXTURES, run_cli

# checker name: (fixture where it must fire, fixture where it must stay quiet, why)
CASES = {
    # cnn's Conv2D was 22% of op time only with its outlier step 18 (7.3 ms vs 3.3-4.3 ms)
    "expensive-ops": ("fused_cnn", "rnn_while",
                      "Conv2DBackpropFilter is 36% of op time / nothing over 17%"),
    "accelerator-utilization": ("gpu_mnist", "cnn", "GPU busy 3% / no accelerator"),
    "unfused-batch-norm": ("cnn", "mlp", "BatchNorm from moments+rsqrt / no batch norm"),
    "nhwc-on-gpu": ("gpu_kittibox", "cnn", "layout-optimizer transposes / NHWC but on CPU"),
    "input-bound": ("input_bound", "mlp", "slow tf.data map / fed by placeholders"),
    "host-device-copies": ("gpu_mnist", "mlp", "memcpy HtoD each step / one CPU device"),
    "device-idle": ("rnn_while", "input_bound", "while-loop scheduling gaps / busy lane"),
    "critical-path": ("input_bound", "rnn_while", "IteratorGetNext / spread-out path"),
    "step-time-variance": ("straggler", "input_bound", "2 slow steps / steady steps"),
    "memory-peak": ("cnn", "gpu_mnist", "allocator data / tf.timeline keeps none"),
    "memory-growth": ("memory_growth", "mlp", "a variable grows each step / steady"),
    "small-ops-overhead": ("rnn_while", "mlp", "780 tiny ops a step / 60 ops"),
    "float64-ops": ("float64_mlp", "mlp", "an MLP in float64 / in float32"),
    # A real H200 JAX profile in shared/ (CI has it; too large to commit): an absolute path.
    "fp32-matmul": (str(FIXTURES.parents[2] / "shared" / "data" / "gpu-jax" / "cnn_a"),
                    "gpu_mnist", "TF32 cuDNN convolutions / no library kernel names"),
    "roofline": (str(FIXTURES.parents[2] / "shared" / "data" / "gpu-jax" / "cnn_a"),
                 "gpu_mnist", "memory-bound fusions at 79% of 4.8 TB/s / no HLO work"),
    "slow-worker": (str(FIXTURES.parent / "workers" / "tf_slow"),
                    str(FIXTURES.parent / "workers" / "tf_balanced"),
                    "worker 1 sleeps 30 ms a step in its input / two balanced workers"),
    "collective-wait": (str(FIXTURES.parent / "xplane" / "jax_pmap"), "gpu_mnist",
                        "4 replicas: 80% of the all-reduce waiting / no collective"),
}


def _findings(fixture: str, name: str):
    return checkers.run_checks(load_run(FIXTURES / fixture), select=[name])


def test_every_checker_has_cases():
    assert set(CASES) == {c.name for c in checkers.all_checkers()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_checker_fires_on_its_fixture(name):
    fires, _, why = CASES[name]
    found = _findings(fires, name)
    assert found, f"{name} should fire on {fires} ({why})"
    for f in found:
        assert f.name == name and f.code == checkers.resolve([name]).pop()
        assert f.message and f.suggestion and 0.0 <= f.impact <= 1.0
        json.dumps(f.to_dict())  # evidence is plain data


@pytest.mark.parametrize("name", sorted(CASES))
def test_checker_stays_quiet_on_a_healthy_fixture(name):
    _, quiet, why = CASES[name]
    assert _findings(quiet, name) == [], f"{name} should be quiet on {quiet} ({why})"


def test_input_bound_uses_xprof_bands():
    (finding,) = _findings("input_bound", "input-bound")
    assert finding.severity == checkers.Severity.WARNING and finding.impact >= 0.20


def test_step_time_variance_names_the_straggler_steps():
    (finding,) = _findings("straggler", "step-time-variance")
    slow = {s["step"] for s in finding.evidence["stragglers"]}
    run = load_run(FIXTURES / "straggler")
    from runlens.analyzer.analysis.steps import step_times

    times = step_times(run).sort("duration_ns", descending=True)
    assert slow == set(times["step"].head(len(slow)).to_list()) and len(slow) >= 2


def test_registry_rejects_duplicate_codes_and_names():
    existing = next(iter(REGISTRY.values()))

    class Clash(Checker):
        code = existing.code
        name = "something-else"
        title = "clash"

    with pytest.raises(ValueError, match="already used"):
        register(Clash)


def test_findings_are_sorted_by_severity_then_impact():
    found = checkers.run_checks(load_run(FIXTURES / "cnn"))
    keys = [(-int(f.severity), -f.impact) for f in found]
    assert keys == sorted(keys)


def test_advise_json_and_exit_codes():
    doc = json.loads(run_cli(["advise", FIXTURES / "input_bound", "--format", "json"]).output)
    assert doc["schema"] == 1 and doc["findings"]
    assert set(doc["findings"][0]) == {"code", "name", "severity", "message", "where",
                                       "evidence", "suggestion", "impact"}
    run_cli(["advise", FIXTURES / "input_bound", "--fail-on", "warning"], expect_exit=1)
    run_cli(["advise", FIXTURES / "input_bound", "--fail-on", "error"], expect_exit=0)
    run_cli(["advise", FIXTURES / "mlp", "--select", "input-bound", "--fail-on", "info"])
    out = run_cli(["advise", FIXTURES / "cnn", "--ignore", "RL101,step-time-variance"]).output
    assert "RL101" not in out and "step-time-variance" not in out and "RL103" in out


def test_advise_list_describes_every_checker():
    out = run_cli(["advise", "--list"]).output
    for c in checkers.all_checkers():
        assert f"{c.code} {c.name}" in out
        assert "Why:" in (c.__doc__ or "") and "How to fix:" in (c.__doc__ or ""), c.name


def test_unknown_checker_is_a_usage_error():
    out = run_cli(["advise", FIXTURES / "mlp", "--select", "nope"], expect_exit=2).output
    assert "unknown checker 'nope'" in out


def test_docs_list_every_checker_as_the_command_does():
    """docs/advisor.md carries `analyze advise --list` verbatim; regenerate it on change."""
    doc = (FIXTURES.parents[1] / "docs" / "advisor.md").read_text()
    assert run_cli(["advise", "--list"]).output.strip() in doc
