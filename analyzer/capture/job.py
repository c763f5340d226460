"""Which worker of a multi-worker job this process is, and where its profile goes.

TF's and JAX's profilers write `<logdir>/plugins/profile/<time>/<host>.xplane.pb`: two
workers on one host given the same logdir write the same file name (one silently
replaces the other), and two that stop in different seconds write different run
folders (runlens reads the newest: the other worker is lost). So in a job of several
workers each profiles to its own logdir, `<logdir>/worker<task>/`, and writes
`runlens.job.json` beside its profile: the job's worker count and its task, which
runlens reads to warn when a run holds fewer workers than the job had
(analyzer/sources/xplane_workers.py). One process alone keeps `<logdir>` as given.

The task and count come from TF_CONFIG (TF2, `cluster.worker` and `task.index`; a
chief counts as a worker) or `jax.process_index()` / `jax.process_count()`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..rundir import atomic_write

JOB_FILE = "runlens.job.json"  # analyzer/sources/xplane_workers.JOB_FILE (no TF import there)


def tf_task() -> tuple[int, int] | None:
    """(task index among the job's workers, worker count) from TF_CONFIG, or None when
    there is none or it names one worker."""
    try:
        config = json.loads(os.environ.get("TF_CONFIG", "") or "{}")
        cluster = config.get("cluster", {})
        chiefs = len(cluster.get("chief", []))
        count = chiefs + len(cluster.get("worker", []))
        task = config.get("task", {})
        index = int(task.get("index", 0)) + (chiefs if task.get("type") == "worker" else 0)
    except (ValueError, TypeError, AttributeError):
        return None
    return (index, count) if count > 1 else None


def jax_task() -> tuple[int, int] | None:
    """(jax.process_index(), jax.process_count()) when JAX runs several processes."""
    try:
        import jax

        count = int(jax.process_count())
        return (int(jax.process_index()), count) if count > 1 else None
    except Exception:  # no JAX, or its distributed runtime not usable
        return None


def worker_logdir(logdir: str | Path, task: tuple[int, int] | None) -> Path:
    """Where this worker profiles: `<logdir>/worker<task>` in a job of several."""
    return Path(logdir) / f"worker{task[0]}" if task else Path(logdir)


def record(run_folder: Path, task: tuple[int, int] | None, framework: str) -> None:
    """Write runlens.job.json in the profile run folder (a job of several workers only)."""
    if task is None:
        return
    body = {"format": "runlens-job", "version": 1, "framework": framework,
            "task": task[0], "workers": task[1]}
    atomic_write(run_folder / JOB_FILE, (json.dumps(body, sort_keys=True) + "\n").encode())


def newest_run(logdir: Path) -> Path | None:
    """The newest profile run folder under `logdir`/plugins/profile."""
    runs = [p for p in (logdir / "plugins" / "profile").glob("*") if p.is_dir()]
    return max(runs, key=lambda p: (p.stat().st_mtime, p.name)) if runs else None
