"""The TF2 capture helper (analyzer.capture.tf2), run in real TF2 training processes:
it profiles the chosen steps, writes the function graphs beside the profile, and never
breaks training."""

from __future__ import annotations

import subprocess
from pathlib import Path

import polars as pl
import pytest

pytest.importorskip("tensorflow")

from tests.conftest import run_training  # noqa: E402
from tests.xplane_run import xplane_run  # noqa: E402

SCRIPT = Path(__file__).with_name("capture_tf2_train.py")


def _train(mode: str, logdir: Path, first: int, last: int, steps: int
           ) -> subprocess.CompletedProcess:
    result = run_training(SCRIPT, mode, logdir, first, last, steps)
    assert f"trained {steps}" in result.stdout
    return result


@pytest.mark.parametrize("mode, first, last", [("loop", 2, 4), ("keras", 1, 3)])
def test_profiles_the_chosen_steps_with_their_graphs(mode: str, first: int, last: int,
                                                     tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    _train(mode, logdir, first, last, steps=6)
    runs = list((logdir / "plugins" / "profile").iterdir())
    assert len(runs) == 1
    files = sorted(p.name for p in runs[0].iterdir())
    assert "runlens.graphs.pb" in files and any(f.endswith(".xplane.pb") for f in files)
    assert not [f for f in files if f.startswith(".")]  # no temporary file left
    run = xplane_run(logdir)
    assert run.steps == list(range(first, last))
    assert "graph" not in run.lacks
    # The train function's op events are the graph's nodes: their types come from the
    # graphs (tf.data stages, the ops of tf.data's own functions and the eager ops Keras
    # runs between steps, `eager/<Op>`, are not in them).
    train = run.keys.filter((pl.col("op_type") != "Dataset")
                            & ~pl.col("node_name").str.starts_with("GatherV2")
                            & ~pl.col("node_name").str.starts_with("eager/"))
    assert train.height >= 5
    assert (train["op_type_source"] == "graph").all()
    if mode == "loop":
        assert run.nodes.filter(pl.col("node_name") == "layer/MatMul").height == last - first


def test_an_unwritable_logdir_never_breaks_training(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the logdir should be")
    for mode in ("loop", "keras"):
        result = _train(mode, blocker / "logs", 1, 3, steps=4)
        assert "profiling is off, training goes on" in result.stderr
