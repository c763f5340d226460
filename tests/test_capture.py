"""The capture hook: ProfilerHook's step rules, atomic files, and never crashing training."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

tf = pytest.importorskip("tensorflow")

from runlens.analyzer.capture.tf1 import CaptureHook, StepTimer, trace_step  # noqa: E402
from runlens.analyzer.proto import config_pb2  # noqa: E402
from runlens.analyzer.rundir import STEP_FILE_RE, find_runs  # noqa: E402

TRAIN = Path(__file__).with_name("capture_train.py")


# ----------------------------------------------------------------------------- timer rules


@pytest.mark.parametrize("kwargs", [{}, {"every_steps": 2, "every_secs": 1.0}])
def test_exactly_one_of_save_steps_and_save_secs(kwargs):
    with pytest.raises(ValueError, match="Exactly one"):
        StepTimer(**kwargs)
    with pytest.raises(ValueError, match="Exactly one"):
        CaptureHook(
            save_steps=kwargs.get("every_steps"), save_secs=kwargs.get("every_secs"),
            output_dir="unused",
        )


@pytest.mark.parametrize("bad", [0, -3])
def test_save_steps_must_be_positive(bad):
    with pytest.raises(ValueError, match="positive"):
        CaptureHook(save_steps=bad, output_dir="unused")


def test_save_secs_follows_the_clock_not_the_steps():
    now = [100.0]
    timer = StepTimer(every_secs=10.0, clock=lambda: now[0])
    assert timer.should_trigger_for_step(1)  # never triggered: trigger
    timer.update_last_triggered_step(1)
    assert not timer.should_trigger_for_step(1)  # same step never twice
    assert not timer.should_trigger_for_step(50)  # many steps, no time: no
    now[0] = 109.9
    assert not timer.should_trigger_for_step(51)
    now[0] = 110.0
    assert timer.should_trigger_for_step(52)


def _train_with_hooks(hooks, steps):
    """Train a tiny model; `hooks` may be a callable, to build hooks inside the graph."""
    from tensorflow.python.training import training_util

    with tf.Graph().as_default():
        if callable(hooks):
            hooks = hooks()
        gs = tf.compat.v1.train.get_or_create_global_step()
        # As Estimator does: the model runs after the step read that hooks fetch, so
        # ProfilerHook's fetched (stale) step never races with the increment.
        with tf.control_dependencies([training_util._get_or_create_global_step_read()]):
            x = tf.random.normal([8, 4])
            w = tf.compat.v1.get_variable("w", [4, 2])
            loss = tf.reduce_sum(tf.matmul(x, w))
            optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)
            train = optimizer.minimize(loss, global_step=gs)
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks) as sess:
            for _ in range(steps):
                sess.run(train)


def _captured_steps(run_dir: Path) -> list[int]:
    return sorted(
        int(m.group(1))
        for p in (run_dir / "steps").iterdir()
        if (m := STEP_FILE_RE.match(p.name))
    )


@pytest.mark.parametrize("save_steps", [1, 3])
def test_save_steps_traces_the_same_steps_as_profiler_hook(tmp_path, save_steps):
    """tf.train.ProfilerHook, run in the same session, is the oracle for which steps trace."""
    def hooks():
        return [
            CaptureHook(save_steps=save_steps, output_dir=tmp_path / "run"),
            tf.compat.v1.train.ProfilerHook(save_steps=save_steps, output_dir=str(tmp_path / "tl")),
        ]

    _train_with_hooks(hooks, steps=11)
    expected = sorted(int(p.stem.split("-")[1]) for p in (tmp_path / "tl").glob("timeline-*.json"))
    assert expected, "ProfilerHook traced nothing: the oracle is broken"
    assert _captured_steps(tmp_path / "run") == expected


def test_save_secs_with_a_fake_clock_in_a_real_session(tmp_path):
    now = [0.0]

    class TickingHook(tf.compat.v1.train.SessionRunHook):
        def after_run(self, run_context, run_values):
            now[0] += 4.0  # every step takes "4 seconds"

    hook = CaptureHook(save_secs=10, output_dir=tmp_path, clock=lambda: now[0])
    _train_with_hooks([hook, TickingHook()], steps=12)
    steps = _captured_steps(tmp_path)
    # First step only starts the timer; then one trace each time 10 s (3 steps) have passed.
    assert steps == [4, 7, 10]


def test_run_dir_layout_and_manifest(tmp_path):
    _train_with_hooks([CaptureHook(save_steps=2, output_dir=tmp_path)], steps=7)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["format"] == "runlens-run" and manifest["version"] == 1
    assert manifest["tf_version"] == tf.__version__
    listed = [e["step"] for e in manifest["steps"]]
    assert listed == _captured_steps(tmp_path) == [2, 4, 6]
    for entry in manifest["steps"]:
        raw = (tmp_path / entry["file"]).read_bytes()
        assert len(raw) == entry["bytes"]
        md = config_pb2.RunMetadata.FromString(raw)
        assert md.step_stats.dev_stats and md.partition_graphs  # FULL_TRACE + partition graphs
    graph = tf.compat.v1.GraphDef.FromString((tmp_path / "graph.pb").read_bytes())
    assert any(n.op == "MatMul" for n in graph.node)
    from tensorflow.core.profiler import tfprof_log_pb2

    op_log = tfprof_log_pb2.OpLogProto.FromString((tmp_path / "op_log.pb").read_bytes())
    matmul = [e for e in op_log.log_entries if e.name == "MatMul"]
    assert matmul and matmul[0].float_ops == 2 * 8 * 4 * 2  # static shapes: flops known
    assert any(e.code_def.traces for e in op_log.log_entries)
    assert sorted(find_runs(tmp_path)[0].steps) == [2, 4, 6]


def test_trace_step_for_plain_sessions(tmp_path):
    with tf.Graph().as_default():
        a = tf.compat.v1.placeholder(tf.float32, [2, 2])
        out = tf.matmul(a, a, name="square")
        with tf.compat.v1.Session() as sess:
            for step in (5, 6):
                result = trace_step(sess, out, tmp_path, step, feed_dict={a: [[1, 2], [3, 4]]})
    assert result.tolist() == [[7.0, 10.0], [15.0, 22.0]]
    assert _captured_steps(tmp_path) == [5, 6]
    assert (tmp_path / "graph.pb").is_file() and (tmp_path / "op_log.pb").is_file()


def test_evaluation_loop_names_steps_by_eval_step(tmp_path):
    """In an Estimator-style evaluation the global step stands still; eval_step advances."""
    from tensorflow.python.training import evaluation

    with tf.Graph().as_default():
        gs = tf.compat.v1.train.get_or_create_global_step()
        value = tf.reduce_sum(tf.random.normal([4, 4]))
        mean, update = tf.compat.v1.metrics.mean(value)
        init = tf.group(tf.compat.v1.global_variables_initializer(),
                        tf.compat.v1.local_variables_initializer())
        eval_step = evaluation._get_or_create_eval_step()
        eval_ops = [update, tf.compat.v1.assign_add(eval_step, 1)]
        hook = CaptureHook(save_steps=1, output_dir=tmp_path)
        scaffold = tf.compat.v1.train.Scaffold(init_op=init)
        creator = tf.compat.v1.train.ChiefSessionCreator(scaffold=scaffold)
        with tf.compat.v1.train.MonitoredSession(creator, hooks=[hook]) as sess:
            for _ in range(6):
                sess.run(eval_ops)
        assert gs is not None and mean is not None
    assert _captured_steps(tmp_path) == [2, 3, 4, 5, 6]


def test_hook_failure_inside_a_session_is_one_warning(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    hook = CaptureHook(save_steps=1, output_dir=blocker / "run")
    with caplog.at_level(logging.WARNING, logger="runlens.capture"):
        _train_with_hooks([hook], steps=5)  # training finishes
    warnings = [r for r in caplog.records if r.name == "runlens.capture"]
    assert len(warnings) == 1 and "capturing is off" in warnings[0].getMessage()


def _train_without_a_working_global_step(hooks, steps, create_step):
    """A model whose optimizer never increments the global step (`create_step`: it
    exists but stands still; else there is none)."""
    with tf.Graph().as_default():
        if create_step:
            tf.compat.v1.train.get_or_create_global_step()
        x = tf.random.normal([8, 4])
        w = tf.compat.v1.get_variable("w", [4, 2])
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
            tf.reduce_sum(tf.matmul(x, w)))
        creator = tf.compat.v1.train.ChiefSessionCreator()
        with tf.compat.v1.train.MonitoredSession(creator, hooks=hooks) as sess:
            for _ in range(steps):
                sess.run(train)


@pytest.mark.parametrize("create_step, says", [
    (False, "has no global step"), (True, "did not advance"),
])
def test_a_missing_or_stuck_global_step_warns_once_and_traces_every_nth_run(
        tmp_path, caplog, create_step, says):
    """Before: no global step captured nothing after one warning; a stuck one traced one
    step of many (each trace overwrote step 0) without a word. Now: one warning naming
    the fix, and traces named by the hook's run count, every save_steps runs as usual."""
    hook = CaptureHook(save_steps=2, output_dir=tmp_path)
    with caplog.at_level(logging.WARNING, logger="runlens.capture"):
        _train_without_a_working_global_step([hook], steps=7, create_step=create_step)
    warnings = [r.getMessage() for r in caplog.records if r.name == "runlens.capture"]
    assert len(warnings) == 1 and says in warnings[0], warnings
    assert "global_step=" in warnings[0] and "get_or_create_global_step" in warnings[0] \
        or "assign_add" in warnings[0]
    assert _captured_steps(tmp_path) == [2, 4, 6]


