"""Ingest and loading: real fixtures, bad input, the cache, several workers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from runlens.analyzer import cache
from runlens.analyzer.analysis.views import VIEWS, ViewOptions
from runlens.analyzer.cache import CACHE_VERSION
from runlens.analyzer.errors import RunDirError
from runlens.analyzer.load import load_run
from tests.conftest import FIXTURES, ROOT, run_cli


def _tf_node_stats(run_dir):
    """Per (step, lane, node): executions and summed op_end_rel_micros, by TensorFlow's parser."""
    config_pb2 = pytest.importorskip("tensorflow.core.protobuf.config_pb2")
    rows = []
    for path in sorted((run_dir / "steps").glob("step-*.pb")):
        step = int(path.stem.split("-")[1])
        md = config_pb2.RunMetadata.FromString(path.read_bytes())
        for dev in md.step_stats.dev_stats:
            for ns in dev.node_stats:
                mem = sum(m.total_bytes for m in ns.memory)
                rows.append((step, dev.device, ns.node_name, ns.op_end_rel_micros,
                             ns.all_start_nanos, mem, len(ns.output)))
    return pl.DataFrame(rows, orient="row", schema=["step", "lane", "node_name", "op_end_rel_us",
                                                    "start_ns", "mem", "outputs"])

def test_every_node_stat_of_every_fixture_is_ingested(fixture_dir):
    run = load_run(fixture_dir, use_cache=False)
    theirs = _tf_node_stats(fixture_dir)
    assert run.nodes.height == theirs.height > 0
    key = ["step", "lane", "node_name"]
    ours = run.nodes.drop("node_name").rename({"stat_name": "node_name"}).group_by(key).agg(
        n=pl.len(), us=pl.col("op_end_rel_us").sum(), start=pl.col("start_ns").sum(),
        mem=pl.col("mem_total_bytes").sum())
    expected = theirs.group_by(key).agg(
        n=pl.len(), us=pl.col("op_end_rel_us").sum(), start=pl.col("start_ns").sum(),
        mem=pl.col("mem").sum())
    joined = ours.join(expected, on=key, how="full", suffix="_tf")
    assert joined.filter(pl.col("n").is_null() | pl.col("n_tf").is_null()).height == 0
    for col in ("n", "us", "start", "mem"):
        assert (joined[col] == joined[f"{col}_tf"]).all(), col
    outputs = run.outputs.group_by("step").len().sort("step")
    assert outputs["len"].sum() == theirs["outputs"].sum()

def test_op_types_come_from_graphs_then_timeline_labels(fixture_dir):
    run = load_run(fixture_dir, use_cache=False)
    nodes = run.nodes
    assert nodes.filter(pl.col("op_type") == "unknown").height == 0
    graph_names = set(run.graph_nodes.filter(pl.col("source") == "graph")["name"].to_list())
    # Nodes that only exist after graph rewriting (_SOURCE, _arg_*, _retval_*, Send/Recv,
    # constant folding) are typed from partition graphs or labels, never from their name.
    extra = nodes.filter(~pl.col("node_name").is_in(list(graph_names)))
    for row in extra.select("node_name", "op_type", "timeline_label").unique().iter_rows():
        name, op, label = row
        assert op != "unknown"
        if label:
            assert label.split(" = ")[1].startswith(op) or op in label, row

def test_truncated_step_file_is_skipped_with_a_warning(run_copy):
    run_dir = run_copy("mlp")
    steps = sorted((run_dir / "steps").glob("step-*.pb"))
    victim = steps[2]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    run = load_run(run_dir, use_cache=False)
    assert len(run.steps) == len(steps) - 1
    assert len(run.warnings) == 1 and victim.name in run.warnings[0]
    assert "truncated" in run.warnings[0]

def test_garbage_step_file_without_manifest_is_skipped(run_copy):
    run_dir = run_copy("cnn")
    (run_dir / "manifest.json").unlink()  # readers must not require it
    steps = sorted((run_dir / "steps").glob("step-*.pb"))
    steps[0].write_bytes(b"\xff\xff\xff not a protobuf")
    (run_dir / "steps" / "notes.txt").write_text("unknown files are ignored")
    run = load_run(run_dir, use_cache=False)
    assert len(run.steps) == len(steps) - 1
    assert len(run.warnings) == 1 and steps[0].name in run.warnings[0]

