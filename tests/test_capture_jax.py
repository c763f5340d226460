"""The JAX capture helper (analyzer.capture.jax), run in real JAX training processes on
CPU: it profiles the chosen steps under `train` markers that runlens reads as steps,
keeps warm-up out of the trace, and never breaks training."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytest.importorskip("jax")

from tests.conftest import run_cli, run_training  # noqa: E402

SCRIPT = Path(__file__).with_name("capture_jax_train.py")


def _train(mode: str, logdir: Path, first: int, last: int, steps: int
           ) -> subprocess.CompletedProcess:
    result = run_training(SCRIPT, mode, logdir, first, last, steps)
    return result


@pytest.mark.parametrize("mode", ["loop", "decorator"])
def test_profiles_the_chosen_steps_as_runlens_steps(mode: str, tmp_path: Path) -> None:
    from runlens.analyzer.load import load_run

    logdir = tmp_path / "logs"
    result = _train(mode, logdir, 2, 5, steps=7)
    assert "trained 7" in result.stdout
    run = load_run(logdir, use_cache=False)
    assert run.steps == [2, 3, 4]  # the compiling calls 0-1 stayed out of the trace
    # Each step's ops ran inside it (the step waited for its results): every step has
    # the same ops, the train step's scopes folded as the user named them.
    per_step = run.nodes.group_by("step").len().sort("step")["len"].to_list()
    assert len(set(per_step)) == 1 and per_step[0] > 0
    text = run_cli(["scopes", logdir, "--no-cache", "--max-depth", "1"]).stdout
    assert {"mlp", "head", "sgd"} <= {line.split()[0] for line in text.splitlines()[1:-1]}


def test_a_failing_profiler_never_stops_training(tmp_path: Path) -> None:
    """Another trace is running: starting ours fails; one warning, training goes on."""
    logdir = tmp_path / "logs"
    result = _train("busy", logdir, 0, 3, steps=5)
    assert "trained 5" in result.stdout
    assert result.stderr.count("profiling is off, training goes on") == 1
    assert not logdir.exists()


def test_the_steps_own_error_passes_through_and_the_trace_is_written(tmp_path: Path
                                                                       ) -> None:
    from runlens.analyzer.load import load_run

    logdir = tmp_path / "logs"
    result = _train("raising", logdir, 1, 4, steps=6)
    assert "raised 'user error'" in result.stdout and "trained 1" in result.stdout
    assert load_run(logdir, use_cache=False).steps == [1]


def test_bad_step_range_is_refused_at_once() -> None:
    from runlens.analyzer.capture.jax import profile

    with pytest.raises(ValueError, match="first < last"), profile("unused", steps=(3, 3)):
        pass