# ----------------------------------------------------------------------------- subprocesses


def _train_cmd(out: Path, *args: str) -> list[str]:
    return [sys.executable, str(TRAIN), str(out), *args]


_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
# Root ignores permission bits unless it gives up CAP_DAC_OVERRIDE: then chmod 0555 is real.
_NO_DAC = ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
           "--bounding-set=-dac_override,-dac_read_search"]


def _run(cmd: list[str], timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_ENV)


def _runlens_warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "runlens:" in line]


def test_read_only_output_dir_training_finishes_with_one_warning(tmp_path):
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    cmd = _train_cmd(out, "--steps", "8")
    if os.geteuid() == 0:
        assert shutil.which("setpriv"), "setpriv (util-linux) is needed to test as root"
        cmd = _NO_DAC + cmd
    proc = _run(cmd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "TRAINED 8" in proc.stdout
    warnings = _runlens_warnings(proc.stderr)
    assert len(warnings) == 1, warnings
    assert "capturing is off" in warnings[0] and str(out) in warnings[0]
    assert list(out.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_disk_full_mid_training_stops_capture_keeps_complete_steps(tmp_path):
    """A real ENOSPC: train into a tmpfs with room for the graph files and a few steps."""
    ref = tmp_path / "ref"
    assert _run(_train_cmd(ref, "--steps", "3")).returncode == 0
    fixed = sum((ref / f).stat().st_size for f in ("graph.pb", "op_log.pb", "manifest.json"))
    step_size = max(p.stat().st_size for p in (ref / "steps").iterdir())
    size_kb = (fixed + 4 * step_size) // 1024 + 8
    mnt, out = tmp_path / "mnt", tmp_path / "out"
    mnt.mkdir()
    train = " ".join(_train_cmd(mnt / "run", "--steps", "40"))
    script = (f"mount -t tmpfs -o size={size_kb}k tmpfs {mnt} && {train}; rc=$?; "
              f"cp -a {mnt}/run {out}; exit $rc")
    proc = _run(["unshare", "-m", "sh", "-c", script])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "TRAINED 40" in proc.stdout
    warnings = _runlens_warnings(proc.stderr)
    assert len(warnings) == 1 and "No space left" in warnings[0], warnings
    steps = _captured_steps(out)
    assert 0 < len(steps) < 40
    for step in steps:
        md = config_pb2.RunMetadata.FromString((out / "steps" / f"step-{step:08d}.pb").read_bytes())
        assert md.step_stats.dev_stats


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_disk_full_writing_op_log_names_op_log(tmp_path):
    """Room for graph.pb but not op_log.pb: the one warning names the file that failed."""
    ref = tmp_path / "ref"
    assert _run(_train_cmd(ref, "--steps", "1")).returncode == 0
    graph, op_log = ((ref / f).stat().st_size for f in ("graph.pb", "op_log.pb"))
    size_kb = -(-graph // 4096) * 4 + 4  # graph.pb's pages and one more: op_log.pb is bigger
    assert op_log > 4096 * 2, "the model's op log must not fit in the spare page"
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    train = " ".join(_train_cmd(mnt / "run", "--steps", "3"))
    proc = _run(["unshare", "-m", "sh", "-c",
                 f"mount -t tmpfs -o size={size_kb}k tmpfs {mnt} && {train}"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    warnings = _runlens_warnings(proc.stderr)
    assert len(warnings) == 1 and "writing op_log.pb failed" in warnings[0], warnings


def test_sigkill_mid_training_leaves_only_whole_step_files(tmp_path):
    """Kill the trainer at several moments; every step file left must parse and be complete.

    The first kill comes as soon as a file appears in steps/ (usually the temporary file of
    the first step, mid-write); the others after a few whole steps.
    """
    for attempt, min_files in enumerate((1, 4, 9)):
        out = tmp_path / f"run{attempt}"
        proc = subprocess.Popen(_train_cmd(out, "--forever", "--width", "256"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_ENV)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if (out / "steps").is_dir() and len(os.listdir(out / "steps")) >= min_files:
                    break
                time.sleep(0.001)
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
        steps = _captured_steps(out)
        if attempt > 0:
            assert steps, f"attempt {attempt}: nothing captured before the kill"
        if (out / "manifest.json").exists():
            manifest = json.loads((out / "manifest.json").read_text())  # always whole JSON
            sizes = {e["step"]: e["bytes"] for e in manifest["steps"]}
        else:
            sizes = {}
        for step in steps:
            raw = (out / "steps" / f"step-{step:08d}.pb").read_bytes()
            md = config_pb2.RunMetadata.FromString(raw)
            assert md.step_stats.dev_stats and md.partition_graphs
            if step in sizes:
                assert sizes[step] == len(raw)
        if steps:  # the engine reads the killed run: stray temporary files are ignored
            assert sorted(find_runs(out)[0].steps) == steps


def test_untraced_runs_add_nothing_to_session_run(tmp_path):
    """Only traced runs touch session.run's arguments (the step counter is read after the
    first run, in a run of its own); ProfilerHook fetches the global step on every run."""
    hook = CaptureHook(save_steps=4, output_dir=tmp_path)
    requests = []
    original = hook.before_run

    def recording(run_context):
        args = original(run_context)
        requests.append(args)
        return args

    hook.before_run = recording
    _train_with_hooks([hook], steps=12)
    asked = [a for a in requests if a is not None]
    traced = _captured_steps(tmp_path)
    assert traced == [4, 8, 12]
    assert len(asked) == len(traced)


def test_steps_do_not_race_with_the_increment_when_the_model_ignores_the_step_read(tmp_path):
    """Without Estimator's control dependency, a step fetched in the run that increments it
    may be read before or after the increment (ProfilerHook then traces 3, 6, 8, 11 or
    3, 6, 9 from run to run). The hook reads the counter after runs only, so the traced
    steps are the same every time."""
    for attempt in range(4):
        run_dir = tmp_path / f"run{attempt}"
        with tf.Graph().as_default():
            gs = tf.compat.v1.train.get_or_create_global_step()
            w = tf.compat.v1.get_variable("w", [64, 64])
            loss = tf.reduce_sum(tf.matmul(tf.random.normal([64, 64]), w))
            train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
            hook = CaptureHook(save_steps=3, output_dir=run_dir)
            with tf.compat.v1.train.MonitoredTrainingSession(hooks=[hook]) as sess:
                for _ in range(11):
                    sess.run(train)
        assert _captured_steps(run_dir) == [3, 6, 9]


@pytest.mark.parametrize("tf_logs", [False, True])
def test_tensorflow_per_step_log_lines_are_quieted_while_tracing_on_cpu(tmp_path, tf_logs):
    """TensorFlow logs "Profiler session ..." and "GPU trace was not collected." for every
    traced step on CPU; with the hook's default they are gone (and come back with
    quiet_tf_logs=False, which shows the test sees them)."""
    env = dict(_ENV, TF_CPP_MIN_LOG_LEVEL="0")
    cmd = _train_cmd(tmp_path / "run", "--steps", "4", *(["--tf-logs"] if tf_logs else []))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0 and "TRAINED 4" in proc.stdout, proc.stderr[-2000:]
    assert _captured_steps(tmp_path / "run") == [2, 3, 4]
    noise = proc.stderr.count("GPU trace was not collected")
    assert noise == (3 if tf_logs else 0), proc.stderr[-2000:]
