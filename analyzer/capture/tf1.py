"""The capture hook: runs inside the training process and dumps raw RunMetadata.

This is the only engine module that imports TensorFlow. It does as little as possible on
the training side: on a traced step it asks the session for FULL_TRACE with partition
graphs and writes `RunMetadata.SerializeToString()` to steps/step-N.pb; it never parses
or converts traces (that is the offline engine's job). Untraced steps add nothing to the
session.run (tf.train.ProfilerHook fetches the global step on every run; we predict it and
read it only on traced steps). Any failure (read-only directory, disk full, an
unexpected error) logs one warning and turns capturing off: training always goes on.

Steps are named by the global step. A graph without one, or whose global step does not
advance (created but not passed to minimize()), gets one warning naming the fix at the
first step that shows it, and its traced steps are named by the hook's own count of
session.run calls instead (so nothing is lost or overwritten). While a step is traced
on CPU, TensorFlow's own per-step log lines are quieted (analyzer.capture.logs).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tensorflow as tf

from ..rundir import RunDirWriter
from .logs import TfLogQuieter

log = logging.getLogger("runlens.capture")

NO_GLOBAL_STEP = (
    "runlens: the graph has no global step; traced steps are named by this hook's count "
    "of session.run calls. To name them by training step, create it with "
    "tf.compat.v1.train.get_or_create_global_step() and pass it to "
    "optimizer.minimize(loss, global_step=...)")
STUCK_GLOBAL_STEP = (
    "runlens: the global step did not advance over %d session.run calls (it stays at %d), "
    "so every trace would be step %d; traced steps are named by this hook's count of "
    "session.run calls from here. Increment it every step: pass it to "
    "optimizer.minimize(loss, global_step=...) or run tf.compat.v1.assign_add(global_step, 1)")

_TRACE_OPTIONS = dict(trace_level=tf.compat.v1.RunOptions.FULL_TRACE, output_partition_graphs=True)


class StepTimer:
    """When to trace: every N steps or every N seconds (tf.train.SecondOrStepTimer's rules).

    Kept here, not borrowed from TensorFlow, so the clock can be injected in tests.
    """

    def __init__(
        self,
        every_steps: int | None = None,
        every_secs: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if (every_steps is None) == (every_secs is None):
            raise ValueError("Exactly one of save_steps and save_secs should be set.")
        if every_steps is not None and (not isinstance(every_steps, int) or every_steps < 1):
            raise ValueError(f"save_steps must be a positive integer, got {every_steps!r}")
        if every_secs is not None and not every_secs > 0:
            raise ValueError(f"save_secs must be positive, got {every_secs!r}")
        self._every_steps = every_steps
        self._every_secs = every_secs
        self._clock = clock
        self._last_step: int | None = None
        self._last_time: float | None = None

    def should_trigger_for_step(self, step: int) -> bool:
        if self._last_step is None:
            return True
        if self._last_step == step:
            return False
        if self._every_secs is not None and self._last_time is not None:
            if self._clock() >= self._last_time + self._every_secs:
                return True
        if self._every_steps is not None and step >= self._last_step + self._every_steps:
            return True
        return False

    def update_last_triggered_step(self, step: int) -> None:
        self._last_time = self._clock()
        self._last_step = step


def _op_log_bytes(graph: tf.Graph) -> bytes:
    """OpLogProto of `graph`: op types, float_ops, parameter counts and Python code traces.

    tfprof's own logger computes these (registered flops statistics, `_trainable_variables`
    types, `op.traceback`), so our op log is what tfprof itself would see.
    """
    from tensorflow.python.profiler import tfprof_logger

    op_log = tfprof_logger.merge_default_with_oplog(graph, add_trace=True)
    return bytes(op_log.SerializeToString(deterministic=True))


def _graph_bytes(graph: tf.Graph) -> bytes:
    # add_shapes=True records static output shapes (`_output_shapes`), as tfprof does;
    # deterministic map order keeps the bytes stable across captures of one graph.
    return bytes(graph.as_graph_def(add_shapes=True).SerializeToString(deterministic=True))


class _GraphFileError(Exception):
    """Writing one of the graph files failed: which (for the warning) and why."""

    def __init__(self, what: str, error: BaseException) -> None:
        super().__init__(what, error)
        self.what, self.error = what, error


class _GraphFiles:
    """Writes graph.pb and op_log.pb once per graph version (plain Sessions may grow graphs)."""

    def __init__(self, writer: RunDirWriter) -> None:
        self._writer = writer
        self._version: int | None = None

    def ensure(self, graph: tf.Graph) -> None:
        version = graph.version
        if version == self._version:
            return
        try:
            self._writer.write_graph(_graph_bytes(graph))
        except OSError as e:
            raise _GraphFileError("writing graph.pb", e) from e
        try:
            self._writer.write_op_log(_op_log_bytes(graph))
        except OSError as e:
            raise _GraphFileError("writing op_log.pb", e) from e
        except Exception as e:  # tfprof's logger failing must not cost us graph.pb
            log.warning("runlens: could not build op_log.pb (%s); code view will be empty", e)
        self._version = version


def _step_counter(graph: tf.Graph) -> Any:
    """The counter that names traced steps.

    The global step, read as tf.train.ProfilerHook reads it; but in an evaluation loop
    (Estimator-style, with an `eval_step` variable) the global step stands still, so the
    eval step names the steps instead.
    """
    from tensorflow.python.training import training_util

    eval_steps = graph.get_collection(tf.compat.v1.GraphKeys.EVAL_STEP)
    if eval_steps:
        return eval_steps[0].read_value()
    return training_util._get_or_create_global_step_read()


class CaptureHook(tf.compat.v1.train.SessionRunHook):
    """Dumps the raw RunMetadata of every N-th step (or every N seconds) into a run dir.

    Args:
      save_steps: trace every N steps. Exactly one of save_steps and save_secs.
      save_secs: trace at most every N seconds.
      output_dir: the run directory (created if missing). Use one directory per graph:
        training and evaluation graphs go in different run dirs.
      clock: a monotonic clock in seconds, for tests.
      quiet_tf_logs: while a step is traced on CPU, hide TensorFlow's own per-step log
        lines ("Profiler session ...", "GPU trace was not collected.").

    Works with MonitoredTrainingSession, MonitoredSession (Estimator-style train and
    evaluation loops) and anything else that drives SessionRunHooks.
    """

    def __init__(
        self,
        save_steps: int | None = None,
        save_secs: float | None = None,
        output_dir: str | Path = "",
        clock: Callable[[], float] = time.monotonic,
        quiet_tf_logs: bool = True,
    ) -> None:
        self._timer = StepTimer(every_steps=save_steps, every_secs=save_secs, clock=clock)
        self._quieter = TfLogQuieter(tf) if quiet_tf_logs else None
        self._own_steps = False  # steps named by our run count (no or a stuck global step)
        self._runs = 0  # session.run calls seen since begin()
        self._last_read: tuple[int, int] | None = None  # (run count, global step) read
        self._output_dir = Path(output_dir or ".")
        self._writer: RunDirWriter | None = None
        self._graph_files: _GraphFiles | None = None
        self._disabled = False
        self._step_tensor: Any = None
        self._next_step: int | None = None
        self._request = False

    # -- failure handling: one warning, then the hook stays out of the way
    def _fail(self, what: str, error: BaseException) -> None:
        if not self._disabled:
            log.warning(
                "runlens: %s failed in %s (%s: %s); capturing is off, training goes on",
                what, self._output_dir, type(error).__name__, error,
            )
        self._disabled = True

    def _ensure_writer(self) -> RunDirWriter:
        if self._writer is None:
            self._writer = RunDirWriter(self._output_dir, tf_version=tf.__version__)
            self._graph_files = _GraphFiles(self._writer)
        return self._writer

    def begin(self) -> None:
        self._next_step = None
        self._request = False
        self._runs = 0
        self._last_read = None
        self._own_steps = False
        try:
            self._step_tensor = _step_counter(tf.compat.v1.get_default_graph())
            self._own_steps = self._step_tensor is None
        except Exception as e:
            self._fail("finding the step counter", e)

    def end(self, session: Any) -> None:
        self._restore_logs()

    def _restore_logs(self) -> None:
        if self._quieter is not None:
            try:
                self._quieter.restore()
            except Exception:  # noqa: BLE001 (never fail the training for quiet logs)
                self._quieter = None

    def _read_step(self, session: Any) -> int:
        """The step this run completed: the global step, or our run count (see the module
        docstring), switching to the count, with one warning, when the global step does not
        advance between two reads."""
        if self._own_steps:
            if self._last_read is None:
                log.warning(NO_GLOBAL_STEP)
                self._last_read = (self._runs, -1)
            return self._runs
        step = int(session.run(self._step_tensor))
        if self._last_read is not None:
            runs, before = self._last_read
            if step == before and self._runs > runs:
                log.warning(STUCK_GLOBAL_STEP, self._runs - runs + 1, step, step)
                self._own_steps = True
                return self._runs
        self._last_read = (self._runs, step)
        return step

    def after_create_session(self, session: Any, coord: Any) -> None:
        if self._disabled:
            return
        try:
            self._ensure_writer()
            assert self._graph_files is not None
            self._graph_files.ensure(session.graph)
        except _GraphFileError as e:
            self._fail(e.what, e.error)
        except Exception as e:
            self._fail("writing the graph files", e)

    def before_run(self, run_context: Any) -> Any:
        """Untraced steps ask the session for nothing: the step counter is read after the
        first run (to start the timer) and after traced runs; in between it is predicted
        (+1 per run), and every traced run re-synchronizes it."""
        if self._disabled:
            return None
        self._restore_logs()  # a traced run that raised never reached after_run
        try:
            if self._next_step is None:
                self._request = False
                return None
            self._request = self._timer.should_trigger_for_step(self._next_step)
            if not self._request:
                return None
            if self._quieter is not None:
                self._quieter.quiet()
            return tf.compat.v1.train.SessionRunArgs(
                None, options=tf.compat.v1.RunOptions(**_TRACE_OPTIONS))
        except Exception as e:
            self._fail("requesting a trace", e)
            return None

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self._restore_logs()
        if self._disabled:
            return
        self._runs += 1
        try:
            if self._next_step is None:
                # The timer starts at the step before the first run, as in ProfilerHook.
                # ProfilerHook fetches the counter in the run that increments it, which
                # races with the increment unless the model reads it first (as Estimator
                # builds it); reading after the run gives the same step without the race.
                step = self._read_step(run_context.session)
                self._timer.update_last_triggered_step(step - 1)
            elif self._request:
                step = self._read_step(run_context.session)
                self._timer.update_last_triggered_step(step)
                self._save(step, run_values.run_metadata)
            else:
                step = self._next_step
            self._next_step = step + 1
        except Exception as e:
            self._fail(f"saving step {self._next_step}", e)

    def _save(self, step: int, run_metadata: Any) -> None:
        writer = self._ensure_writer()
        writer.write_step(step, run_metadata.SerializeToString(), wall_time=time.time())


_writers: dict[Path, tuple[RunDirWriter, _GraphFiles]] = {}
_trace_step_quieter = TfLogQuieter(tf)


def trace_step(
    sess: Any, fetches: Any, run_dir: str | Path, step: int, feed_dict: Any = None
) -> Any:
    """Run `fetches` once with FULL_TRACE and save the step's RunMetadata into `run_dir`.

    For plain tf.compat.v1.Session loops without hooks. Returns what `sess.run` returns;
    errors of the run itself propagate, a failure to write only logs a warning.
    """
    run_metadata = tf.compat.v1.RunMetadata()
    quieter = _trace_step_quieter
    try:
        quieter.quiet()
    except Exception:  # noqa: BLE001 (never fail the training for quiet logs)
        pass
    try:
        result = sess.run(
            fetches,
            feed_dict=feed_dict,
            options=tf.compat.v1.RunOptions(**_TRACE_OPTIONS),
            run_metadata=run_metadata,
        )
    finally:
        try:
            quieter.restore()
        except Exception:  # noqa: BLE001
            pass
    key = Path(run_dir).resolve()
    try:
        if key not in _writers:
            writer = RunDirWriter(key, tf_version=tf.__version__)
            _writers[key] = (writer, _GraphFiles(writer))
        writer, graph_files = _writers[key]
        graph_files.ensure(sess.graph)
        writer.write_step(int(step), run_metadata.SerializeToString(), wall_time=time.time())
    except Exception as e:
        log.warning("runlens: saving step %s to %s failed (%s: %s); training goes on",
                    step, run_dir, type(e).__name__, e)
    return result