def test_no_readable_step_is_a_clear_error(run_copy):
    run_dir = run_copy("plain_session")
    for p in (run_dir / "steps").glob("step-*.pb"):
        p.write_bytes(b"\x0a\xff")
    with pytest.raises(RunDirError, match="no readable step file"):
        load_run(run_dir, use_cache=False)
    result = run_cli(["summary", run_dir], expect_exit=2)
    assert result.output.count("\n") <= len(list((run_dir / "steps").iterdir())) + 1

@pytest.mark.parametrize("make_path", [
    lambda tmp: tmp / "missing",
    lambda tmp: (tmp / "file.pb").write_bytes(b"x") and tmp / "file.pb",
    lambda tmp: (tmp / "empty").mkdir() or tmp / "empty",
])
def test_not_a_run_exits_2_with_one_line(tmp_path, make_path):
    path = make_path(tmp_path)
    result = run_cli(["summary", path], expect_exit=2)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0]

def test_newer_format_version_is_refused(run_copy):
    run_dir = run_copy("mlp")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["version"] = 99
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    result = run_cli(["summary", run_dir], expect_exit=2)
    assert "newer" in result.output

def test_cache_is_used_and_invalidated(run_copy, cache_beside_data):
    run_dir = run_copy("mlp")
    cold = load_run(run_dir)
    cache.wait()  # it is written in the background
    assert (run_dir / ".runlens" / f"cache-v{CACHE_VERSION}" / "key.json").is_file()
    warm = load_run(run_dir)
    assert callable(warm._frames["executions"])  # read from Parquet when first used
    assert warm.nodes.equals(cold.nodes) and warm.outputs.equals(cold.outputs)
    # Changing a step file (size and mtime) invalidates the cache.
    victim = sorted((run_dir / "steps").glob("step-*.pb"))[0]
    victim.write_bytes(b"\x0a\xff")
    changed = load_run(run_dir)
    assert len(changed.steps) == len(cold.steps) - 1 and changed.warnings

def test_a_process_exits_once_its_cache_is_written(run_copy, cache_beside_data):
    """load_run writes the cache in a background thread; the interpreter waits for it."""
    run_dir = run_copy("mlp")
    subprocess.run([sys.executable, "-c", "import sys; from runlens.analyzer.load import load_run; "
                    "load_run(sys.argv[1])", str(run_dir)], check=True, cwd=ROOT)
    assert (run_dir / ".runlens" / f"cache-v{CACHE_VERSION}" / "key.json").is_file()


def test_an_analysis_that_fails_leaves_no_cache(run_copy, monkeypatch, cache_beside_data):
    """A product whose computation fails is not cached (no half-written file, no hang)
    and the error reaches the caller; the frames it was computed from are cached."""
    run_dir = run_copy("mlp")

    def broken():
        raise ValueError("broken")

    monkeypatch.setattr("runlens.analyzer.analysis.codepaths.trace_string", broken)
    run = load_run(run_dir)
    with pytest.raises(ValueError, match="broken"):
        VIEWS["code"](run, ViewOptions())
    cache.wait()
    [loc] = (run_dir / ".runlens").iterdir()
    assert (loc / "key.json").is_file()
    assert not [p for p in loc.rglob("*") if "code_paths" in p.name or "tree" in p.name]


def test_a_new_cache_removes_the_caches_of_other_versions(run_copy, cache_beside_data):
    run_dir = run_copy("mlp")
    old = run_dir / ".runlens" / "cache-v1"
    old.mkdir(parents=True)
    (old / "nodes.parquet").write_bytes(b"stale")
    load_run(run_dir)
    cache.wait()
    assert [p.name for p in (run_dir / ".runlens").iterdir()] == [f"cache-v{CACHE_VERSION}"]


