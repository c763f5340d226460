"""The profile plugin's trace viewer JSON (analyzer/sources/tracejson.py) against the
XSpace it was made from: xprof converted the TF2 xplane fixtures (fixtures/gen_tracejson.py)
and, live, the public GPU profile in shared/data; runlens must read the same executions,
steps and views from the JSON as from the .xplane.pb."""

from __future__ import annotations

import importlib.util
import shutil

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from runlens.analyzer.analysis.views import VIEWS, ViewOptions
from runlens.analyzer.load import load_run
from runlens.analyzer.sources import detect
from tests.conftest import ROOT, run_cli
from tests.xplane_run import GPU_XPLANE

TRACES = ROOT / "fixtures" / "tracejson"
XPLANES = ROOT / "fixtures" / "xplane"
RUN = "plugins/profile/run1"
NAMES = ["tf_function", "keras_fit"]


COLUMNS = ["step", "lane", "stat_name", "op_type", "all_start_us", "op_start_rel_ns",
           "op_end_rel_ns"]


def _executions(run) -> pl.DataFrame:
    """Per execution what both formats hold (the JSON keeps ns; the xplane has ps)."""
    return run.nodes.select(*COLUMNS, "thread_id").sort(pl.all())


def _same_run(trace, xplane, steps: int) -> None:
    ours, truth = load_run(trace, use_cache=False), load_run(xplane, use_cache=False)
    assert ours.steps == truth.steps and len(ours.steps) == steps
    a, b = _executions(ours), _executions(truth)
    assert_frame_equal(a.drop("thread_id"), b.drop("thread_id"))
    # The trace viewer numbers threads its own way: the same threads, other numbers.
    pairs = pl.DataFrame({"ours": a["thread_id"], "truth": b["thread_id"]}).unique()
    assert pairs.height == pairs["ours"].n_unique() == pairs["truth"].n_unique()
    for kind in ("ops", "scopes", "graph"):
        assert_frame_equal(VIEWS[kind](ours, ViewOptions()).rows,
                           VIEWS[kind](truth, ViewOptions()).rows)


@pytest.mark.parametrize("name", NAMES)
def test_trace_viewer_json_reads_as_the_xplane_it_was_made_from(name, tmp_path):
    trace = TRACES / name
    assert detect(trace).kind == "tracejson"  # a logdir whose profile run has no xplane
    assert detect(trace / RUN / "worker0.trace.json.gz").kind == "tracejson"
    # The xplane alone: without the function graphs capture_tf2 wrote beside it.
    xplane = tmp_path / "worker0.xplane.pb"
    shutil.copy(XPLANES / name / RUN / "worker0.xplane.pb", xplane)
    _same_run(trace, xplane, 5 if name == "tf_function" else 3)


@pytest.mark.skipif(importlib.util.find_spec("xprof") is None or not GPU_XPLANE.is_file(),
                    reason="needs xprof (dev extra) and ../shared/data/xplane")
def test_public_gpu_profile_as_trace_viewer_json(tmp_path):
    """The public BERT GPU profile (8 GPUs, kernels on two), through xprof's converter."""
    import gzip

    from fixtures.gen_tracejson import trace_viewer_json

    trace = tmp_path / "host.trace.json.gz"
    trace.write_bytes(gzip.compress(trace_viewer_json(GPU_XPLANE)))
    _same_run(trace, GPU_XPLANE, 1)  # one step in the profile (xprof's step db too)


def test_an_xplane_beside_wins_and_tf_timeline_does_not_claim_it(tmp_path):
    run = tmp_path / "logdir" / RUN
    shutil.copytree(TRACES / "keras_fit" / RUN, run)
    assert detect(tmp_path / "logdir").kind == "tracejson"
    shutil.copy(XPLANES / "keras_fit" / RUN / "worker0.xplane.pb", run)
    assert detect(tmp_path / "logdir").kind == "xplane"
    assert detect(run).kind == "xplane"
    plain = tmp_path / "worker0.trace.json"
    plain.write_bytes(__import__("gzip").decompress(
        (TRACES / "keras_fit" / RUN / "worker0.trace.json.gz").read_bytes()))
    assert detect(plain).kind == "tracejson"  # it has a "tf_Compute" thread: not tf.timeline


def test_commands_and_bad_files(tmp_path):
    trace = TRACES / "keras_fit"
    for kind in ("ops", "scopes", "graph", "advise"):
        run_cli([kind, trace, "--no-cache"])
    run_cli(["timeline", trace, "--no-cache", "-o", tmp_path / "t.json"])
    bad = tmp_path / "host.trace.json.gz"
    good = (trace / RUN / "worker0.trace.json.gz").read_bytes()
    bad.write_bytes(good[: len(good) // 2])
    result = run_cli(["summary", "--source", "tracejson", bad, "--no-cache"], expect_exit=2)
    assert result.output.count("\n") == 1 and "host.trace.json.gz" in result.output
