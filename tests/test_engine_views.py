"""`analyze ops` and `analyze scopes` of a run of many hosts are made of the node stats
each host's task computes (analysis.hostviews; docs/fleet.md): the driver never loads a
host's events (load.load fails here), and the output, stdout and stderr, is the whole
Run's read sequentially (--no-cache), byte for byte, whatever the options choose."""

from __future__ import annotations

import json

import pytest

from runlens.analyzer import load

from .conftest import run_cli
from .test_engines import BERT, ROOT, bad_fleet, fleet, tf1_workers

JSON = ["--format", "json"]
# Each case: the view and its options (steps, workers, step -1 or one step, tfprof's
# averaging, kernels, thresholds, accounting), text and JSON.
JAX_CASES = [
    ["ops", *JSON],
    ["ops"],
    ["scopes", *JSON, "--min-micros", "0"],
    ["scopes"],
    ["ops", *JSON, "--worker", "host001"],
    ["scopes", *JSON, "--steps", "4:7", "--min-micros", "0"],
    ["ops", *JSON, "--step", "5"],
    ["ops", *JSON, "--tfprof"],
    ["scopes", *JSON, "--op-types", "graph", "--account-type-regexes", "dot.*|fusion.*"],
    ["ops", *JSON, "--include-warmup", "--order-by", "occurrence"],
]


def _no_driver_load(*_args, **_kwargs):
    raise AssertionError("the driver loaded the run")


def _same_as_sequential(path, args, monkeypatch):
    sequential = run_cli([args[0], path, *args[1:], "--no-cache"])
    monkeypatch.setattr(load, "load", _no_driver_load)
    pieces = run_cli([args[0], path, *args[1:]])
    assert pieces.stdout == sequential.stdout
    assert pieces.stderr == sequential.stderr  # the same notes and warnings
    return pieces


@pytest.mark.parametrize("args", JAX_CASES, ids=[" ".join(a) for a in JAX_CASES])
def test_jax_hosts_views_are_the_runs_own(tmp_path, monkeypatch, args):
    made = _same_as_sequential(fleet(tmp_path, 3), args, monkeypatch)
    assert made.stdout.strip()


@pytest.mark.parametrize("args", [["ops", *JSON], ["scopes", *JSON, "--min-micros", "0"],
                                  ["scopes", "--op-types", "kernel", "--max-depth", "3"]])
def test_gpu_hosts_views_are_the_runs_own(tmp_path, monkeypatch, args):
    """A TF2 GPU profile: host and 8 GPU planes, device time attributed to ops."""
    if not BERT.exists():
        pytest.skip(f"{BERT} missing")
    _same_as_sequential(fleet(tmp_path, 3, BERT), args, monkeypatch)


@pytest.mark.parametrize("args", [["ops", *JSON], ["scopes", *JSON], ["ops", "--tfprof"]])
def test_tf1_worker_dirs_views_are_the_runs_own(tmp_path, monkeypatch, args):
    """TF1 run dirs, one per worker: tfprof's rules (whole microseconds), memory."""
    _same_as_sequential(tf1_workers(tmp_path, 3), args, monkeypatch)


WORKERS = ROOT / "fixtures" / "workers"


@pytest.mark.parametrize(("job", "extra"), [
    ("jax_balanced", []), ("jax_slow", []), ("tf_slow", []),
    ("two_programs", ["--workers"]),  # two programs read as one job: nodes of one worker
], ids=["jax_balanced", "jax_slow", "tf_slow", "two_programs"])
@pytest.mark.parametrize("view", ["ops", "scopes"])
def test_real_multi_process_jobs_views_are_the_runs_own(monkeypatch, job, extra, view):
    """Captured multi-process jobs (JAX jax.distributed, TF2 MultiWorkerMirroredStrategy;
    fixtures/generate_workers.py), each worker's own profile: the hosts differ (times,
    one slow worker, other programs), so the fold sums different rows."""
    _same_as_sequential(WORKERS / job, [view, *JSON, *extra], monkeypatch)


def test_a_choice_no_host_has_is_one_error(tmp_path, monkeypatch):
    """--worker or --step that no host has: exit 2 with one line, as the sequential read."""
    path = fleet(tmp_path, 3)
    monkeypatch.setattr(load, "load", _no_driver_load)
    nobody = run_cli(["ops", path, "--worker", "host9.*"], expect_exit=2)
    assert "no device matches --worker host9.*" in nobody.stderr
    untraced = run_cli(["scopes", path, "--step", "99"], expect_exit=2)
    assert "step 99 was not traced (traced steps: 2, 3" in untraced.stderr


def test_engine_note_says_the_view_is_made_of_pieces(tmp_path, monkeypatch):
    path = fleet(tmp_path, 3)
    monkeypatch.setattr(load, "load", _no_driver_load)
    made = run_cli(["scopes", path, "--engine", "local"])
    assert ("3 hosts read by the local engine (3 read, 0 left out); the view is made of "
            "their per-host pieces") in made.stderr


def test_code_view_still_reads_the_run(tmp_path):
    """The code and graph views need a Run (code paths, graph inputs): the driver loads
    it from the tasks' caches and says so."""
    path = fleet(tmp_path, 3)
    made = run_cli(["graph", path, *JSON, "--engine", "local"])
    assert "this command reads every host's events in the driver" in made.stderr
    assert made.stdout == run_cli(["graph", path, *JSON, "--no-cache"]).stdout


def test_bad_hosts_are_left_out_of_a_view_by_name(tmp_path, monkeypatch):
    """A damaged host, a FIFO and a dangling link: named once each; the view is the good
    hosts' (the same as a fleet of those two alone)."""
    monkeypatch.setattr(load, "load", _no_driver_load)
    made = run_cli(["ops", bad_fleet(tmp_path / "bad"), *JSON])
    for host in ("host002", "host003", "host004"):
        assert sum(host in line for line in made.stderr.splitlines()) == 1, made.stderr
    good = run_cli(["ops", fleet(tmp_path / "good", 2), *JSON])
    assert json.loads(made.stdout)["rows"] == json.loads(good.stdout)["rows"]