@pytest.mark.parametrize("workers", [1, 2])
def test_views_read_from_the_cache_equal_fresh_views(tmp_path, workers):
    """The cache keeps step -1's per-node numbers, the code paths and the trees a first
    analysis computed: what views read from it must be what a fresh ingest computes (one
    run dir, and a dir of two workers)."""
    for w in range(workers):
        run_dir = tmp_path / "exp" / f"worker-{w}"
        shutil.copytree(FIXTURES / "cnn", run_dir, ignore=shutil.ignore_patterns(".runlens"))
        manifest = json.loads((run_dir / "manifest.json").read_text())
        manifest["task"] = None  # workers are named by their folders
        (run_dir / "manifest.json").write_text(json.dumps(manifest))
    path = tmp_path / "exp" if workers > 1 else tmp_path / "exp" / "worker-0"
    fresh = load_run(path, use_cache=False)
    first = load_run(path)  # writes the cache
    for view in VIEWS.values():
        view(first, ViewOptions())  # and the products views need
    cache.wait()
    cached = load_run(path)
    for kind, view in VIEWS.items():
        a, b = view(fresh, ViewOptions()), view(cached, ViewOptions())
        assert a.rows.height > 0 and a.rows.equals(b.rows) and a.root == b.root, kind
    assert callable(cached._frames["code"])  # code paths read from the cache, not recomputed


def test_unwritable_run_dir_caches_in_the_user_cache(run_copy, tmp_path, cache_beside_data):
    run_dir = run_copy("mlp")
    (run_dir / ".runlens").write_text("a file where the cache folder would go")
    load_run(run_dir)
    cache.wait()  # written in the background
    user_cache = tmp_path / "user-cache" / "runlens"
    assert any(user_cache.iterdir())
    again = load_run(run_dir)
    assert again.nodes.height > 0

def test_directory_of_run_dirs_is_one_multi_worker_run(tmp_path):
    parent = tmp_path / "exp"
    for worker in ("worker-0", "worker-1"):
        shutil.copytree(FIXTURES / "mlp", parent / worker)
        manifest = json.loads((parent / worker / "manifest.json").read_text())
        manifest["task"] = None
        (parent / worker / "manifest.json").write_text(json.dumps(manifest))
    run = load_run(parent, use_cache=False)
    assert run.workers == ["worker-0", "worker-1"]
    single = load_run(FIXTURES / "mlp", use_cache=False)
    assert run.nodes.height == 2 * single.nodes.height

def test_engine_and_cli_import_without_tensorflow():
    code = ("import sys, runlens.analyzer, runlens.analyzer.load; "
            "import runlens.analyzer.analysis.views, runlens.analyzer.analysis.graph; "
            "import runlens.checkers, runlens.cli; "
            "bad = [m for m in sys.modules if m.split('.')[0] == 'tensorflow']; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)

def test_help_starts_without_loading_the_engine():
    code = ("import sys; sys.argv = ['analyze', '--help']\n"
            "from runlens import cli\n"
            "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('polars', 'google.protobuf', 'networkx', 'numpy')\n"
            "         if m in sys.modules]\n"
            "assert not heavy, heavy")
    out = subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT,
                         capture_output=True, text=True)
    assert "summary" in out.stdout

def test_summary_text_and_json(captured_dir):
    fixture_dir = captured_dir
    text = run_cli(["summary", fixture_dir, "--no-cache"]).output
    assert "step time" in text and "node stats" in text
    data = json.loads(run_cli(["summary", fixture_dir, "--no-cache", "--format", "json"]).output)
    assert data["schema"] == 2  # 2: devices[] per (worker, device) with its own step
    s = data["summary"]
    assert sum(d["node_stats"] for d in s["devices"]) == s["node_stats"]
    for d in s["devices"]:  # a TF1 run dir: each device's span is within its steps'
        assert d["worker"] in s["workers"] and d["steps_with_work"] <= d["steps"]
        assert d["busy_us"] <= d["device_step_us"] and 0 <= d["idle_share"] <= 1
    # statistics over the steps left after warm-up and outliers (named in left_out)
    assert s["step_time_us"]["count"] == len(s["steps"]) - len(s["left_out"]) >= 5
    assert s["node_stats"] == sum(r["node_stats"] for r in s["per_step"])

def test_fixtures_are_small_enough():
    total = sum(p.stat().st_size for p in FIXTURES.rglob("*")
                if p.is_file() and ".runlens" not in p.parts)
    assert total < 10 * 1024 * 1024

def test_every_captured_fixture_has_five_traced_steps(captured_dir):
    assert len(list((captured_dir / "steps").glob("step-*.pb"))) >= 5



