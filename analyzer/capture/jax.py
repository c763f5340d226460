"""JAX capture: profile chosen training steps with `jax.profiler`, as runlens reads them
(`profile` and `profiled`, importable as runlens.analyzer.capture.jax):

    with profile("logs/run1", steps=(3, 11)) as prof:   # around the training loop
        for step in range(n):
            with prof.step(step) as s:                   # and around each step
                state, loss = s.keep(train_step(state, batch))

or, for a step function called once per step:

    train_step = profiled("logs/run1", steps=(3, 11))(jax.jit(train_step))

Steps before `first` run outside the trace, so compilation and the first calls' warm-up
stay out of the profile; the trace starts once the last of them is done (what its
`s.keep` was given is ready), so none of its device work lands in the first profiled
step. Each profiled step runs inside `jax.profiler.StepTraceAnnotation("train",
step_num=step)` (what runlens and xprof take as a step) and, unless `sync=False`, ends
by waiting for what `s.keep` was given (the decorator keeps the step's result): JAX
dispatches asynchronously, and without the wait a step's kernels run during the next
step's marker and the trace can stop before the last ones ran.
The trace is written to `<logdir>/plugins/profile/<run>/<host>.xplane.pb`; give runlens the
logdir (`analyze advise logs/run1`). With several processes (`jax.distributed`), each
writes to `<logdir>/worker<process index>/` and records the process count there
(analyzer/capture/job.py), so a shared logdir opens as one job.

Command buffers (JAX on GPU). XLA runs a step's kernels inside CUDA graphs ("command
buffers") by default. The profiler then records, for every kernel launched from a command
buffer, the command buffer (`hlo_op` = `command_buffer_N`) instead of the HLO instruction
it ran, so a kernel is tied to the user's scope and code line only by its own name (a
fusion's kernel carries the fusion's name) and the module's schedule; library kernels
(cuBLAS/cuDNN gemms) have no HLO name. For exact attribution of every kernel, profile a run
with command buffers off: `XLA_FLAGS=--xla_gpu_enable_command_buffer=` in the environment
before JAX starts (set it in the shell: it is read when the GPU backend starts). That runs
the same kernels, launched one by one, so step times grow a little (more launches).

Capture code never stops training: any failure of the profiler (a trace already running,
a full disk, no profiler in this jaxlib) logs one warning and turns profiling off; the
step's own exceptions pass through unchanged.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger("runlens.capture")
STEP_NAME = "train"  # the step marker runlens and xprof look for

F = TypeVar("F", bound=Callable[..., Any])


def _check_steps(steps: tuple[int, int]) -> tuple[int, int]:
    first, last = steps
    if not (isinstance(first, int) and isinstance(last, int) and 0 <= first < last):
        raise ValueError(f"steps must be (first, last) with 0 <= first < last, got {steps!r}")
    return first, last


class Step:
    """What `prof.step(n)` yields: `keep(x)` names what the step waits for."""

    def __init__(self) -> None:
        self.kept: Any = None

    def keep(self, value: Any) -> Any:
        """Remember `value` (arrays or a pytree of them): the step ends when it is ready.
        Returns `value`."""
        self.kept = value
        return value


class StepProfiler:
    """Profiles steps [first, last): `with prof.step(n) as s:` around each step."""

    def __init__(self, logdir: str | Path, steps: tuple[int, int], sync: bool = True) -> None:
        self.logdir = Path(logdir)  # <logdir>/worker<k> once JAX runs several processes
        self.task: tuple[int, int] | None = None
        self.first, self.last = _check_steps(steps)
        self.sync = sync
        self.active = False
        self.disabled = False
        self.done = False
        self._last_kept: Any = None

    def _fail(self, what: str, error: BaseException) -> None:
        if not self.disabled:
            log.warning("runlens: %s failed in %s (%s: %s); profiling is off, training "
                        "goes on", what, self.logdir, type(error).__name__, error)
        self.disabled = True

    def _start(self) -> None:
        if self.disabled or self.active or self.done:
            return
        # The previous (warm-up) step may still run on the device: let it finish outside
        # the trace, or its work lands in the first profiled step.
        self._wait(self._last_kept)
        self._last_kept = None
        try:
            import jax

            from . import job

            # Several processes (jax.distributed): each to <logdir>/worker<index>, with
            # the job's process count recorded there (analyzer/capture/job.py).
            self.task = job.jax_task()
            self.logdir = job.worker_logdir(self.logdir, self.task)
            jax.profiler.start_trace(str(self.logdir))
            self.active = True
        except Exception as e:
            self._fail("starting the JAX profiler", e)

    def _wait(self, value: Any) -> None:
        if value is None:
            return
        try:
            import jax

            jax.block_until_ready(value)
        except Exception as e:
            self._fail("waiting for the step's results", e)

    def stop(self) -> None:
        """Stop the trace (after waiting for the last kept result) and write it."""
        if not self.active:
            return
        self.active, self.done = False, True
        self._wait(self._last_kept)
        self._last_kept = None
        try:
            import jax

            from . import job

            jax.profiler.stop_trace()
            run = job.newest_run(self.logdir)
            if run is not None:
                job.record(run, self.task, "jax")
        except Exception as e:
            self._fail("writing the profile", e)

    def _annotation(self, step: int) -> Any:
        try:
            import jax

            ann = jax.profiler.StepTraceAnnotation(STEP_NAME, step_num=int(step))
            ann.__enter__()
            return ann
        except Exception as e:
            self._fail("marking a step", e)
            return None

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[Step]:
        """Around one training step numbered `step`; profiled when first <= step < last."""
        handle = Step()
        if step == self.first:
            self._start()
        if not (self.active and self.first <= step < self.last):
            yield handle
            self._last_kept = handle.kept if not self.done else None
            return
        ann = self._annotation(step)
        try:
            yield handle
        finally:
            if self.sync:
                self._wait(handle.kept)
            self._last_kept = handle.kept
            if ann is not None:
                try:
                    ann.__exit__(None, None, None)
                except Exception as e:
                    self._fail("marking a step", e)
            if step + 1 >= self.last:
                self.stop()


@contextlib.contextmanager
def profile(logdir: str | Path, steps: tuple[int, int] = (3, 8),
            sync: bool = True) -> Iterator[StepProfiler]:
    """Around a training loop: profiles steps [first, last) marked by `prof.step(n)`; the
    trace stops at the last one, or when the loop ends before it."""
    prof = StepProfiler(logdir, steps, sync)
    try:
        yield prof
    finally:
        prof.stop()


def profiled(logdir: str | Path, steps: tuple[int, int] = (3, 8),
             sync: bool = True) -> Callable[[F], F]:
    """Decorator for a step function called once per training step: its calls are
    numbered from 0, calls [first, last) are profiled, each waits for its result
    (unless sync=False). `wrapper.profiler.stop()` ends the trace early."""

    def wrap(fn: F) -> F:
        prof = StepProfiler(logdir, steps, sync)
        calls = [0]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            n = calls[0]
            calls[0] += 1
            with prof.step(n) as s:
                return s.keep(fn(*args, **kwargs))

        wrapper.profiler = prof  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return wrap
