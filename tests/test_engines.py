"""--engine local|ray: a profile run of many host files read one task per host
(analyzer/engines; docs/fleet.md). The output is the one the sequential read gives, byte
for byte; a host that cannot be read is left out with its name; Ray runs inside a
network namespace of its own (loopback only), as tests/ray_fleet.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from runlens.analyzer import engines, load, sources

from .conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
HOST_FILE = ROOT / "fixtures/workers/jax_balanced/worker0/plugins/profile/run1/host.xplane.pb"
# A GPU profile (host + 8 GPU planes) with device time placed on ops (the attribution)
BERT = (ROOT.parent / "shared/data/xplane"
        / "tensorflow__profiler__GPU-multi-worker__34.83.195.179_6003.xplane.pb")


def fleet(base: Path, hosts: int, host_file: Path = HOST_FILE) -> Path:
    """A profile run of `hosts` copies of a real profile (by default a JAX one, one worker
    of a two-host job), each under its own host name."""
    run = base / f"fleet{hosts}" / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    for i in range(hosts):
        shutil.copyfile(host_file, run / f"host{i:03d}.xplane.pb")
    return base / f"fleet{hosts}"


def tf1_workers(base: Path, workers: int) -> Path:
    """A folder of TF1 run dirs, one per worker of one job (copies of a captured run)."""
    for i in range(workers):
        shutil.copytree(ROOT / "fixtures/runs/straggler", base / "job" / f"worker{i}")
    return base / "job"


def test_tf1_worker_dirs_are_tasks_too(tmp_path, monkeypatch):
    """Each TF1 worker dir is one task: summary (pieces) and ops (the run loaded from
    the tasks' caches) as the sequential read gives them."""
    path = tf1_workers(tmp_path, 3)
    for command in (["summary", "--format", "json"], ["ops", "--format", "json"]):
        sequential = run_cli([command[0], path, *command[1:], "--no-cache"]).stdout
        parallel = run_cli([command[0], path, *command[1:], "--engine", "local"])
        assert parallel.stdout == sequential
        assert "3 hosts read by the local engine (3 read, 0 left out)" in parallel.stderr


@pytest.mark.parametrize(("host_file", "hosts", "fmt"), [
    (HOST_FILE, 3, "json"), (HOST_FILE, 3, "text"), (BERT, 3, "json"), (BERT, 3, "text"),
    (HOST_FILE, 20, "json"),  # more than engines._COMPACT_EVERY: pieces compacted
], ids=["jax-json", "jax-text", "bert-json", "bert-text", "jax-20-hosts"])
def test_summary_of_hosts_pieces_is_the_runs_own(tmp_path, monkeypatch, host_file, hosts,
                                                 fmt):
    """`summary` of several hosts is made of the pieces their tasks give, the driver
    loading no host (load.load is not called here): the bytes of the summary of the
    whole Run read sequentially (--no-cache)."""
    if not host_file.exists():
        pytest.skip(f"{host_file} missing")
    path = fleet(tmp_path, hosts, host_file)
    sequential = run_cli(["summary", path, "--format", fmt, "--no-cache"]).stdout

    def no_driver_load(*_args, **_kwargs):
        raise AssertionError("the driver loaded the run")

    monkeypatch.setattr(load, "load", no_driver_load)
    assert run_cli(["summary", path, "--format", fmt]).stdout == sequential


@pytest.mark.parametrize("command", [["summary", "--format", "json"],
                                     ["ops", "--format", "json"],
                                     ["scopes", "--format", "json", "--min-micros", "0"]])
def test_local_engine_output_is_the_sequential_one(tmp_path, monkeypatch, command):
    path = fleet(tmp_path, 4)
    sequential = run_cli([command[0], path, *command[1:], "--no-cache"]).stdout
    monkeypatch.setenv("RUNLENS_CACHE_DIR", str(tmp_path / "cache"))
    parallel = run_cli([command[0], path, *command[1:], "--engine", "local"])
    assert parallel.stdout == sequential
    assert "4 hosts read by the local engine (4 read, 0 left out)" in parallel.stderr
    if command[0] == "summary":
        workers = json.loads(parallel.stdout)["summary"]["workers"]
        assert workers == [f"host{i:03d}" for i in range(4)]


def test_local_engine_gives_each_host_aggregates(tmp_path):
    """One task per host, each in a pool process, each giving its per step, device and
    op type executions; together they are the merged run's own."""
    import polars as pl

    path = fleet(tmp_path, 3)
    reader = sources.detect(path)
    parts = reader.parts(path, sources.Selection())
    tasks = [engines.HostTask(reader.kind, p, None) for p in parts]
    results = engines.run_tasks("local", tasks)
    assert [r.worker for r in results] == ["host000", "host001", "host002"]
    assert all(r.error is None and r.ran_by.startswith("pid ") for r in results)
    table = engines.aggregates_of(results)
    run = load.load_run(path)
    keys = run.keys.select("worker", "device", "op_type").with_row_index("key_id")
    expected = (run.executions.join(keys.with_columns(pl.col("key_id").cast(
        run.executions.schema["key_id"])), on="key_id")
        .group_by("worker", "step", "device", "op_type").agg(executions=pl.len()))
    got = table.select("worker", "step", "device", "op_type", "executions")
    order = ["worker", "step", "device", "op_type"]
    assert got.sort(order).equals(expected.sort(order).select(got.columns))
    assert table.get_column("executions").sum() == run.executions.height


def bad_fleet(base: Path) -> Path:
    """Two good hosts, one damaged (cut short), one FIFO, one missing (a dangling link)."""
    path = fleet(base, 2)
    run = path / "plugins" / "profile" / "run1"
    (run / "host002.xplane.pb").write_bytes(HOST_FILE.read_bytes()[:5000])
    os.mkfifo(run / "host003.xplane.pb")
    (run / "host004.xplane.pb").symlink_to(base / "gone.xplane.pb")
    return path


def test_local_engine_leaves_bad_hosts_out_by_name(tmp_path):
    path = bad_fleet(tmp_path)
    result = run_cli(["summary", path, "--format", "json", "--engine", "local"])
    assert json.loads(result.stdout)["summary"]["workers"] == ["host000", "host001"]
    for host in ("host002", "host003", "host004"):
        assert sum(host in line for line in result.stderr.splitlines()) == 1, result.stderr
    assert "worker host002 left out" in result.stderr


def test_a_host_gone_before_its_task_is_left_out(tmp_path):
    """A file that goes away between the scan and its task: the task's error names it,
    the others are read."""
    path = fleet(tmp_path, 2)
    reader = sources.detect(path)
    parts = reader.parts(path, sources.Selection())
    parts[1].path.unlink()
    results = engines.run_tasks("local", [engines.HostTask(reader.kind, p, None) for p in parts])
    assert results[0].error is None
    assert results[1].error is not None and "host001.xplane.pb" in results[1].error


def test_ray_absent_is_one_line_naming_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    result = run_cli(["summary", fleet(tmp_path, 2), "--engine", "ray"], expect_exit=2)
    assert result.stderr.strip() == ("analyze: error: --engine ray needs Ray: "
                                     "pip install 'runlens[ray]'")


def _netns_skip_reason() -> str | None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare (util-linux) or ip (iproute2) missing: no network namespace for Ray"
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    if probe.returncode != 0:
        return f"unshare -n refused: {probe.stderr.decode().strip()[:200]}"
    try:
        import ray  # noqa: F401
    except ImportError:
        return "ray missing: pip install 'runlens[ray]'"
    return None


def test_ray_engine_equals_local_on_8_and_32_hosts(tmp_path, monkeypatch):
    """Ray, local, inside `unshare -n` with loopback only (never beyond it), its temp dir
    short and under this test's folders: the same summary as --engine local, one Ray
    task per host; bad hosts left out by name there too."""
    if reason := _netns_skip_reason():
        pytest.skip(reason)
    fleets = [fleet(tmp_path, 8), fleet(tmp_path, 32), bad_fleet(tmp_path / "bad")]
    temp = tempfile.mkdtemp(prefix="/tmp/rl")  # Ray's socket paths must stay short
    try:
        shell = f'ip link set lo up && exec "$0" {ROOT / "tests/ray_fleet.py"} "$@"'
        done = subprocess.run(["unshare", "-n", "sh", "-c", shell, sys.executable, temp,
                               *map(str, fleets)], capture_output=True, text=True,
                              timeout=900, env={**os.environ, "RAY_TMPDIR": temp,
                                   "HOME": str(tmp_path)})  # Ray's token: ~/.ray
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    for path, hosts in zip(fleets[:2], (8, 32), strict=True):
        on_ray = out[str(path)]
        assert on_ray["exit"] == 0, on_ray["stderr"]
        local = run_cli(["summary", path, "--format", "json", "--engine", "local"])
        assert on_ray["stdout"] == local.stdout
        assert on_ray["ops_exit"] == 0
        assert on_ray["ops"] == run_cli(["ops", path, "--format", "json", "--engine",
                                         "local"]).stdout
        assert len(json.loads(local.stdout)["summary"]["workers"]) == hosts
        assert len(set(on_ray["ran_by"])) == hosts  # one Ray task per host
        assert all(r.startswith("ray task ") for r in on_ray["ran_by"])
        assert f"{hosts} hosts read by the ray engine ({hosts} read, 0 left out)" \
            in on_ray["stderr"]
    bad = out[str(fleets[2])]
    assert bad["exit"] == 0, bad["stderr"]
    assert json.loads(bad["stdout"])["summary"]["workers"] == ["host000", "host001"]
    for host in ("host002", "host003", "host004"):
        assert host in bad["stderr"]


def test_cache_dir_holds_each_hosts_cache(tmp_path):
    """--cache-dir (shared storage on a cluster): each host's task writes its cache
    there, and a second command reads them back (no host read again: same output)."""
    path = fleet(tmp_path, 3)
    where = tmp_path / "shared-cache"
    first = run_cli(["ops", path, "--format", "json", "--cache-dir", where])
    assert len([p for p in where.iterdir() if p.is_dir()]) >= 3
    again = run_cli(["ops", path, "--format", "json", "--cache-dir", where])
    assert again.stdout == first.stdout
    assert not list(path.rglob(".runlens"))  # nothing beside the data
