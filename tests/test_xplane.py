"""The xplane source: what it accepts, how events become executions, steps, lanes and
kernels, and every command on xplane runs."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from runlens.analyzer.errors import RunDirError
from runlens.analyzer.load import load_run
from runlens.analyzer.sources import detect
from runlens.analyzer.sources.xplane import xplane_files
from runlens.analyzer.sources.xplane_arrays import self_times
from runlens.analyzer.sources.xplane_read import parse_op_name
from tests.conftest import run_cli
from tests.xplane_run import CAPTURED, FIXTURES, GPU_XPLANE, fixture_file, xplane_run

NEEDS_GPU_FILE = pytest.mark.skipif(not GPU_XPLANE.is_file(),
                                    reason="../shared/data/xplane not present")


def _logdir_with_two_runs(tmp_path: Path) -> Path:
    """A TensorBoard logdir with an older and a newer profile run (names are times)."""
    root = tmp_path / "logs" / "plugins" / "profile"
    for run, fixture in (("2026_01_01_00_00_00", "tf_function"),
                         ("2026_01_02_00_00_00", "keras_fit")):
        (root / run).mkdir(parents=True)
        shutil.copy(fixture_file(fixture), root / run / "hostA.xplane.pb")
    return tmp_path / "logs"


def test_accepts_a_file_a_run_folder_and_a_logdir(tmp_path: Path) -> None:
    path = fixture_file("tf_function")
    assert detect(path).kind == "xplane"
    assert detect(path.parent).kind == "xplane"
    assert detect(FIXTURES / "tf_function").kind == "xplane"
    # A folder of logdirs (TensorBoard runs with profiles) is read as per-worker logdirs
    # of one job only when their profiling windows overlap (issue 30): these were captured
    # one after the other, so it asks which one (naming the first six, alphabetically).
    with pytest.raises(RunDirError, match="several TensorBoard runs .* not one "
                                          "job: their profiling windows do not overlap"):
        xplane_files(FIXTURES)


def test_a_logdir_reads_its_newest_run_unless_one_is_named(tmp_path: Path) -> None:
    logdir = _logdir_with_two_runs(tmp_path)
    assert xplane_files(logdir)[0].parent.name == "2026_01_02_00_00_00"
    assert xplane_files(logdir, "2026_01_01_00_00_00")[0].parent.name == "2026_01_01_00_00_00"
    with pytest.raises(RunDirError, match="no profile run 'nope'"):
        xplane_files(logdir, "nope")
    newest = xplane_run(logdir).nodes
    assert newest["node_name"].str.starts_with("StatefulPartitionedCall/").any()  # keras


def test_each_host_file_is_a_worker(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(fixture_file("tf_function"), run / "host0.xplane.pb")
    shutil.copy(fixture_file("tf_function"), run / "host1.xplane.pb")
    loaded = xplane_run(run)
    assert loaded.workers == ["host0", "host1"]
    per_worker = loaded.nodes.group_by("worker").agg(pl.col("op_end_rel_ns").sum())
    assert per_worker["op_end_rel_ns"].n_unique() == 1


@pytest.mark.parametrize("content, message", [
    (b"", "no planes"),
    (b"\x0a\xff\xff\xff\xff\x0f", "not a readable XSpace profile"),
    # A well-framed host plane whose one line holds a malformed event (found by fuzzing:
    # the line decoder's error escaped as a traceback).
    (b"\x0a\x14\x12\x09/host:CPU\x1a\x07\x22\x05\xff\xff\xff\xff\xff",
     "not a readable XSpace profile"),
])
def test_a_bad_file_is_one_line_exit_2(tmp_path: Path, content: bytes, message: str) -> None:
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(content)
    result = run_cli(["ops", bad, "--no-cache"], expect_exit=2)
    assert message in result.output
    assert str(bad) in result.output


def test_tf_ops_are_named_node_and_type_as_xprof_parses_them() -> None:
    assert parse_op_name("dense1/MatMul:_MklMatMul")[1:] == ("dense1/MatMul", "_MklMatMul")
    assert parse_op_name("Iterator::Root::Prefetch")[1:] == ("Iterator/Root/Prefetch",
                                                             "Dataset")
    for not_an_op in ("ExecutorState::Process", "EagerLocalExecute: __inference_f_1",
                      "train", "ThreadpoolListener::StartRegion", "dense:lower"):
        assert parse_op_name(not_an_op)[0] != 1, not_an_op


def test_self_time_excludes_nested_events_on_the_line() -> None:
    import numpy as np

    start = np.array([0, 10, 20, 100, 30], np.int64)  # 0..90 holds 10..50 holds 20..30
    dur = np.array([90, 40, 10, 5, 10], np.int64)
    assert self_times(start, dur).tolist() == [50, 20, 10, 5, 10]


def test_steps_come_from_train_markers() -> None:
    run = xplane_run(fixture_file("tf_function"))
    assert run.steps == [2, 3, 4, 5, 6]  # profile(steps=(2, 7)) marks steps 2..6
    per_step = run.nodes.filter(pl.col("op_type") == "_MklMatMul").group_by("step").len()
    assert per_step["len"].to_list() == [5] * 5  # 5 MatMuls in every step
    assert xplane_run(fixture_file("keras_fit")).steps == [2, 3, 4]
    assert xplane_run(fixture_file("jax_train")).steps == [0, 1, 2, 3, 4]


@NEEDS_GPU_FILE
def test_gpu_kernels_are_accelerator_time_tied_to_their_op() -> None:
    run = xplane_run(GPU_XPLANE)
    n = run.nodes
    kernels = n.filter(pl.col("lane_kind") == "stream_all")
    assert set(kernels["device"].unique()) == {"/device:gpu:1", "/device:gpu:4",
                                                "/device:gpu:6"}
    host_ops = set(n.filter(pl.col("lane_kind") == "device")["node_name"])
    launched = kernels.filter(~pl.col("stat_name").str.starts_with("unattributed:"))
    compute = kernels.filter(~pl.col("stat_name").str.contains(":Memcpy", literal=True))
    assert compute.height > 1000
    one = ["worker", "step", "exec_idx", "lane", "stat_name"]  # an execution
    assert compute.join(launched, on=one, how="anti").height == 0
    # Memcpys without a TF op (MakeTensorFromProto, copies of eager tensors) stay apart.
    assert kernels.height > launched.height
    assert set(launched["node_name"]) <= host_ops  # every kernel's op ran on the host
    # Steps: the groups that ran device work, as the "Steps" line the profiler plugin
    # derived per GPU names them (group 0 only: the host's other groups are function
    # calls, not steps; tests/test_xplane_oracle.py compares the spans with xprof).
    from runlens.analyzer.proto import xplane_pb2

    derived = {int(p.event_metadata[e.metadata_id].name)
               for p in xplane_pb2.XSpace.FromString(GPU_XPLANE.read_bytes()).planes
               for line in p.lines if line.name == "Steps" for e in line.events}
    assert derived and set(run.steps) == derived
    assert run.allocations.height > 500  # MemoryAllocation/Deallocation events
    assert (run.allocations["alloc_bytes"] < 0).any()


def test_jax_ops_carry_their_named_scope_and_source_line() -> None:
    run = xplane_run(fixture_file("jax_train"))
    names = run.nodes["node_name"].unique().to_list()
    for scope in ("dense1", "dense2", "loss", "sgd"):
        assert any(f"/{scope}/" in n or f"({scope})" in n for n in names), scope
    code = run.code
    assert code["file"].str.ends_with("generate_xplane.py").any()
    # Every op with a framework name has its source frames (an HLO instruction without
    # metadata, e.g. wrapped_reduce-window, is named by itself and has none).
    assert {n for n in names if "/" in n} <= set(code["name"])


@pytest.mark.parametrize("name", CAPTURED)
def test_every_command_works_on_xplane_runs(name: str, tmp_path: Path) -> None:
    path = FIXTURES / name
    for view in ("ops", "scopes", "graph", "code", "summary"):
        run_cli([view, path])
    advise = run_cli(["advise", path, "--format", "json"])
    assert json.loads(advise.output)["findings"] is not None
    out = tmp_path / "trace.json.gz"
    run_cli(["timeline", path, "-o", out, "--all-steps"])
    trace = json.loads(gzip.decompress(out.read_bytes()))
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    assert events and all(e["dur"] >= 0 for e in events)
    run_cli(["compare", path, path])


def test_checkers_that_need_what_xplane_lacks_say_they_were_skipped() -> None:
    out = run_cli(["advise", FIXTURES / "tf_function"]).output
    assert "skipped RL110" in out and "per-op memory" in out
    assert "skipped RL113" in out


def test_tf2_graphs_beside_the_profile_give_op_types_and_the_critical_path() -> None:
    run = xplane_run(fixture_file("tf_function"))
    assert "graph" not in run.lacks
    assert (run.keys["op_type_source"] == "graph").all()
    out = run_cli(["graph", FIXTURES / "tf_function", "--critical-path"]).output
    assert "critical path of step" in out


def test_cached_load_equals_fresh(tmp_path: Path) -> None:
    fresh = load_run(fixture_file("keras_fit"), use_cache=False)
    load_run(fixture_file("keras_fit"))  # writes the cache
    cached = load_run(fixture_file("keras_fit"))
    cols = ["step", "node_name", "op_type", "op_end_rel_ns", "all_end_rel_ns", "start_ns"]
    assert cached.nodes.select(cols).sort(cols).equals(fresh.nodes.select(cols).sort(cols))
    assert cached.lacks == fresh.lacks


@pytest.mark.parametrize("path", [fixture_file(n) for n in CAPTURED]
                         + ([GPU_XPLANE] if GPU_XPLANE.is_file() else []),
                         ids=lambda p: p.parent.parent.parent.parent.name
                         if p.name == "worker0.xplane.pb" else "gpu_bert")
def test_native_decoder_gives_the_protobuf_walks_frames(path: Path) -> None:
    from runlens.analyzer.sources import xplane_wire
    from runlens.analyzer.sources.xplane import read_file

    if not xplane_wire.native_available():
        pytest.skip("analyzer/_xplane.c is not compiled here")
    native, walked = read_file(path, "w", native=True), read_file(path, "w", native=False)
    assert native.lacks == walked.lacks
    for name, frame in walked.frames.items():
        assert native.frames[name].equals(frame), name


def test_profile_run_option_chooses_a_run_of_a_logdir(tmp_path: Path) -> None:
    logdir = _logdir_with_two_runs(tmp_path)
    old = run_cli(["ops", logdir, "--profile-run", "2026_01_01_00_00_00", "--format", "json"])
    new = run_cli(["ops", logdir, "--format", "json"])
    assert '"MatMul"' in old.output  # tf_function's ops (kernel _MklMatMul), not keras_fit's
    assert old.output != new.output
    bad = run_cli(["ops", logdir, "--profile-run", "nope"], expect_exit=2)
    assert "no profile run 'nope'" in bad.output and "2026_01_02_00_00_00" in bad.output


def test_a_bad_host_file_leaves_the_others_readable(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(fixture_file("tf_function"), run / "good.xplane.pb")
    whole = fixture_file("keras_fit").read_bytes()
    (run / "cut.xplane.pb").write_bytes(whole[: len(whole) // 2])  # truncated mid-write
    result = run_cli(["ops", run, "--no-cache"])
    assert "cut.xplane.pb" in result.output and "MatMul" in result.output
    (run / "good.xplane.pb").write_bytes(b"\x0a\x05abc")
    result = run_cli(["ops", run, "--no-cache"], expect_exit=2)
    assert "no worker could be read" in result.output and "xplane.pb" in result.output
