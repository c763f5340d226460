"""Fault injection: the reading side keeps its promises (issue 17).

Seeded, generated cases of each family (tests/faults.py): damaged step files (byte flips,
half inside partition graphs; truncations; zeros; garbage), special files and paths, bad
manifests and graphs, damaged caches, concurrent readers and writers of the cache, and
crafted 100 MB files. tests/fuzz_faults.py runs the same families at length (by hand).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
import pytest

from runlens.analyzer import cache
from runlens.analyzer.errors import RunDirError
from runlens.analyzer.load import load_run
from runlens.analyzer.proto import config_pb2
from runlens.analyzer.rundir import find_runs
from tests import faults
from tests.conftest import FIXTURES, ROOT, run_cli


@pytest.fixture(scope="module")
def clean_rows() -> dict[str, pl.DataFrame]:
    return {name: faults.raw_rows(load_run(FIXTURES / name, use_cache=False))
            for name in ("plain_session", "mlp")}


# ----------------------------------------------------------------------------- step files


@pytest.mark.parametrize("fixture,seed", [("plain_session", 1), ("mlp", 2)])
def test_a_damaged_step_file_never_spoils_the_others(tmp_path, clean_rows, fixture, seed):
    """100 damages per fixture: each file is read or skipped with one warning naming it;
    every other step gives exactly its rows. A flip inside a partition graph (e.g. bad
    UTF-8 in a node name) refused the whole run before."""
    rng = random.Random(seed)
    run_dir = faults.copy_run(FIXTURES / fixture, tmp_path / fixture)
    if fixture == "plain_session":  # without the manifest's sizes, every damage is decoded
        (run_dir / "manifest.json").unlink()
    steps = find_runs(run_dir)[0].steps
    outcomes: dict[str, int] = {}
    for _ in range(100):
        step, path = rng.choice(sorted(steps.items()))
        original = Path(path).read_bytes()
        kind, damaged = faults.damage_step(original, rng)
        Path(path).write_bytes(damaged)
        try:
            outcome = faults.check_step_fault(run_dir, Path(path), step, clean_rows[fixture])
        finally:
            Path(path).write_bytes(original)
        outcomes[f"{kind}:{outcome}"] = outcomes.get(f"{kind}:{outcome}", 0) + 1
    assert sum(v for k, v in outcomes.items() if k.startswith("flip-graph:skipped")) > 5, outcomes
    assert sum(v for k, v in outcomes.items() if k.endswith(":read")) > 0, outcomes


def _with_partition_graph_attr(raw: bytes, key: str, value: bytes) -> bytes:
    md = config_pb2.RunMetadata.FromString(raw)
    md.partition_graphs[0].node[0].attr[key].s = value
    return md.SerializeToString()


@pytest.mark.parametrize("attr", ["data_format", "tensor_name", "send_device",
                                  "recv_device"])
def test_bad_utf8_in_a_partition_graph_attr_skips_that_file(run_copy, attr):
    run_dir = run_copy("plain_session")
    (run_dir / "manifest.json").unlink()  # its sizes would refuse the changed file first
    victim = sorted((run_dir / "steps").glob("step-*.pb"))[1]
    victim.write_bytes(_with_partition_graph_attr(victim.read_bytes(), attr, b"\xff\xfe"))
    run = load_run(run_dir, use_cache=False)
    assert [w for w in run.warnings if str(victim) in w and "partition graph" in w]
    assert len(run.steps) == len(list((run_dir / "steps").iterdir())) - 1


def test_bad_utf8_in_graph_pb_is_a_warning_not_an_internal_error(run_copy):
    from runlens.analyzer.proto import graph_pb2

    run_dir = run_copy("mlp")
    graph = graph_pb2.GraphDef.FromString((run_dir / "graph.pb").read_bytes())
    graph.node[0].attr["tensor_name"].s = b"\xc3\x28"
    (run_dir / "graph.pb").write_bytes(graph.SerializeToString())
    result = run_cli(["summary", run_dir, "--no-cache"])
    assert "graph.pb: not a readable GraphDef" in result.output


def test_special_files_and_odd_names_in_steps_are_reported_and_skipped(run_copy):
    run_dir = run_copy("plain_session")
    steps = run_dir / "steps"
    n = len(list(steps.iterdir()))
    (steps / "step-90000001.pb").mkdir()
    os.mkfifo(steps / "step-90000002.pb")  # opening it would block for ever
    os.symlink("step-90000003.pb", steps / "step-90000003.pb")  # a loop
    os.symlink("/dev/zero", steps / "step-90000004.pb")
    (steps / "step-99999999999999999999.pb").write_bytes(b"")  # beyond int64
    os.symlink("nowhere", steps / "step-90000005.pb")  # dangling
    run = load_run(run_dir, use_cache=False)
    assert len(run.steps) == n
    for name in ("90000001", "90000002", "90000003", "90000004", "99999999999999999999"):
        assert [w for w in run.warnings if f"step-{name}.pb" in w], name


def test_a_symlink_loop_first_in_the_scan_does_not_hide_the_run(tmp_path):
    run_dir = tmp_path / "r"
    (run_dir / "steps").mkdir(parents=True)
    os.symlink("step-00000000.pb", run_dir / "steps" / "step-00000000.pb")
    for p in sorted((FIXTURES / "plain_session" / "steps").iterdir()):
        (run_dir / "steps" / p.name).write_bytes(p.read_bytes())
    run = load_run(run_dir, use_cache=False)
    assert len(run.steps) == len(list((FIXTURES / "plain_session" / "steps").iterdir()))
    assert any("step-00000000.pb" in w for w in run.warnings)


def test_a_step_without_node_stats_is_reported(run_copy):
    from runlens.analyzer.proto import step_stats_pb2

    run_dir = run_copy("plain_session")
    (run_dir / "manifest.json").unlink()  # its sizes would refuse the changed file first
    victim = sorted((run_dir / "steps").glob("step-*.pb"))[0]
    md = config_pb2.RunMetadata.FromString(victim.read_bytes())
    md.step_stats.CopyFrom(step_stats_pb2.StepStats(
        dev_stats=[step_stats_pb2.DeviceStepStats(device="/cpu:0")]))
    victim.write_bytes(md.SerializeToString())
    for native in ("", "1"):
        os.environ["RUNLENS_PURE_PYTHON"] = native
        try:
            run = load_run(run_dir, use_cache=False, jobs=1)
        finally:
            os.environ.pop("RUNLENS_PURE_PYTHON")
        assert [w for w in run.warnings if str(victim) in w and "no node stats" in w]


MANIFESTS = {
    "steps-int": (lambda m: {**m, "steps": 5}, 0),
    "steps-bool": (lambda m: {**m, "steps": True}, 0),
    "steps-str": (lambda m: {**m, "steps": "x"}, 0),
    "entry-bytes-bool": (lambda m: {**m, "steps": [{"step": 1, "bytes": True}]}, 0),
    "version-str": (lambda m: {**m, "version": "1"}, 2),
    "version-bool": (lambda m: {**m, "version": True}, 2),
    "version-new": (lambda m: {**m, "version": 99}, 2),
    "format": (lambda m: {**m, "format": "other"}, 2),
    "list": (lambda m: [m], 0),
}


@pytest.mark.parametrize("case", sorted(MANIFESTS))
def test_bad_manifests_exit_2_or_are_ignored_with_a_warning(run_copy, case):
    run_dir = run_copy("plain_session")
    edit, code = MANIFESTS[case]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").write_text(json.dumps(edit(manifest)))
    result = run_cli(["summary", run_dir, "--no-cache"], expect_exit=code)
    if code == 2:
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and "manifest.json" in lines[0]
        assert case != "version-str" or "not an integer" in lines[0]


@pytest.mark.parametrize("which", ["manifest.json", "graph.pb", "op_log.pb"])
def test_deeply_nested_or_garbage_metadata_is_a_warning(run_copy, which):
    run_dir = run_copy("plain_session")
    text = "[" * 100_000 + "]" * 100_000 if which.endswith(".json") else "\x0a\xff" * 9
    (run_dir / which).write_text(text)
    result = run_cli(["summary", run_dir, "--no-cache"])
    assert f"{which}: not a readable" in result.output, result.output


def test_one_unreadable_worker_is_left_out_with_a_warning(tmp_path):
    parent = tmp_path / "exp"
    for w in ("worker-0", "worker-1", "worker-2"):
        faults.copy_run(FIXTURES / "plain_session", parent / w)
        manifest = json.loads((parent / w / "manifest.json").read_text())
        manifest["task"] = None
        (parent / w / "manifest.json").write_text(json.dumps(manifest))
    for p in (parent / "worker-1" / "steps").iterdir():
        p.write_bytes(b"\x00garbage")
    manifest = json.loads((parent / "worker-2" / "manifest.json").read_text())
    (parent / "worker-2" / "manifest.json").write_text(json.dumps({**manifest, "version": 7}))
    os.symlink("loop", parent / "loop")
    os.symlink("loop", parent / "loop-b")
    run = load_run(parent, use_cache=False)
    assert run.workers == ["worker-0"]
    assert [w for w in run.warnings if "worker-1" in w and "left out" in w]
    assert [w for w in run.warnings if "worker-2" in w and "left out" in w]
    assert [w for w in run.warnings if "loop" in w and "cannot read" in w]


def test_step_number_overflow_alone_is_exit_2(tmp_path):
    (tmp_path / "r" / "steps").mkdir(parents=True)
    (tmp_path / "r" / "steps" / "step-99999999999999999999.pb").write_bytes(b"")
    result = run_cli(["summary", tmp_path / "r"], expect_exit=2)
    assert len(result.output.strip().splitlines()) == 1


def test_an_unreadable_run_dir_is_one_line_exit_2(tmp_path):
    """As root the permission cannot bite, so the check runs as `nobody` when possible."""
    if os.geteuid() != 0:
        target = tmp_path / "r"
        target.mkdir()
        target.chmod(0)
        try:
            result = run_cli(["summary", target], expect_exit=2)
        finally:
            target.chmod(0o755)
        assert len(result.output.strip().splitlines()) == 1
        return
    target = tmp_path / "r"
    faults.copy_run(FIXTURES / "plain_session", target)
    target.chmod(0o700)
    baseline = tmp_path / "base.json"
    baseline.write_text("{}")
    baseline.chmod(0o600)
    tmp_path.chmod(0o755)
    # report checks its -o before reading (issue 25): a folder nobody may write to (not
    # under pytest's, which only root may search), so that the run dir is what fails
    out = Path(tempfile.mkdtemp(prefix="runlens-nobody-"))
    out.chmod(0o777)
    commands = [["summary", str(target)], ["compare", str(target), str(target)],
                ["compare", str(baseline), str(target)],
                ["report", str(target), "-o", str(out / "nobody.html")]]
    results = faults.cli_as_nobody(commands, tmp_path / "nobody-cache")
    shutil.rmtree(out, ignore_errors=True)
    for args, (exit_code, output) in zip(commands, results, strict=True):
        assert exit_code == 2, (args, output)
        lines = output.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in output, (args, output)
        assert ("base.json" if str(baseline) in args else str(target)) in lines[0], args


# ----------------------------------------------------------------------------- cache


def test_any_damage_to_the_cache_means_recompute_with_at_most_one_warning(
        run_copy, cache_beside_data):
    """60 damaged caches: views equal fresh ones, at most one warning, and the next
    load reads a healed cache with no warning."""
    run_dir = run_copy("mlp")
    fresh = faults.view_rows(load_run(run_dir, use_cache=False))
    load_run(run_dir)
    cache.wait()
    rng = random.Random(17)
    kinds: dict[str, int] = {}
    for i in range(60):
        files = faults.cache_files(run_dir)
        # key.json (the only file with the deep/types damages) one time in 6, whatever the
        # number of frame files (17 of them: a random pick reached it ~3 times in 60).
        keys = [f for f in files if f.name == "key.json"]
        victim = keys[0] if keys and i % 6 == 0 else rng.choice(files)
        kind = faults.damage_cache_file(victim, rng)
        kinds[kind] = kinds.get(kind, 0) + 1
        seen: list[str] = []
        run = load_run(run_dir, on_warning=seen.append)
        assert faults.same_views(faults.view_rows(run), fresh), (victim.name, kind)
        assert len([w for w in run.warnings if "cache" in w]) <= 1, run.warnings
        assert all(w in run.warnings for w in seen)  # found late: also given at once
        cache.wait()
        healed = load_run(run_dir)
        assert not [w for w in healed.warnings if "cache" in w], (victim.name, kind)
        assert callable(healed._frames["executions"])  # read from the cache
    assert len(kinds) >= 6


def test_a_same_size_edit_with_mtime_restored_is_not_served_from_the_cache(run_copy):
    run_dir = run_copy("mlp")
    load_run(run_dir)
    cache.wait()
    victim = sorted((run_dir / "steps").glob("step-*.pb"))[2]
    st = victim.stat()
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF  # same size, different content
    victim.write_bytes(bytes(data))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    fresh = load_run(run_dir, use_cache=False)
    again = load_run(run_dir)
    assert not callable(again._frames["executions"])  # recomputed
    assert faults.raw_rows(again).equals(faults.raw_rows(fresh))


def test_a_copied_run_keeps_its_cache_when_the_content_is_the_same(tmp_path):
    """Stat changes (copy, touch) alone do not invalidate: the digests are compared."""
    src = faults.copy_run(FIXTURES / "mlp", tmp_path / "a")
    load_run(src)
    cache.wait()
    time.sleep(0.01)
    for p in (src / "steps").iterdir():
        os.utime(p)  # new mtime and ctime, same bytes
    again = load_run(src)
    assert callable(again._frames["executions"])


_READER = """
import sys, time
from runlens.analyzer.load import load_run
from tests import faults
ref = None
for i in range(int(sys.argv[2])):
    run = load_run(sys.argv[1])
    time.sleep(0.05)  # a writer replaces the cache while this reader holds it
    rows = faults.view_rows(run)
    if ref is None:
        ref = rows
    assert faults.same_views(rows, ref), "different results"
