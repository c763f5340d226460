"""Whether the run dirs found in one folder are workers of one job, or unrelated runs.

A folder of run dirs (one per worker) is analysed as one multi-worker run. A folder that
merely collects runs (fixtures/runs, an experiments folder) must not be: its "workers"
would be summed node by node and compared as stragglers. Run dirs are one job when
their manifests say so (the same `job` value, or distinct cluster tasks from TF_CONFIG),
or when they hold the same graph (the hook writes graph.pb deterministically, so the
workers of a data-parallel job write the same bytes) and traced their steps at the same
time: their windows (the manifests' step `wall_time`s, first to last, give or take a few
steps' time) overlap, so that two runs of one script, one after the other, are not
taken for two workers (issue 30).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import RunDirError


def _task(manifest: dict[str, Any]) -> tuple[str, int] | None:
    task = manifest.get("task")
    if isinstance(task, dict) and "type" in task:
        return str(task["type"]), int(task.get("index", 0) or 0)
    return None


def _graph_digest(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _window(manifest: dict[str, Any]) -> tuple[float, float, float] | None:
    """(first, last wall_time of the traced steps, a step's time) from the manifest."""
    times = sorted(float(t) for t in (s.get("wall_time") for s in manifest.get("steps", [])
                                      if isinstance(s, dict))
                   if isinstance(t, (int, float)))
    if not times:
        return None
    return times[0], times[-1], (times[-1] - times[0]) / max(1, len(times) - 1)


def windows_apart(runs: Sequence[Any]) -> float | None:
    """Seconds between the run dirs' tracing windows when they do not overlap (beyond 2 s
    and two steps' time of slack), else None (they overlap, or a manifest has no times)."""
    windows = [_window(r.manifest) for r in runs]
    if any(w is None for w in windows):
        return None
    known = [w for w in windows if w is not None]
    slack = 2.0 + 2 * max(w[2] for w in known)
    gap = max(w[0] for w in known) - min(w[1] for w in known)
    return gap if gap > slack else None


def why_one_job(runs: Sequence[Any]) -> str | None:
    """Why `runs` (analyzer.rundir.RunDir) are one job ("manifests name job X", "cluster
    tasks", "same graph"), or None when nothing says so."""
    if len(runs) < 2:
        return "one run dir"
    jobs = {r.manifest.get("job") for r in runs}
    if len(jobs) == 1 and None not in jobs:
        return f"manifests name job {jobs.pop()!r}"
    tasks = [_task(r.manifest) for r in runs]
    if None not in tasks and len(set(tasks)) == len(tasks):
        return "distinct cluster tasks"
    if all(r.graph is not None for r in runs):
        sizes = {r.graph.stat().st_size for r in runs}
        if (len(sizes) == 1 and len({_graph_digest(r.graph) for r in runs}) == 1
                and windows_apart(runs) is None):
            return "same graph"
    return None


def check_one_job(root: Path, runs: Sequence[Any], force: bool = False) -> None:
    """Raise RunDirError (one line) when the run dirs under `root` are not one job and
    `force` (the CLI's --workers) is not given."""
    if force or why_one_job(runs) is not None:
        return
    names = ", ".join(r.path.name for r in runs[:6]) + (", ..." if len(runs) > 6 else "")
    apart = windows_apart(runs)
    why = (f"steps traced {apart:.0f}s apart" if apart is not None else "different graphs")
    raise RunDirError(
        f"{root}: holds {len(runs)} run dirs that are not one job ({names}: {why}, no "
        f"shared job or cluster task in their manifests); analyse one, e.g. "
        f"{root / runs[0].path.name}, or pass --workers to merge them as workers of one run")
