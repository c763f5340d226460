"""Loose RunMetadata (.pb, .pbtxt) and TensorBoard event files, captured with TensorFlow
(fixtures/gen_sources.py), checked against run dirs holding the same RunMetadata."""

from __future__ import annotations

import shutil

import polars as pl
import pytest
from google.protobuf import text_format
from polars.testing import assert_frame_equal

from runlens.analyzer.load import load_run
from runlens.analyzer.proto import config_pb2, graph_pb2
from runlens.analyzer.rundir import RunDirWriter
from runlens.analyzer.sources import detect
from runlens.analyzer.sources.events import masked_crc, records
from tests.conftest import ROOT, run_cli

SOURCES = ROOT / "fixtures" / "sources"
LOOSE = SOURCES / "runmetadata"
HOOK = SOURCES / "profilerhook"
EVENTS = HOOK / "events.out.tfevents.0.fixture"


def _frames(run) -> dict[str, pl.DataFrame]:
    return {"nodes": run.nodes.sort("step", "exec_idx"),
            "outputs": run.outputs.sort("step", "exec_idx", "slot"),
            "memory": run.memory.sort("step", "exec_idx", "allocator_name")}


def _assert_same(run, truth, drop: tuple[str, ...] = ()) -> None:
    assert run.steps == truth.steps
    for name, frame in _frames(truth).items():
        assert_frame_equal(_frames(run)[name].drop(drop, strict=False),
                           frame.drop(drop, strict=False))


def test_loose_files_equal_a_run_dir_of_the_same_run_metadata(tmp_path):
    assert detect(LOOSE).kind == "runmetadata"
    assert detect(LOOSE / "run_metadata_2.pbtxt").kind == "runmetadata"
    writer = RunDirWriter(tmp_path / "run")
    binary = (LOOSE / "run_metadata_1.pb").read_bytes()
    text = text_format.Parse((LOOSE / "run_metadata_2.pbtxt").read_text(),
                             config_pb2.RunMetadata()).SerializeToString()
    writer.write_step(1, binary, 0.0)
    writer.write_step(2, text, 0.0)
    writer.write_graph(text_format.Parse((LOOSE / "graph.pbtxt").read_text(),
                                         graph_pb2.GraphDef()).SerializeToString())
    run = load_run(LOOSE, use_cache=False)
    _assert_same(run, load_run(tmp_path / "run", use_cache=False))
    assert run.outputs.height and run.memory.height  # RunMetadata holds them
    # The graph beside gives op types (nodes the runtime added are not in it).
    assert (run.nodes["op_type_source"] == "graph").mean() > 0.5
    assert set(run.lacks) == {"code"}


def test_event_file_equals_the_run_dir_of_the_same_session_runs():
    """ProfilerHook wrote the event file (FileWriter.add_run_metadata, tags step_<N>);
    CaptureHook captured the same session.runs into profilerhook_rundir."""
    assert detect(HOOK).kind == "timeline"  # timeline files first in that folder
    assert detect(EVENTS).kind == "events"
    run = load_run(EVENTS, use_cache=False)
    truth = load_run(SOURCES / "profilerhook_rundir", use_cache=False)
    _assert_same(run, truth, drop=("op_type", "op_type_source"))
    # The event file's graph was written when the hook began, before the session added
    # `global_step/add`; that node's op type comes from the partition graph (Identity,
    # after the runtime's rewrite) where graph.pb (written later) says AddV2.
    ours, theirs = run.nodes.sort("step", "exec_idx"), truth.nodes.sort("step", "exec_idx")
    differ = ours.filter(ours["op_type"] != theirs["op_type"])
    assert set(differ["node_name"]) <= {"global_step/add"}
    assert run.steps == [2, 3, 4]
    assert set(run.lacks) == {"code"}
    assert run.graph_nodes.filter(pl.col("source") == "graph").height > 0


def test_tfrecord_reader_checks_crcs():
    assert masked_crc(b"") == 0xA282EAD8  # the mask of CRC-32C(b"") = 0
    assert len(list(records(EVENTS))) >= 5


def test_a_corrupt_event_record_is_one_line_and_the_records_before_it_are_kept(tmp_path):
    raw = bytearray(EVENTS.read_bytes())
    raw[-10] ^= 0xFF  # inside the last record
    (tmp_path / "events.out.tfevents.1.x").write_bytes(bytes(raw))
    result = run_cli(["summary", tmp_path, "--no-cache"])
    assert "events.out.tfevents.1.x: corrupt record at byte" in result.output
    raw[3] ^= 0xFF  # the first record's length
    bad = tmp_path / "events.out.tfevents.2.x"
    bad.write_bytes(bytes(raw))
    result = run_cli(["summary", bad, "--no-cache"], expect_exit=2)
    assert result.output.count("\n") == 1 and "bad length CRC at byte 0" in result.output


