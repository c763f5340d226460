"""The tf.timeline source (analyzer/sources/timeline.py) on real files no one here wrote
(public GPU traces) and on a ProfilerHook folder captured with TensorFlow
(fixtures/gen_sources.py), checked against the RunMetadata those files came from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from runlens.analyzer.analysis.views import VIEWS, ViewOptions
from runlens.analyzer.load import load_run
from runlens.analyzer.sources import detect
from tests.conftest import FIXTURES, ROOT, run_cli
from tests.test_gpu_fixtures import DATA, ft

SOURCES = ROOT / "fixtures" / "sources"
HOOK = SOURCES / "profilerhook"
HOOK_RUNDIR = SOURCES / "profilerhook_rundir"


def _data(file: str) -> Path:
    path = DATA / file
    if not path.is_file():
        pytest.skip(f"{path} not available (set RUNLENS_GPU_TIMELINES)")
    return path


def _sorted_nodes(run) -> pl.DataFrame:
    return run.nodes.sort("step", "exec_idx")


@pytest.mark.parametrize("name", ["gpu_kittibox", "gpu_mnist"])
def test_public_trace_read_directly_equals_todays_converter(name):
    """The committed run dirs were written by the converter before the source existed
    (test_gpu_fixtures checks the converter still writes them byte for byte)."""
    trace = _data(ft.FIXTURES[name].file)
    assert detect(trace).kind == "timeline"
    direct = load_run(trace, use_cache=False)
    converted = load_run(FIXTURES / name, use_cache=False)
    assert_frame_equal(_sorted_nodes(direct), _sorted_nodes(converted))
    for kind in VIEWS:
        ours = VIEWS[kind](direct, ViewOptions()).rows
        theirs = VIEWS[kind](converted, ViewOptions()).rows
        assert_frame_equal(ours, theirs)


def test_gpl_trace_equals_the_converter(tmp_path):
    """The third public trace (GPL: not committed as a fixture) through both paths."""
    trace = _data("aistein__dlprof__timeline_test0.json")
    conv = ft.convert(trace, 1)
    ft.write_run_dir(tmp_path / "run", conv)
    direct = load_run(trace, use_cache=False)
    converted = load_run(tmp_path / "run", use_cache=False)
    nodes = _sorted_nodes(direct)
    assert nodes.height == 642
    assert_frame_equal(nodes.drop("step"), _sorted_nodes(converted).drop("step"))
    assert direct.steps == [0]  # "timeline_test0": numbered from its name


def _timeline_fields(run) -> pl.DataFrame:
    """What tf.timeline keeps of each NodeExecStats."""
    return (run.nodes.select("step", "lane", "stat_name", "all_start_us", "all_end_rel_us")
            .sort(pl.all()))


def test_profilerhook_folder_equals_the_runmetadata_it_was_written_from():
    assert detect(HOOK).kind == "timeline"
    run = load_run(HOOK, use_cache=False)
    truth = load_run(HOOK_RUNDIR, use_cache=False)
    assert run.steps == truth.steps == [2, 3, 4]  # timeline-<step>.json
    assert_frame_equal(_timeline_fields(run), _timeline_fields(truth))
    # The op type comes from the label tf.timeline wrote (the kernel that ran, e.g.
    # _MklMatMul), as in the RunMetadata's label; the run dir's comes from graph.pb.
    ops = run.nodes.join(truth.nodes, on=["step", "lane", "stat_name", "all_start_us"])
    assert ops.height == run.nodes.height
    label_op = ops["timeline_label_right"].str.extract(r"^\S+ = ([^(]+)\(", 1)
    assert (ops["op_type"] == label_op).all()
    assert set(run.lacks) == {"memory", "outputs", "code", "graph"}


def test_cli_says_once_what_timeline_files_lack_and_skips_checkers(tmp_path):
    out = run_cli(["summary", HOOK, "--no-cache"]).output
    assert out.count("not in tf.timeline files") == 1
    assert "lacks      memory, outputs, code, graph: not in tf.timeline files" in out
    advice = run_cli(["advise", HOOK, "--no-cache"]).output
    assert advice.count("lacks memory, outputs, code, graph") == 1
    assert "skipped RL110 memory-peak: needs memory: not in tf.timeline files" in advice
    report = json.loads(run_cli(["advise", HOOK, "--format", "json", "--no-cache"]).output)
    # RL104 runs its transposes half without a graph; the critical path cannot.
    assert {s["code"] for s in report["skipped"]} == {"RL108", "RL110", "RL111", "RL113"}
    assert not {f["code"] for f in report["findings"]} & {"RL108", "RL110", "RL111", "RL113"}


def test_every_command_works_on_timeline_files(tmp_path):
    for kind in ("ops", "scopes", "graph"):
        assert "dense1" in run_cli([kind, HOOK, "--no-cache"]).output or kind == "ops"
    code = run_cli(["code", HOOK, "--no-cache"])
    assert "skipped" in code.output and "not in tf.timeline files" in code.output
    run_cli(["timeline", HOOK, "--no-cache", "-o", tmp_path / "t.json"])
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    # The same steps (the run dir has nanoseconds where tf.timeline kept micros).
    assert "result: ok" in run_cli(["compare", HOOK, HOOK_RUNDIR, "--by", "step", "--no-cache",
                                       "--no-normalize"]).output.lower()
    run_cli(["summary", "--source", "timeline", HOOK / "timeline-3.json",
             "--no-cache"])


def test_one_bad_file_in_a_folder_is_skipped_with_one_line(tmp_path):
    folder = tmp_path / "timelines"
    shutil.copytree(HOOK, folder)
    (folder / "timeline-9.json").write_text('{"traceEvents": [')
    result = run_cli(["summary", folder])
    assert "timeline-9.json: not a tf.timeline trace" in result.output
    assert "steps      3 (2-4)" in result.output


def test_a_lone_bad_file_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "timeline-1.json"
    bad.write_text('{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 0, '
                   '"args": {"name": "/cpu:0 Compute"}}, {"ph": "X", "pid": 0}]}')
    result = run_cli(["summary", bad], expect_exit=2)
    assert result.output.count("\n") == 1 and f"{bad}: not a tf.timeline trace" in result.output
    result = run_cli(["summary", "--source", "timeline", ROOT / "README.md"], expect_exit=2)
    assert "README.md" in result.output


def test_unknown_input_lists_the_kinds(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    result = run_cli(["summary", tmp_path / "notes.txt"], expect_exit=2)
    assert "not a profile runlens reads" in result.output
    # One short line naming the files looked for (it listed every description: ~900 chars).
    line = result.output.strip()
    assert "\n" not in line and len(line) - len(str(tmp_path)) < 280, line
    assert "steps/step-*.pb" in line and "*.xplane.pb" in line and "--source" in line
    result = run_cli(["ops", "--source", "nope", HOOK], expect_exit=2)
    assert "unknown source 'nope'" in result.output


def test_cache_of_a_timeline_file_follows_its_file(tmp_path, cache_beside_data):
    trace = tmp_path / "timeline-3.json"
    shutil.copy(HOOK / "timeline-3.json", trace)
    fresh = load_run(trace, use_cache=False)
    load_run(trace)  # writes the cache beside the file
    cached = load_run(trace)
    assert list((tmp_path / ".runlens").iterdir())
    assert_frame_equal(_sorted_nodes(cached), _sorted_nodes(fresh))
    assert cached.lacks == fresh.lacks
    text = trace.read_text()
    # another file now (a "1" before a duration: a "1" before a ts made it 1.2e16 us,
    # beyond int64 nanoseconds, which is refused by name now)
    trace.write_text(text.replace('"dur": ', '"dur": 1', 1))
    assert not _sorted_nodes(load_run(trace)).equals(_sorted_nodes(fresh))


def test_gzipped_timelines_read_as_the_plain_ones(tmp_path):
    import gzip

    folder = tmp_path / "gz"
    folder.mkdir()
    for p in HOOK.glob("timeline-*.json"):
        (folder / f"{p.name}.gz").write_bytes(gzip.compress(p.read_bytes()))
    assert detect(folder).kind == "timeline"
    assert_frame_equal(_sorted_nodes(load_run(folder, use_cache=False)),
                       _sorted_nodes(load_run(HOOK, use_cache=False)))


def test_one_lane_runs_merged_into_one_file_are_split_into_their_steps(tmp_path):
    """Merging session.runs into one trace, as users do (keep the first run's whole trace,
    append every later run's "ts" events, as in the public ikhlestov/tensorflow_profiling
    example): on a CPU-only run there is one Compute lane, so the pid never goes down; the
    runs are still found (each starts with its first node, `_SOURCE`, after the last run
    ended) and equal the ProfilerHook files they were merged from."""
    files = [HOOK / f"timeline-{s}.json" for s in (2, 3, 4)]
    merged = json.loads(files[0].read_text())
    for f in files[1:]:
        merged["traceEvents"] += [e for e in json.loads(f.read_text())["traceEvents"]
                                  if "ts" in e]
    target = tmp_path / "merged_runs.json"
    target.write_text(json.dumps(merged))
    run = load_run(target, use_cache=False)
    folder = load_run(HOOK, use_cache=False)
    assert len({lane for lane in run.nodes["lane"]}) == 1
    assert run.steps == [1, 2, 3]
    steps = dict(zip([1, 2, 3], folder.steps, strict=True))
    renumbered = run.nodes.with_columns(pl.col("step").replace_strict(steps))
    assert_frame_equal(renumbered.sort("step", "exec_idx"), _sorted_nodes(folder))


def test_compare_reads_lone_timeline_files_as_runs_not_as_baselines(tmp_path):
    """`analyze compare BASE NEW` with tf.timeline .json files: they were taken for
    baseline files (also .json) and failed with "invalid baseline" (exit 2)."""
    copy = tmp_path / "timeline-3.json"
    shutil.copy(HOOK / "timeline-3.json", copy)
    result = run_cli(["compare", HOOK / "timeline-3.json", copy, "--no-cache"])
    assert "invalid baseline" not in result.output
    assert "result: ok" in result.output.lower()
    baseline = tmp_path / "base.json"
    run_cli(["baseline", "save", HOOK / "timeline-3.json", "-o", baseline, "--no-cache"])
    assert "result: ok" in run_cli(["compare", baseline, copy, "--no-cache"]).output.lower()


def test_a_timeline_of_an_untraced_step_says_so(tmp_path):
    """tf.timeline of a RunMetadata without step stats writes only the "Allocators"
    process (as the public shiyudian/resnet-tf-dist-1 timeline_cifar10.json)."""
    pytest.importorskip("tensorflow", reason="the real tf.timeline writes it (dev extra)")
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.client import timeline

    empty = tmp_path / "timeline-1.json"
    empty.write_text(timeline.Timeline(config_pb2.RunMetadata().step_stats)
                     .generate_chrome_trace_format())
    result = run_cli(["summary", empty, "--no-cache"], expect_exit=2)
    assert result.output.count("\n") == 1
    assert "a tf.timeline of a step with no traced ops" in result.output
