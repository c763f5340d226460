"""Multi-worker TF2/JAX profiles (issue 30 points 3 and 5): a folder of per-worker
logdirs, as runlens's capture helpers write them for a job of several workers, opens as
one job; unrelated or damaged workers are refused or left out, said once; shares of a
step are per worker; RL116 names the slow worker and its cause.

Fixtures: fixtures/workers/ (fixtures/generate_workers.py: 2 TF2
MultiWorkerMirroredStrategy workers, 2 JAX processes with gloo, on localhost; in
`*_slow` worker 1 sleeps 30 ms a step in its input)."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest

from runlens.analyzer.load import load_run
from runlens.analyzer.proto import xplane_pb2
from runlens.checkers import run_checks
from tests.conftest import ROOT, run_cli

WORKERS = ROOT / "fixtures" / "workers"
FILE = Path("plugins/profile/run1/host.xplane.pb")
ALL = ("tf_balanced", "tf_slow", "jax_balanced", "jax_slow")


def _raw_steps(path: Path, op_prefix: str | tuple[str, ...]) -> dict[int, dict[str, float]]:
    """From the raw XSpace: per `train` step marker (step_num), its span (us) and the
    time (us) of host events named `op_prefix...` that start inside it."""
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    plane = next(p for p in space.planes if p.name == "/host:CPU")
    names = {k: v.name for k, v in plane.event_metadata.items()}
    stats = {k: v.name for k, v in plane.stat_metadata.items()}
    events = [(names[e.metadata_id], line.timestamp_ns * 1000 + e.offset_ps, e.duration_ps, e)
              for line in plane.lines for e in line.events]
    steps = {}
    for name, start, dur, e in events:
        if name == "train":
            num = next(s.int64_value or s.uint64_value for s in e.stats
                       if stats[s.metadata_id] == "step_num")
            inside = sum(d for n, s, d, _ in events
                         if n.startswith(op_prefix) and start <= s < start + dur)
            steps[num] = {"step_us": dur / 1e6, "op_us": inside / 1e6}
    return steps


def test_a_folder_of_per_worker_logdirs_is_one_job() -> None:
    for name in ALL:
        run = load_run(WORKERS / name, use_cache=False)
        assert run.workers == ["worker0/host", "worker1/host"], name
        assert not run.warnings, name
        for worker in ("worker0", "worker1"):  # the same executions as each alone
            alone = load_run(WORKERS / name / worker, use_cache=False)
            assert run.nodes.filter(run.nodes["worker"] == f"{worker}/host").height \
                == alone.nodes.height
    out = run_cli(["summary", WORKERS / "tf_slow", "--no-cache"]).output
    assert "workers    2 (worker0/host, worker1/host)" in out


def test_the_capture_helper_records_the_job() -> None:
    for name in ALL:
        for task in (0, 1):
            body = json.loads((WORKERS / name / f"worker{task}" / FILE.parent
                               / "runlens.job.json").read_text())
            assert (body["workers"], body["task"]) == (2, task)


def test_tf_config_names_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    from runlens.analyzer.capture import job

    cluster = {"chief": ["a:1"], "worker": ["b:1", "c:1"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster,
                                                "task": {"type": "worker", "index": 1}}))
    assert job.tf_task() == (2, 3)  # the chief is task 0
    assert job.worker_logdir("logs", job.tf_task()) == Path("logs/worker2")
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["a:1"]},
                                                "task": {"type": "worker", "index": 0}}))
    assert job.tf_task() is None and job.worker_logdir("logs", None) == Path("logs")
    monkeypatch.setenv("TF_CONFIG", "{not json")
    assert job.tf_task() is None


def test_a_missing_worker_is_said_once(tmp_path: Path) -> None:
    job = tmp_path / "job"
    shutil.copytree(WORKERS / "tf_slow" / "worker0", job / "worker0")
    shutil.copytree(WORKERS / "tf_slow" / "worker1", job / "worker1")
    (job / "worker1" / FILE).unlink()
    result = run_cli(["summary", job, "--no-cache"])  # summary lists warnings again
    assert result.stderr.count("the job had 2 workers") == 1
    assert "missing task(s) 1" in result.stderr


def test_an_unreadable_worker_is_left_out_once(tmp_path: Path) -> None:
    job = tmp_path / "job"
    shutil.copytree(WORKERS / "tf_slow", job)
    (job / "worker1" / FILE).write_bytes(b"\x0a\xff\xff\xff" * 8)
    result = run_cli(["summary", job, "--no-cache"])
    assert result.stderr.count("worker worker1/host left out") == 1
    assert "workers    1 (worker0/host)" in result.stdout


def test_workers_whose_windows_do_not_overlap_are_refused(tmp_path: Path) -> None:
    job = tmp_path / "job"
    shutil.copytree(WORKERS / "tf_slow" / "worker0", job / "worker0")
    shutil.copytree(WORKERS / "tf_balanced" / "worker1", job / "worker1")  # another run
    out = run_cli(["summary", job, "--no-cache"], expect_exit=2).output
    assert out.count("\n") == 1
    assert "not one job: their profiling windows do not overlap" in out
    forced = run_cli(["summary", job, "--no-cache", "--workers"]).output
    assert "workers    2" in forced


def test_workers_that_ran_different_programs_are_refused() -> None:
    """two_programs: a TF2 and a JAX process profiling at the same moment (windows
    overlap, from the raw Task Environment planes) are not one job."""
    windows = []
    for task in (0, 1):
        space = xplane_pb2.XSpace.FromString(
            (WORKERS / "two_programs" / f"worker{task}" / FILE).read_bytes())
        env = next(p for p in space.planes if p.name == "Task Environment")
        names = {k: v.name for k, v in env.stat_metadata.items()}
        stats = {names[s.metadata_id]: s.int64_value or s.uint64_value for s in env.stats}
        windows.append((stats["profile_start_time"], stats["profile_stop_time"]))
    assert max(w[0] for w in windows) < min(w[1] for w in windows)  # they overlap
    out = run_cli(["summary", WORKERS / "two_programs", "--no-cache"], expect_exit=2).output
    assert out.count("\n") == 1
    assert "not one job: they ran different programs" in out
    assert "workers    2" in run_cli(["summary", WORKERS / "two_programs", "--no-cache",
                                       "--workers"]).output


def test_shares_of_a_step_are_per_worker() -> None:
    """RL101 on two TF workers: CollectiveReduceV2's share of the step is each worker's
    op time against its own step, averaged (raw events), never over 100%."""
    for name in ("tf_slow", "tf_balanced"):
        raw = [_raw_steps(WORKERS / name / f"worker{k}" / FILE, "CollectiveReduceV2")
               for k in (0, 1)]
        run = load_run(WORKERS / name, use_cache=False)
        kept = set(run.steps)
        op_us = statistics.mean(r[s]["op_us"] for r in raw for s in r if s in kept)
        step_us = statistics.mean(r[s]["step_us"] for r in raw for s in r if s in kept)
        rl101 = [f for f in run_checks(run) if f.code == "RL101"]
        assert rl101 and rl101[0].where["op"] == "CollectiveReduceV2"
        assert rl101[0].impact == pytest.approx(op_us / step_us, rel=0.05)
        assert "exceeds the step" not in rl101[0].message
        for f in run_checks(run):
            for rows in f.evidence.values():
                for row in rows if isinstance(rows, list) else []:
                    if isinstance(row, dict):
                        assert row.get("share_of_step", 0) <= 1.0, (f.code, row)


def _slow_worker(name: str) -> list:
    return [f for f in run_checks(load_run(WORKERS / name, use_cache=False))
            if f.code == "RL116"]


def test_the_slow_worker_and_its_cause_are_named() -> None:
    """The others' wait: worker 0's CollectiveReduceV2 time beyond worker 1's in the same
    step (raw events); the cause: worker 1's sleep before its first op."""
    raw = [_raw_steps(WORKERS / "tf_slow" / f"worker{k}" / FILE, "CollectiveReduceV2")
           for k in (0, 1)]
    wait = statistics.median(raw[0][s]["op_us"] - raw[1][s]["op_us"] for s in raw[0])
    [tf] = _slow_worker("tf_slow")
    assert tf.where["worker"] == "worker1/host"
    assert tf.evidence["cause"] == "host_before_first_op"
    assert tf.evidence["wait_us_per_step"] == pytest.approx(wait, rel=0.05)
    assert wait > 25_000  # the 30 ms sleep, less what worker 1 waited itself
    [jax] = _slow_worker("jax_slow")
    # JAX on CPU: the psum's HLO instructions (psum_invariant.N, all-reduce) as thunks
    raw = [_raw_steps(WORKERS / "jax_slow" / f"worker{k}" / FILE,
                      ("psum_invariant", "all-reduce")) for k in (0, 1)]
    wait = statistics.median(raw[0][s]["op_us"] - raw[1][s]["op_us"] for s in raw[0])
    assert jax.evidence["wait_us_per_step"] == pytest.approx(wait, rel=0.05)
    assert jax.where["worker"] == "worker1/host"
    assert jax.evidence["cause"] == "host_before_first_op"
    assert jax.evidence["before_us"] > 25_000 > jax.evidence["peer_before_us"]
    assert "worker1/host reached the collectives last" in jax.message


def test_the_slow_worker_check_is_silent_on_balanced_runs() -> None:
    for name in ("tf_balanced", "jax_balanced"):
        assert _slow_worker(name) == [], name
