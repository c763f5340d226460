"""The Ray engine: one Ray task per part on the cluster in RAY_ADDRESS (as Ray's own
tools read it), else on a Ray started here for this command (node address 127.0.0.1, no
dashboard; tests and benchmarks run it in a loopback-only network namespace).

Ray is an optional dependency (`pip install 'runlens[ray]'`): without it, one line that
names the extra. The cluster's workers import runlens too (the same install on every
node), and when they are other machines the cache must be on storage they share with the
driver (--cache-dir)."""

from __future__ import annotations

import os
from typing import Any

from ..errors import RunlensError
from . import Each, HostResult, HostTask, Progress, handed

MISSING = "--engine ray needs Ray: pip install 'runlens[ray]'"


class RayMissing(RunlensError):
    """Ray is not installed (exit 2, one line)."""


class RayUnreachable(RunlensError):
    """The cluster in RAY_ADDRESS cannot be joined, or a local Ray cannot start."""


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayMissing(MISSING) from None
    return ray


def _connect(ray: Any) -> bool:
    """Connect to RAY_ADDRESS, else start a local Ray (its temp dir: $RAY_TMPDIR, Ray's
    own default otherwise). True when this call started it (and must shut it down)."""
    if ray.is_initialized():
        return False
    quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": "error"}
    address = os.environ.get("RAY_ADDRESS")
    temp = os.environ.get("RAY_TMPDIR")
    if not address:  # a Ray of our own, for this command, on loopback
        quiet.update(_node_ip_address="127.0.0.1", include_dashboard=False,
                     **({"_temp_dir": temp} if temp else {}))
    try:
        ray.init(**quiet)  # Ray reads RAY_ADDRESS itself: "auto", ray://, host:port
    except Exception as e:  # noqa: BLE001 - Ray's own errors: a cluster we cannot use
        first = (str(e).strip().splitlines() or [""])[0][:200]
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        raise RayUnreachable(f"--engine ray: cannot use {where}: {type(e).__name__}: "
                             f"{first}") from None
    return True


def _remote_read(task: HostTask) -> HostResult:
    import ray

    from .hosttask import read_host

    return read_host(task, ran_by=f"ray task {ray.get_runtime_context().get_task_id()}")


def run(tasks: list[HostTask], progress: Progress | None = None,
        each: Each | None = None) -> list[HostResult]:
    """Each task on the cluster (one CPU each); results in the tasks' order. A task that
    fails in Ray (its worker died, the node was lost) is that host's error."""
    ray = _ray()
    started = _connect(ray)
    try:
        remote = ray.remote(num_cpus=1, max_retries=1)(_remote_read)
        # each ref held until its result is handed, then let go (Ray frees the object)
        index = {remote.remote(task): i for i, task in enumerate(tasks)}
        results: list[HostResult | None] = [None] * len(tasks)
        pending, done = list(index), 0
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                i = index.pop(ref)
                results[i] = handed(i, _result(ray, ref, tasks[i]), each)
                done += 1
            if progress:
                progress(done, len(tasks))
    finally:
        if started:
            ray.shutdown()
    return [r for r in results if r is not None]


def _result(ray: Any, ref: Any, task: HostTask) -> HostResult:
    try:
        result: HostResult = ray.get(ref)
        return result
    except Exception as e:  # noqa: BLE001 - Ray's errors for a lost task or worker
        part = task.part
        first = (str(e).strip().splitlines() or [""])[0][:200]
        return HostResult(part.worker, str(part.path),
                          f"{part.path}: its Ray task failed ({type(e).__name__}: {first})",
                          b"", (), 0.0, "")