def test_parallel_ingest_gives_the_serial_frames(monkeypatch):
    """Threads (C decoder) and processes (protobuf walk) load what one thread loads."""
    from polars.testing import assert_frame_equal

    from runlens.analyzer.ingest import rundir as rundir_reader

    def frames(**kw):
        run = load_run(FIXTURES / "rnn_while", use_cache=False, **kw)
        return {n: getattr(run, n) for n in ("nodes", "outputs", "memory", "allocations")}

    serial = frames(jobs=1)
    threads = frames(jobs=2)
    monkeypatch.setenv("RUNLENS_PURE_PYTHON", "1")
    monkeypatch.setattr(rundir_reader, "PARALLEL_MIN_BYTES", 0)
    pools = []
    in_processes = rundir_reader._ingest_in_processes

    def recorded(*args):
        pools.append(in_processes(*args))
        return pools[-1]

    monkeypatch.setattr(rundir_reader, "_ingest_in_processes", recorded)
    processes = frames(jobs=2)
    assert len(pools) == 1 and pools[0] is not None  # the pool ran, no serial fallback
    for name, frame in serial.items():
        assert frame.height > 0
        assert_frame_equal(threads[name], frame)
        assert_frame_equal(processes[name], frame)


def test_a_run_built_from_whole_frames_equals_the_loaded_one():
    """Executions and outputs are kept by key; a Run given the whole frames (as replace()
    is) splits them again, and shows the same frames and per-node numbers."""
    from polars.testing import assert_frame_equal

    from runlens.analyzer.analysis.nodestats import node_stats
    from runlens.analyzer.model import Run

    run = load_run(FIXTURES / "cnn", use_cache=False)
    assert run.outputs.height > 0
    frames = {name: getattr(run, name) for name in Run.FRAMES}
    whole = {k: v for k, v in frames.items()
             if k not in ("executions", "keys", "output_rows", "output_keys")}
    rebuilt = Run.from_frames({**whole, "nodes": run.nodes, "outputs": run.outputs})
    assert rebuilt.keys.height < rebuilt.nodes.height  # split again by key
    assert_frame_equal(rebuilt.nodes, run.nodes)
    assert_frame_equal(rebuilt.outputs, run.outputs)
    assert_frame_equal(node_stats(rebuilt), node_stats(run))
    filtered = run.replace(outputs=run.outputs.filter(pl.col("slot") == 0))
    assert filtered.outputs.height < run.outputs.height
    assert_frame_equal(filtered.nodes, run.nodes)


def test_a_cache_written_by_other_code_is_never_read(run_copy, tmp_path, cache_beside_data):
    """The key covers the engine's code (cache.code_digest): a run analysed by another
    build of runlens (here: this one with one comment added to warmup.py, the rule behind
    the cached step flags) and then by this one is computed again, not read."""
    run_dir = run_copy("mlp")
    other = tmp_path / "other"
    (other / "runlens").mkdir(parents=True)  # the package is the repository's root
    shutil.copy(ROOT / "__init__.py", other / "runlens")
    shutil.copytree(ROOT / "analyzer", other / "runlens" / "analyzer",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(other / "runlens" / "analyzer" / "analysis" / "warmup.py", "a") as f:
        f.write("# another build\n")
    code = ("import sys; from runlens.analyzer.load import load_run; from runlens import analyzer; "
            "load_run(sys.argv[1]); print(analyzer.__file__)")
    out = subprocess.run([sys.executable, "-c", code, str(run_dir)], check=True,
                         cwd=other, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(other)}).stdout
    assert out.strip().startswith(str(other))  # the other build wrote the cache
    key_file = run_dir / ".runlens" / f"cache-v{CACHE_VERSION}" / "key.json"
    theirs = json.loads(key_file.read_text())
    assert theirs["key"]["code"] != cache.code_digest()
    run = load_run(run_dir)
    assert not callable(run._frames["executions"])  # computed, not read from Parquet
    cache.wait()
    assert json.loads(key_file.read_text())["key"]["code"] == cache.code_digest()
    assert callable(load_run(run_dir)._frames["executions"])  # now ours: read


def test_the_cache_key_covers_every_engine_package():
    """cache.code_files covers each package whose code computes what the cache holds
    (a new one, like ingest/, must not be left out): all but presentation and the
    generated protobuf modules."""
    package = Path(cache.__file__).parent  # where it is imported from (runlens/analyzer)
    covered = {p.relative_to(package) for p in cache.code_files()}
    engine = {p.relative_to(package) for p in package.rglob("*.py")
              if p.relative_to(package).parts[0] not in ("render", "report", "proto")}
    assert engine <= covered
    assert Path("ingest/stepwalk.py") in covered
