"""A folder of run dirs is one multi-worker run only when they are one job."""

from __future__ import annotations

import json
import shutil

import pytest

from runlens.analyzer.errors import RunDirError
from runlens.analyzer.load import load_run
from tests.conftest import FIXTURES, run_cli


def _copy(src: str, dst, **manifest_changes) -> None:
    shutil.copytree(FIXTURES / src, dst, ignore=shutil.ignore_patterns(".runlens"))
    manifest = json.loads((dst / "manifest.json").read_text())
    manifest.update(manifest_changes)
    (dst / "manifest.json").write_text(json.dumps(manifest))


def test_a_folder_of_unrelated_runs_is_refused_in_one_line():
    out = run_cli(["advise", FIXTURES, "--no-cache"], expect_exit=2).output
    assert len(out.strip().splitlines()) == 1
    assert "not one job" in out and "--workers" in out and str(FIXTURES / "cnn") in out


def test_workers_flag_forces_the_merge(tmp_path):
    _copy("mlp", tmp_path / "runs" / "a")
    _copy("cnn", tmp_path / "runs" / "b")
    with pytest.raises(RunDirError, match="not one job"):
        load_run(tmp_path / "runs", use_cache=False)
    out = run_cli(["summary", tmp_path / "runs", "--workers", "--no-cache"]).output
    assert "2 (a, b)" in out


def test_same_graph_is_one_job(tmp_path):
    _copy("mlp", tmp_path / "job" / "w0", task=None)
    _copy("mlp", tmp_path / "job" / "w1", task=None)
    assert load_run(tmp_path / "job", use_cache=False).workers == ["w0", "w1"]


def test_same_graph_traced_apart_is_not_one_job(tmp_path):
    """Two runs of one script, one after the other (the second's steps an hour later in
    its manifest), are not two workers; --workers still merges them."""
    _copy("mlp", tmp_path / "job" / "w0", task=None)
    manifest = json.loads((FIXTURES / "mlp" / "manifest.json").read_text())
    later = [{**s, "wall_time": s["wall_time"] + 3600} for s in manifest["steps"]]
    _copy("mlp", tmp_path / "job" / "w1", task=None, steps=later)
    out = run_cli(["summary", tmp_path / "job", "--no-cache"], expect_exit=2).output
    assert "not one job (w0, w1: steps traced 3600s apart" in out
    assert "2 (w0, w1)" in run_cli(["summary", tmp_path / "job", "--workers",
                                    "--no-cache"]).output


@pytest.mark.parametrize("changes", [
    [{"task": {"type": "worker", "index": 0}}, {"task": {"type": "worker", "index": 1}}],
    [{"job": "exp-42"}, {"job": "exp-42"}],
])
def test_manifests_can_say_it_is_one_job(tmp_path, changes):
    """Different graphs (workers of a cluster place ops on their own devices), but the
    manifests name distinct cluster tasks, or the same job."""
    _copy("mlp", tmp_path / "job" / "w0", **changes[0])
    _copy("cnn", tmp_path / "job" / "w1", **changes[1])
    assert len(load_run(tmp_path / "job", use_cache=False).workers) == 2
