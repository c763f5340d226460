"""TF2 capture: profile chosen steps with tf.profiler and keep the function graphs.

TF2's profiler writes `<logdir>/plugins/profile/<run>/<host>.xplane.pb`, whose op events
are named by graph node (`scope/node:Type`) but carry no graph. While profiling, this
module also turns on TF's graph collection and, when the profile is written, saves the
collected function graphs (a RunMetadata with `function_graphs`, partition graphs after
Grappler, whose node names are the xplane's) beside it as `runlens.graphs.pb`, so that
runlens gets the dataflow graph and critical path of TF2 runs too.

One line for a user:

    model.fit(..., callbacks=[ProfileCallback("logs/run1", batches=(5, 8))])   # Keras

    with profile("logs/run1", steps=(5, 8)) as prof:     # custom loop: around the loop
        for step in range(n):
            with prof.step(step):                          # and around each step
                train_step(x, y)

Graph collection must be on when a tf.function is first traced (TF collects graphs when it
instantiates a function, not when it runs one), so both start collecting before the first
step and profile only the chosen steps [first, last). Each profiled step is wrapped in a
`train` step marker (`step_num`), as TF's own guide says. In a job of several workers
(TF_CONFIG) each worker profiles to `<logdir>/worker<task>/` and records the job's worker
count there (analyzer/capture/job.py): runlens opens `<logdir>` as one job. The rules of
the TF1 hook hold: files are written atomically, and any failure logs one warning and
turns capturing off; training always goes on.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import tensorflow as tf

from ..rundir import atomic_write
from . import job

log = logging.getLogger("runlens.capture")

GRAPHS_FILE = "runlens.graphs.pb"  # beside the <host>.xplane.pb files of a profile run


def _context() -> Any:
    from tensorflow.python.eager import context

    return context.context()


class _Profiler:
    """One profiling session: start, step markers, stop and the graphs. Fails softly."""

    def __init__(self, logdir: str | Path) -> None:
        # In a job of several workers (TF_CONFIG), each profiles to <logdir>/worker<task>
        # and records the job's worker count (analyzer/capture/job.py).
        self.task = job.tf_task()
        self.logdir = job.worker_logdir(logdir, self.task)
        self.active = False
        self.disabled = False

    def _fail(self, what: str, error: BaseException) -> None:
        if not self.disabled:
            log.warning("runlens: %s failed in %s (%s: %s); profiling is off, training "
                        "goes on", what, self.logdir, type(error).__name__, error)
        self.disabled = True

    def collect(self) -> None:
        """Collect function graphs from now on (before the functions are first traced)."""
        try:
            _context().enable_graph_collection()
        except Exception as e:
            self._fail("collecting graphs", e)

    def start(self) -> None:
        if self.disabled or self.active:
            return
        try:
            tf.profiler.experimental.start(str(self.logdir))
            self.active = True
        except Exception as e:
            self._fail("starting the profiler", e)

    @contextlib.contextmanager
    def marker(self, step: int) -> Iterator[None]:
        """A `train` step marker around the block (only while profiling)."""
        trace = None
        if self.active:
            try:
                trace = tf.profiler.experimental.Trace("train", step_num=int(step), _r=1)
                trace.__enter__()
            except Exception as e:
                self._fail("marking a step", e)
                trace = None
        try:
            yield
        finally:
            if trace is not None:
                try:
                    trace.__exit__(None, None, None)
                except Exception as e:
                    self._fail("marking a step", e)

    def stop(self) -> None:
        if not self.active:
            return
        self.active = False
        ctx = None
        try:
            ctx = _context()
            tf.profiler.experimental.stop()
            run = job.newest_run(self.logdir)
            if run is None:
                raise RuntimeError("the profiler wrote no run folder")
            job.record(run, self.task, "tensorflow")
            metadata = ctx.export_run_metadata()
            if metadata is not None and metadata.function_graphs:
                atomic_write(run / GRAPHS_FILE, metadata.SerializeToString())
        except Exception as e:
            self._fail("writing the profile", e)
        finally:
            if ctx is not None:
                with contextlib.suppress(Exception):
                    ctx.disable_graph_collection()


def _check_steps(steps: tuple[int, int]) -> tuple[int, int]:
    first, last = steps
    if not (isinstance(first, int) and isinstance(last, int) and 0 <= first < last):
        raise ValueError(f"steps must be (first, last) with 0 <= first < last, got {steps!r}")
    return first, last


class StepProfiler:
    """What `profile` yields: `with prof.step(n):` around each training step."""

    def __init__(self, logdir: str | Path, steps: tuple[int, int]) -> None:
        self.first, self.last = _check_steps(steps)
        self._prof = _Profiler(logdir)
        self._prof.collect()

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[None]:
        if step == self.first:
            self._prof.start()
        if not self.first <= step < self.last:
            yield
            return
        with self._prof.marker(step):
            yield
        if step + 1 >= self.last:
            self._prof.stop()

    def close(self) -> None:
        self._prof.stop()  # the loop ended before the last profiled step


@contextlib.contextmanager
def profile(logdir: str | Path, steps: tuple[int, int] = (2, 5)) -> Iterator[StepProfiler]:
    """Around a custom training loop: profiles steps [first, last) marked by `prof.step`."""
    prof = StepProfiler(logdir, steps)
    try:
        yield prof
    finally:
        prof.close()


def _callback_base() -> type:
    try:
        import keras

        return keras.callbacks.Callback  # type: ignore[no-any-return]
    except Exception:  # Keras 2 inside TF
        return tf.keras.callbacks.Callback  # type: ignore[no-any-return]


class ProfileCallback(_callback_base()):  # type: ignore[misc]
    """Keras callback: profiles training batches [first, last) of the first epoch that
    reaches them (batches=(5, 8) profiles batches 5, 6 and 7), each under a `train` step
    marker numbered by the batch, and saves the function graphs beside the profile."""

    def __init__(self, logdir: str | Path, batches: tuple[int, int] = (2, 5)) -> None:
        super().__init__()
        self._first, self._last = _check_steps(batches)
        self._prof = _Profiler(logdir)
        self._marker: Any = None
        self._done = False

    def on_train_begin(self, logs: Any = None) -> None:
        self._prof.collect()  # before fit traces its train function

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self._done:
            return
        if batch == self._first:
            self._prof.start()
        if self._prof.active and self._first <= batch < self._last:
            self._marker = self._prof.marker(batch)
            self._marker.__enter__()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self._marker is not None:
            marker, self._marker = self._marker, None
            with contextlib.suppress(Exception):
                marker.__exit__(None, None, None)
        if self._prof.active and batch + 1 >= self._last:
            self._prof.stop()
            self._done = True

    def on_train_end(self, logs: Any = None) -> None:  # fewer batches than asked
        self.on_train_batch_end(self._last, logs)