"""
_WRITER = """
import sys
from pathlib import Path
from runlens.analyzer import cache, sources
from runlens.analyzer.load import _fresh_frames
source = sources.detect(sys.argv[1])
part = source.parts(Path(sys.argv[1]), sources.Selection())[0]
for i in range(int(sys.argv[2])):
    _fresh_frames(source, part, 1, None, cache.fingerprint(part))  # a new cache beside
    cache.wait()
"""


def test_readers_never_fail_while_writers_replace_the_cache(run_copy, cache_beside_data):
    """Real processes: 3 readers load lazily and read views after a pause while 2
    writers keep writing new caches (which replaced the folder under readers before)."""
    run_dir = run_copy("plain_session")
    load_run(run_dir)
    cache.wait()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(run_dir), "6"], env=env,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    procs += [subprocess.Popen([sys.executable, "-c", _READER, str(run_dir), "12"], env=env,
                               stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert "warning" not in err, err
    # Folders a reader held when a writer cleaned up are removed by the next writer.
    from runlens.analyzer import sources
    from runlens.analyzer.load import _fresh_frames

    source = sources.detect(run_dir)
    part = source.parts(run_dir, sources.Selection())[0]
    _fresh_frames(source, part, 1, None, cache.fingerprint(part))
    cache.wait()
    loc = run_dir / ".runlens" / f"cache-v{cache.CACHE_VERSION}"
    assert len([p for p in loc.iterdir() if p.name.startswith("data-")]) == 1


# ----------------------------------------------------------------------------- big files


@pytest.mark.parametrize("kind", ["zeros", "empty-graphs", "empty-step-stats",
                                  "empty-node-stats"])
def test_a_100_mb_file_without_content_is_rejected_quickly_in_little_memory(tmp_path, kind):
    """In a subprocess, so that its peak RSS is its own: < 5 s and < 500 MB (it held
    10.5 GB and took 84 s for empty partition graphs, 22 s for zeros)."""
    path = tmp_path / "step-00000001.pb"
    faults.write_crafted(path, kind, 100 * 1024 * 1024)
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "faults.py"), str(path)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["rows"] == 0 and len(result["errors"]) == 1, result
    assert str(path) in result["errors"][0]
    assert result["seconds"] < 5 and result["maxrss_mib"] < 500, result


# ----------------------------------------------------------------------------- CLI


def _panicking_parquet(tmp_path: Path) -> Path:
    """A Parquet file polars panics on (pyo3's PanicException, a BaseException): found by
    a seeded search over bit flips of a real frame."""
    good = tmp_path / "good.parquet"
    load_run(FIXTURES / "mlp", use_cache=False).code.write_parquet(good, statistics=False)
    data = good.read_bytes()
    rng = random.Random(5)
    bad = tmp_path / "bad.parquet"
    for _ in range(3000):
        b = bytearray(data)
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        bad.write_bytes(bytes(b))
        try:
            pl.read_parquet(bad)
        except Exception:  # noqa: BLE001
            continue
        except BaseException as e:  # noqa: BLE001
            if type(e).__name__ == "PanicException":
                return bad
    pytest.fail("no bit flip made polars panic")


def test_a_native_panic_is_one_line_exit_3_never_a_traceback(tmp_path, capsys):
    from runlens import cli

    bad = _panicking_parquet(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.handle_errors(lambda: pl.read_parquet(bad))()
    assert exit_.value.code == 3
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "PanicException" in err


def test_no_readable_step_is_exit_2(run_copy):
    run_dir = run_copy("plain_session")
    for p in (run_dir / "steps").iterdir():
        p.write_bytes(b"\x0a\x05abc")
    with pytest.raises(RunDirError):
        load_run(run_dir, use_cache=False)
    result = run_cli(["summary", run_dir], expect_exit=2)
    assert len(result.output.strip().splitlines()) == 1
