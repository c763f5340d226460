"""The GPU fixtures converted from public tf.timeline traces (fixtures/from_timeline.py).

No TensorFlow needed. The source JSON files are not in the repo; the tests that re-read them
look in $RUNLENS_GPU_TIMELINES (default: shared/data/gpu-timelines beside the repository,
where CI has it) and skip without it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from runlens.analyzer.analysis.nodestats import executed_stats
from runlens.analyzer.load import load_run
from runlens.analyzer.proto import config_pb2
from tests.conftest import FIXTURES, ROOT

GPU_FIXTURES = ["gpu_kittibox", "gpu_mnist"]
# The traces live in the shared/ folder beside the repository (as in CI), not in it.
DATA = Path(os.environ.get("RUNLENS_GPU_TIMELINES",
                          Path(__file__).resolve().parents[2] / "shared/data/gpu-timelines"))


def _converter():
    spec = importlib.util.spec_from_file_location(
        "from_timeline", ROOT / "fixtures" / "from_timeline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


ft = _converter()


def _source(name: str) -> Path:
    path = DATA / ft.FIXTURES[name].file
    if not path.is_file():
        pytest.skip(f"{path} not available (set RUNLENS_GPU_TIMELINES)")
    return path


def _steps(run_dir: Path) -> dict[int, config_pb2.RunMetadata]:
    return {int(p.stem.split("-")[1]): config_pb2.RunMetadata.FromString(p.read_bytes())
            for p in sorted((run_dir / "steps").glob("step-*.pb"))}


@pytest.mark.parametrize("name", GPU_FIXTURES)
def test_conversion_reproduces_the_committed_run_dir(name, tmp_path):
    _source(name)
    ft.build_fixture(name, DATA, tmp_path)
    ours, committed = _steps(tmp_path / name), _steps(FIXTURES / name)
    assert sorted(ours) == sorted(committed) == list(range(1, ft.FIXTURES[name].steps + 1))
    for step, md in committed.items():
        assert ours[step] == md, f"step {step} differs"
    source_md = (FIXTURES / name / "SOURCE.md").read_text()
    assert (tmp_path / name / "SOURCE.md").read_text() == source_md
    manifest = json.loads((FIXTURES / name / "manifest.json").read_text())
    assert [s["step"] for s in manifest["steps"]] == sorted(committed)


# In the merged MNIST file, the 5th run numbered its CPU and GPU op lanes the other way round
# (the file keeps only the 1st run's process names): its "cpu:0" events are the GPU op lane.
_CPU, _GPU = "/job:localhost/replica:0/task:0/cpu:0", "/job:localhost/replica:0/task:0/gpu:0"
RELABELLED = {"gpu_mnist": {5: {_CPU: _GPU, _GPU: _CPU}}}


@pytest.mark.parametrize("name", GPU_FIXTURES)
def test_every_timeline_event_is_a_node_stat_with_its_timing(name):
    events = json.loads(_source(name).read_text())["traceEvents"]
    lanes = {e["pid"]: e["args"]["name"].removesuffix(" Compute") for e in events
             if e["ph"] == "M" and e["args"]["name"].endswith(" Compute")}
    run = load_run(FIXTURES / name, use_cache=False)
    windows = (run.nodes.group_by("step")
               .agg(lo=pl.col("all_start_us").min(),
                    hi=(pl.col("all_start_us") + pl.col("all_end_rel_us")).max())
               .sort("step").rows())
    expected: Counter = Counter()
    for e in events:
        if e["ph"] != "X" or e["pid"] not in lanes:
            continue
        (step,) = [s for s, lo, hi in windows if lo <= e["ts"] <= hi]
        lane = RELABELLED.get(name, {}).get(step, {}).get(lanes[e["pid"]], lanes[e["pid"]])
        expected[(step, lane, e["args"]["name"], e["ts"], e["dur"])] += 1
    got = Counter(run.nodes.select(
        "step", "lane", "node_name", "all_start_us", "op_end_rel_us").rows())
    assert got == expected
    assert sum(expected.values()) == run.nodes.height
    # On GPU tracer lanes TensorFlow recorded "name:op"; tf.timeline split it, we join it back.
    traced = run.nodes.filter(pl.col("lane").str.contains("/stream:|/memcpy"))
    assert (traced["stat_name"] == traced["node_name"] + ":" + traced["op_type"]).all()
    assert (run.nodes["op_start_rel_us"] == 0).all()
    assert (run.nodes["all_end_rel_us"] == run.nodes["op_end_rel_us"]).all()


def test_merged_mnist_runs_are_five_alike_steps():
    run = load_run(FIXTURES / "gpu_mnist", use_cache=False)
    assert run.steps == [1, 2, 3, 4, 5]
    sizes = run.nodes.group_by("step").len().sort("step")["len"].to_list()
    assert sizes == [171, 169, 169, 169, 169]
    lanes = {s: set(run.nodes.filter(pl.col("step") == s).select("lane", "node_name").rows())
             for s in run.steps}
    # After the relabelling, every lane runs the same nodes in steps 2-5; step 1 also has
    # the first MatMul's cuBLAS set-up copy (memcpy lane and stream:7).
    assert lanes[2] == lanes[3] == lanes[4] == lanes[5] < lanes[1]
    assert lanes[1] - lanes[2] == {("/gpu:0/memcpy", "layer_1/fully_connected/MatMul"),
                                   ("/gpu:0/stream:7", "layer_1/fully_connected/MatMul")}


@pytest.mark.parametrize("name", GPU_FIXTURES)
def test_gpu_lanes_are_classified_and_count_as_accelerator_time(name):
    run = load_run(FIXTURES / name, use_cache=False)
    kinds = dict(run.nodes.group_by("lane").agg(pl.col("lane_kind").first()).rows())
    assert set(kinds.values()) == {"stream_all", "stream", "memcpy", "device"}
    assert [lane for lane, k in kinds.items() if k == "stream_all"] == [
        next(lane for lane in kinds if lane.endswith("/stream:all"))]
    assert all(k == "device" for lane, k in kinds.items() if lane.startswith("/job:"))
    stats = executed_stats(run, step=1)
    stream_all = run.nodes.filter((pl.col("lane_kind") == "stream_all") & (pl.col("step") == 1))
    assert stats["accelerator_micros"].sum() == stream_all["op_end_rel_us"].sum() > 0
    devices = run.nodes.filter(pl.col("lane_kind") == "device")["device"].unique().to_list()
    assert any("gpu:0" in d for d in devices) and any("cpu:0" in d for d in devices)
