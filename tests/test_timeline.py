"""`analyze timeline`: every event of every fixture's trace is valid Trace Event Format,
every op execution tf.timeline draws is in ours with the same start and duration, and the
structure of one trace is golden (tests/golden/timeline-mlp.json; regenerate with
RUNLENS_UPDATE_GOLDEN=1 python -m pytest tests/test_timeline.py, then review the diff).
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections import Counter, defaultdict
from functools import cache
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from runlens.analyzer.analysis import graph
from runlens.analyzer.analysis.graph import critical_path, critical_paths
from runlens.analyzer.load import load_run
from runlens.analyzer.model import Run
from runlens.analyzer.render import chrome_trace
from runlens.analyzer.render.chrome_trace import export
from runlens.analyzer.sources import Selection
from runlens.analyzer.timeline import TimelineOptions, build_trace, parse_step_range
from runlens.analyzer.timeline.lanes import sublanes
from tests.conftest import FIXTURE_NAMES, FIXTURES, ROOT, run_cli

GOLDEN = ROOT / "tests" / "golden"
UPDATE = bool(os.environ.get("RUNLENS_UPDATE_GOLDEN"))
META = {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}


@cache
def _run(name: str) -> Run:
    return load_run(FIXTURES / name, use_cache=False)


@cache
def _trace(name: str, tmp: Path) -> dict:
    run = _run(name)
    path = tmp / f"{name}.json"
    export(run, path, TimelineOptions(tuple(run.steps)))
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("timeline")


def _names(doc: dict) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    procs, threads = {}, {}
    for e in doc["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        elif e["ph"] == "M" and e["name"] == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    return procs, threads


def validate(doc: dict) -> Counter:
    """Assert the Trace Event Format rules we promise; return event counts by (ph, cat)."""
    assert isinstance(doc["traceEvents"], list)
    procs, threads = _names(doc)
    slices: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    flows: dict[int, dict[str, dict]] = defaultdict(dict)
    counts: Counter = Counter()
    num = (int, float)
    for e in doc["traceEvents"]:
        ph = e["ph"]
        counts[(ph, e.get("cat"))] += 1
        assert isinstance(e["pid"], int) and e["pid"] in procs, e
        if ph == "M":
            assert e["name"] in META and isinstance(e["args"], dict), e
            if e["name"].startswith("thread"):
                assert isinstance(e["tid"], int), e
            continue
        assert isinstance(e["name"], str) and isinstance(e["cat"], str), e
        assert isinstance(e["ts"], num) and isinstance(e["tid"], int), e
        if ph == "X":
            assert isinstance(e["dur"], num) and e["dur"] >= 0, e
            assert isinstance(e["args"], dict), e
            assert (e["pid"], e["tid"]) in threads, e
            slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
        elif ph in ("s", "f"):
            assert isinstance(e["id"], int) and ph not in flows[e["id"]], e
            if ph == "f":
                assert e["bp"] == "e", e
            flows[e["id"]][ph] = e
        elif ph == "C":
            assert e["args"] and all(isinstance(v, num) for v in e["args"].values()), e
        else:
            raise AssertionError(f"unexpected phase {ph}: {e}")
    for key, spans in slices.items():  # no overlap at all on a thread (touching is fine)
        spans.sort()
        for (a0, a1), (b0, b1) in zip(spans, spans[1:], strict=False):
            assert b0 >= a1, f"{threads[key]}: [{a0}, {a1}] overlaps [{b0}, {b1}]"
    for fid, pair in flows.items():
        assert set(pair) == {"s", "f"}, f"flow {fid} is not paired: {pair}"
        s, f = pair["s"], pair["f"]
        assert (s["cat"], s["name"]) == (f["cat"], f["name"]) and s["ts"] <= f["ts"]
        assert (s["pid"], s["tid"]) != (f["pid"], f["tid"])
        for end in (s, f):  # bound to a slice of its thread that encloses it
            assert any(a <= end["ts"] <= b for a, b in slices[(end["pid"], end["tid"])]), end
    return counts


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_every_event_of_every_fixture_is_valid(name, out_dir):
    run = _run(name)
    counts = validate(_trace(name, out_dir))
    assert counts[("X", "Op")] == run.nodes.height  # every execution, once
    assert counts[("X", "Step")] == len(run.steps) * len(run.workers)
    if run.allocations.height:
        assert counts[("C", "Memory")] > 0
    assert counts[("X", "CriticalPath")] == critical_paths(run).height


def _lane_kind(lane: str) -> str:
    m = re.search(r"/((?:stream|memcpy)[^/]*)$", lane)
    return m.group(1) if m else "thread"


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_every_op_tf_timeline_draws_is_ours_with_the_same_start_and_duration(name, out_dir):
    pytest.importorskip("tensorflow")
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.client import timeline as tf_timeline

    run = _run(name)
    lane_device = dict(run.nodes.select("lane", "device").unique().iter_rows())
    theirs: Counter = Counter()
    for path in sorted((FIXTURES / name / "steps").glob("step-*.pb")):
        md = config_pb2.RunMetadata.FromString(path.read_bytes())
        doc = json.loads(tf_timeline.Timeline(md.step_stats).generate_chrome_trace_format())
        pids = {e["pid"]: e["args"]["name"].removesuffix(" Compute")
                for e in doc["traceEvents"] if e.get("name") == "process_name"}
        for e in doc["traceEvents"]:
            if e["ph"] == "X":
                lane = pids[e["pid"]]
                theirs[(lane_device[lane], _lane_kind(lane), e["args"]["name"],
                        e["args"]["op"], e["name"], e["ts"], e["dur"])] += 1
    doc = _trace(name, out_dir)
    procs, threads = _names(doc)
    ours: Counter = Counter()
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["cat"] == "Op":
            track = threads[(e["pid"], e["tid"])].split(" (lane ")[0]
            kind = "thread" if track.startswith("thread ") else track.split(" thread ")[0]
            ours[(procs[e["pid"]], kind, e["args"]["name"], e["args"]["op"], e["name"],
                  e["ts"], e["dur"])] += 1
    assert sum(theirs.values()) == run.nodes.height
    missing = theirs - ours
    assert not missing, f"{sum(missing.values())} tf.timeline ops not in ours: " \
                        f"{list(missing)[:3]}"


def test_golden_structure(out_dir):
    """Process names, thread names per process and counts per (phase, category)."""
    name = "mlp"
    doc = _trace(name, out_dir)
    procs, threads = _names(doc)
    got = {
        "processes": sorted(procs.values()),
        "threads": {procs[pid]: sorted(n for (p, _), n in threads.items() if p == pid)
                    for pid in sorted(procs)},
        "events": {f"{ph} {cat}": n for (ph, cat), n in sorted(
            validate(doc).items(), key=lambda kv: (kv[0][0], str(kv[0][1])))},
        "other": doc["otherData"],
    }
    path = GOLDEN / f"timeline-{name}.json"
    if UPDATE:
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert got == json.loads(path.read_text()), "timeline structure changed; see docstring"


def test_op_event_args(out_dir):
    doc = _trace("cnn", out_dir)
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "Op"]
    conv = next(e for e in ops if e["args"]["name"] == "conv1/Conv2D")
    a = conv["args"]
    assert conv["name"] == a["op"] == "_MklNativeConv2D"  # what ran, as tf.timeline says
    assert a["graph_op"] == "Conv2D" and a["scope"] == "conv1"
    assert a["inputs"] and a["outputs"][0].startswith("float[") and a["bytes"] > 0
    assert isinstance(a["step"], int)
    plain = next(e for e in ops if e["args"]["name"] == "_SOURCE")
    assert "graph_op" not in plain["args"] and plain["args"]["scope"] == ""


def test_memory_counters_are_downsampled():
    run = _run("rnn_while")
    trace = build_trace(run, TimelineOptions(tuple(run.steps), max_counter_points=10))
    c = next(p.frame for p in trace.parts if p.kind == "counter")
    per = c.group_by("worker", "name", "step").len()
    assert per["len"].max() <= 11  # ten buckets and the last value


def test_batched_critical_paths_equal_the_per_step_ones():
    run = _run("rnn_while")
    every = critical_paths(run)
    for step in run.steps:
        one = every.filter(pl.col("step") == step).drop("worker", "step")
        assert one.equals(critical_path(run, step).ops)


@pytest.mark.parametrize("link_rounds, walk_rounds", [(0, 1000), (2, 3), (1000, 2)])
def test_critical_paths_walked_any_way_are_the_same(monkeypatch, link_rounds, walk_rounds):
    """Searches, lookups after a few rounds, the Python walk of long paths: same paths."""
    run = _run("rnn_while")
    every = critical_paths(run)
    monkeypatch.setattr(graph, "LINK_ROUNDS", link_rounds)
    monkeypatch.setattr(graph, "LINK_SHARE", 0)
    monkeypatch.setattr(graph, "WALK_ROUNDS", walk_rounds)
    assert critical_paths(run).equals(every)


def test_sublanes_never_overlap():
    ts = [0, 1, 4, 5, 11, 20, 20, 20, 30]
    end = [10, 3, 12, 6, 13, 20, 25, 20, 31]
    f = pl.DataFrame({"track_id": [3] * 9, "ts": ts, "end": end})
    out = sublanes(f)
    by_lane = defaultdict(list)
    for r in out.iter_rows(named=True):
        by_lane[r["sub"]].append((r["ts"], r["end"]))
    for spans in by_lane.values():
        spans.sort()
        assert all(b[0] >= a[1] for a, b in zip(spans, spans[1:], strict=False))
    assert max(by_lane) == 2  # three deep at most: [0,10], [4,12], [5,6]
    assert out.filter(pl.col("ts") == 30)["sub"].item() == 0


# ----------------------------------------------------------------------------- CLI


def test_default_is_the_median_step(tmp_path):
    from runlens.analyzer.analysis.steps import median_step

    out = tmp_path / "t.json"
    result = run_cli(["timeline", FIXTURES / "mlp", "-o", out])
    step = median_step(_run("mlp"))
    assert f"timeline: step {step} (median step time)" in result.stderr
    doc = json.loads(out.read_text())
    assert doc["otherData"]["steps"] == [step]
    assert {e["args"]["step"] for e in doc["traceEvents"] if e.get("cat") == "Op"} == {step}


def test_gzip_output(tmp_path):
    out = tmp_path / "t.json.gz"
    run_cli(["timeline", FIXTURES / "cnn", "--steps", "6:10", "-o", out])
    doc = json.loads(gzip.decompress(out.read_bytes()))
    assert doc["otherData"]["steps"] == [6, 8, 10]
    validate(doc)
    assert not [p for p in tmp_path.iterdir() if p.name != "t.json.gz"]  # no temp left


def test_per_step_dir(tmp_path):
    run_cli(["timeline", FIXTURES / "plain_session", "--per-step-dir", tmp_path / "steps"])
    steps = _run("plain_session").steps
    files = sorted((tmp_path / "steps").iterdir())
    assert {p.name for p in files} == {f"timeline-{s}.json" for s in steps}
    for p in files:
        doc = json.loads(p.read_text())
        assert doc["otherData"]["steps"] == [int(p.stem.split("-")[1])]
        validate(doc)


@pytest.mark.parametrize("name", ["gpu_kittibox", "gpu_mnist"])
def test_all_steps_on_gpu_traces(name, tmp_path):
    out = tmp_path / "t.json"
    run_cli(["timeline", FIXTURES / name, "--all-steps", "-o", out])
    doc = json.loads(out.read_text())
    counts = validate(doc)
    run = _run(name)
    assert counts[("X", "Op")] == run.nodes.height
    procs, threads = _names(doc)
    names = set(threads.values())
    assert "stream:all" in names and "memcpy" in names
    assert "Allocators" not in procs.values()  # no allocation records: no empty process


def test_options_turn_parts_off(tmp_path):
    out = tmp_path / "t.json"
    run_cli(["timeline", FIXTURES / "cnn", "--all-steps", "--no-dataflow", "--no-memory",
             "--no-critical-path", "-o", out])
    cats = {e.get("cat") for e in json.loads(out.read_text())["traceEvents"]}
    assert cats == {None, "Op", "Step"}


@pytest.mark.parametrize("args,message", [
    (["--step", "5"], "step 5 was not traced"),
    (["--steps", "9:3"], "the first step is after the last"),
    (["--steps", "7"], "expected A:B"),
    (["--steps", "x:9"], "expected A:B"),
    (["--steps", "1000:"], "no traced step in that range"),
    (["--step", "4", "--all-steps"], "only one of"),
])
def test_bad_steps_exit_2_with_one_line(args, message, tmp_path):
    result = run_cli(["timeline", FIXTURES / "cnn", "-o", tmp_path / "t.json", *args],
                     expect_exit=2)
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("analyze: error: ") and message in line
    assert not (tmp_path / "t.json").exists()


def test_bad_output_exits_2(tmp_path):
    result = run_cli(["timeline", FIXTURES / "cnn", "-o", tmp_path / "nope" / "t.json"],
                     expect_exit=2)
    assert result.stderr.strip().splitlines() == [
        f"analyze: error: {tmp_path / 'nope' / 't.json'}: directory {tmp_path / 'nope'} "
        "does not exist"]
    result = run_cli(["timeline", FIXTURES / "cnn"], expect_exit=2)
    assert "-o FILE" in result.stderr
    result = run_cli(["timeline", FIXTURES / "cnn", "-o", tmp_path], expect_exit=2)
    assert "is a directory" in result.stderr
    (tmp_path / "f").write_text("")
    result = run_cli(["timeline", FIXTURES / "cnn", "--per-step-dir", tmp_path / "f"],
                     expect_exit=2)
    assert result.stderr.strip().splitlines() == [
        f"analyze: error: {tmp_path / 'f'}: not a directory"]


def test_size_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(chrome_trace, "WARN_BYTES", 1000)
    result = run_cli(["timeline", FIXTURES / "mlp", "-o", tmp_path / "t.json"])
    assert "analyze: warning:" in result.stderr and "--steps" in result.stderr
    assert "--no-memory" in result.stderr


def test_a_failed_write_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(chrome_trace, "CHUNK_ROWS", 10)

    def interrupt(done: int, total: int) -> None:
        if done > 50:
            raise KeyboardInterrupt

    out = tmp_path / "t.json"
    with pytest.raises(KeyboardInterrupt):
        export(_run("mlp"), out, TimelineOptions((4,)), interrupt)
    assert list(tmp_path.iterdir()) == []


def test_parse_step_range():
    assert parse_step_range("3:7") == (3, 7)
    assert parse_step_range(":7") == (None, 7)
    assert parse_step_range("3:") == (3, None)


@pytest.mark.parametrize("levels", [0, 2, 6])
def test_asof_last_every_way_matches_a_plain_search(monkeypatch, levels):
    """asof_last's searches (one row per key, bisection within keys, one sorted search)
    against the definition, on random keys with many ties."""
    monkeypatch.setattr(graph, "BISECT_LEVELS", levels)
    rng = np.random.default_rng(levels)
    for rows, width, single in [(300, 40, False), (300, 400, True), (50, 5, False)]:
        key = rng.integers(0, width, rows)
        time = rng.integers(0, 30, rows)
        q_key = rng.integers(0, width + 3, 500)
        q_time = rng.integers(-2, 33, 500)
        if single:
            key = rng.permutation(width)[:rows]
        expect = []
        for k, t in zip(q_key.tolist(), q_time.tolist(), strict=True):
            best = -1
            for i in range(rows):
                if key[i] == k and time[i] <= t and (best < 0 or time[i] >= time[best]):
                    best = i
            expect.append(best)
        assert graph.asof_last(key, time, q_key, q_time).tolist() == expect


def test_lanes_of_many_tracks_are_each_tracks_own():
    """Lanes are per track, however far apart the track ids and the times are."""
    from runlens.analyzer.timeline.lanes import lanes

    rng = np.random.default_rng(1)
    ts = rng.integers(0, 50, 200)
    end = ts + rng.integers(0, 20, 200)
    for ids in ([0, 1, 2], [5, 2**40, 3], [0, 2**61, 7]):
        track = np.asarray(ids, np.int64)[rng.integers(0, 3, 200)]
        got = lanes(track, ts * 10**15, end * 10**15)
        for t in ids:
            one = track == t
            assert got[one].tolist() == lanes(np.zeros(one.sum(), np.int64), ts[one],
                                              end[one]).tolist()


def test_outputs_of_a_worker_after_one_without_outputs(tmp_path):
    """Multi-worker: the outputs are matched to their executions by worker, step and
    exec_idx; worker names are numbered once for both frames (a worker without outputs
    first used to shift the numbering: every op of the next one had "outputs": [])."""
    import shutil

    shutil.copytree(FIXTURES / "gpu_mnist", tmp_path / "multi" / "a_gpu",
                    ignore=shutil.ignore_patterns(".runlens"))
    shutil.copytree(FIXTURES / "cnn", tmp_path / "multi" / "cnn",
                    ignore=shutil.ignore_patterns(".runlens"))
    # two jobs: forced
    run = load_run(tmp_path / "multi", use_cache=False, chosen=Selection(workers=True))
    assert run.workers == ["a_gpu", "cnn"] and not run.outputs.filter(
        pl.col("worker") == "a_gpu").height
    export(run, tmp_path / "m.json", TimelineOptions(tuple(run.steps)))
    alone = _trace("cnn", tmp_path)
    key = lambda e: (e["args"]["name"], e["ts"], e["dur"])  # noqa: E731
    want = {key(e): e["args"]["outputs"] for e in alone["traceEvents"] if e.get("cat") == "Op"}
    doc = json.loads((tmp_path / "m.json").read_text())
    got = {key(e): e["args"]["outputs"] for e in doc["traceEvents"]
           if e.get("cat") == "Op" and key(e) in want}
    assert got == want and any(got.values())


@pytest.mark.parametrize("name", ["rnn_while", "cnn", "straggler", "input_bound"])
def test_critical_paths_of_many_steps_at_once_equal_one_by_one(name):
    """The advisor computes its sampled steps' paths in one pass; each equals the path
    of that step alone."""
    run = load_run(FIXTURES / name)
    steps = run.steps[:: max(1, len(run.steps) // 6)]
    together = graph.step_critical_paths(run, steps)
    for step, path in zip(steps, together, strict=True):
        alone = graph.step_critical_paths(run, [step])[0]
        assert path.step == step and path.ops.equals(alone.ops)
        assert (path.length_ns, path.span_ns, path.step_ns) == \
            (alone.length_ns, alone.span_ns, alone.step_ns)
        assert path.step_ns > 0 and path.ops.height > 0