def test_loose_files_without_or_with_the_same_step_number_get_the_next_free_ones(tmp_path):
    # analyzer/sources/stepnumbers.py, shared with the timeline and events sources.
    folder = tmp_path / "loose"
    folder.mkdir()
    binary = (LOOSE / "run_metadata_1.pb").read_bytes()
    for name in ("a_5.pb", "b_5.pb", "c.pb", "d_2.pb"):
        (folder / name).write_bytes(binary)
    run = load_run(folder, use_cache=False)
    # by number first (d_2, a_5, b_5), then the unnumbered: 2, 5, then 6 and 7 are free
    assert sorted(run.steps) == [2, 5, 6, 7]
    per_step = run.nodes.group_by("step").len()["len"]
    assert per_step.n_unique() == 1  # each step holds the one file's executions


def test_a_bad_file_among_loose_ones_is_skipped_with_one_line(tmp_path):
    folder = tmp_path / "loose"
    shutil.copytree(LOOSE, folder)
    (folder / "run_metadata_3.pbtxt").write_text("step_stats { dev_stats { device: 7 } }")
    result = run_cli(["summary", folder, "--no-cache"])
    assert "run_metadata_3.pbtxt: not a readable text-format RunMetadata" in result.output
    assert "steps      2 (1-2)" in result.output
    result = run_cli(["summary", folder / "run_metadata_3.pbtxt", "--no-cache"],
                     expect_exit=2)
    assert result.output.count("\n") == 1
    junk = tmp_path / "junk.pb"
    junk.write_bytes(b"\x0a\x05hello")
    result = run_cli(["summary", "--source", "runmetadata", junk, "--no-cache"],
                     expect_exit=2)
    assert "junk.pb" in result.output and result.output.count("\n") == 1


def test_a_truncated_binary_run_metadata_is_reported_not_passed_by(tmp_path):
    """A binary RunMetadata cut short (a copy that did not finish) does not parse, so its
    content cannot tell what it is; its name does. In a folder it is one warning (it was
    silently left out before); alone it is one line and exit 2 (it was "not a profile
    runlens reads")."""
    folder = tmp_path / "loose"
    shutil.copytree(LOOSE, folder)
    raw = (LOOSE / "run_metadata_1.pb").read_bytes()
    (folder / "run_metadata_3.pb").write_bytes(raw[: len(raw) // 2])
    result = run_cli(["summary", folder, "--no-cache"])
    assert "run_metadata_3.pb: not a readable RunMetadata (truncated" in result.output
    assert "steps      2 (1-2)" in result.output
    result = run_cli(["summary", folder / "run_metadata_3.pb", "--no-cache"], expect_exit=2)
    assert result.output.count("\n") == 1
    assert "run_metadata_3.pb: not a readable RunMetadata (truncated" in result.output
    other = folder / "saved_model.pb"  # a .pb that is not named as RunMetadata: not ours
    other.write_bytes(raw[:100])
    assert "saved_model.pb" not in run_cli(["summary", folder, "--no-cache"]).output


def test_views_and_advice_on_loose_and_event_files():
    for path in (LOOSE, EVENTS):
        for kind in ("ops", "scopes", "graph"):
            assert "MatMul" in run_cli([kind, path, "--no-cache"]).output or kind != "ops"
        advice = run_cli(["advise", path, "--no-cache"]).output
        assert "lacks code" in advice


def test_tf2_summary_event_files_point_at_the_profile(tmp_path):
    """TF2 (Keras's TensorBoard callback, tf.summary) writes `...v2` event files with
    summaries only; asked to read one, say where a TF2 profile is."""
    tf = pytest.importorskip("tensorflow", reason="writes a real TF2 event file (dev extra)")
    with tf.summary.create_file_writer(str(tmp_path)).as_default():
        tf.summary.write("loss", tf.constant(0.5), step=1)  # scalar() needs tensorboard
    (written,) = tmp_path.glob("events.out.tfevents.*.v2")
    for path in (written, tmp_path):
        result = run_cli(["summary", path, "--no-cache"], expect_exit=2)
        assert result.output.count("\n") == 1
        assert "TF2 event files hold summaries, not traces" in result.output
