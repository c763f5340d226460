"""A Keras TensorBoard log_dir as users pass it (to TensorBoard and to runlens): the
callback writes `<log_dir>/train/plugins/profile/<run>/` (and `validation/` without a
profile), as in the public FatmaBouzghaia/PFE_TensorFlow_Profiler logs (TF 2.4). Before,
`<log_dir>` was "not a profile runlens reads"."""

from __future__ import annotations

import shutil

from polars.testing import assert_frame_equal

from runlens.analyzer.load import load_run
from runlens.analyzer.sources import detect
from tests.conftest import ROOT, run_cli

XPLANE = ROOT / "fixtures" / "xplane" / "keras_fit"
TRACE = ROOT / "fixtures" / "tracejson" / "keras_fit"


def _nodes(run):
    return run.nodes.drop("worker").sort("step", "exec_idx")


def test_a_keras_log_dir_reads_the_profile_of_its_train_run(tmp_path):
    for kind, fixture in (("xplane", XPLANE), ("tracejson", TRACE)):
        logs = tmp_path / kind
        shutil.copytree(fixture, logs / "train")
        (logs / "validation").mkdir()
        assert detect(logs).kind == kind
        assert_frame_equal(_nodes(load_run(logs, use_cache=False)),
                           _nodes(load_run(fixture, use_cache=False)))


def test_profiles_in_several_runs_ask_which(tmp_path):
    """Runs that are not workers of one job (two captures, one after the other: their
    profiling windows do not overlap) ask which one; a folder of per-worker logdirs of
    one job reads as one (tests/test_workers.py)."""
    logs = tmp_path / "logs"
    shutil.copytree(XPLANE, logs / "train")
    shutil.copytree(ROOT / "fixtures" / "xplane" / "tf_function", logs / "validation")
    result = run_cli(["summary", logs, "--no-cache"], expect_exit=2)
    assert result.output.count("\n") == 1
    assert "profiles in several TensorBoard runs (train, validation) that are not one " \
           "job" in result.output
    assert "steps" in run_cli(["summary", logs / "train", "--no-cache"]).output
