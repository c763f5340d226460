"""The workers of a multi-worker TF2/JAX profile: how they are found, named and judged
to be one job.

Three layouts hold several workers' XSpace files: a profile run folder with one file per
host (`<host>.xplane.pb`), a folder of per-worker TensorBoard logdirs
(`worker0/plugins/profile/<run>/...`, `worker1/...`: what analyzer/capture/job.py writes
for a job of several workers), and a logdir whose TensorBoard runs each hold a profile.
A worker is named by its file stem, preceded by its logdir's folder when the files lie in
several (`worker0/host`).

Files are one job when their profiling windows overlap (the `Task Environment` plane's
`profile_start_time` / `profile_stop_time`) and they ran the same program (the names of
their host planes' event metadata: TF ops and functions, XLA modules with their
fingerprints, which differ between programs: SAME_PROGRAM). Otherwise they are refused, as unrelated
runs (`train/` and `validation/`, a folder of experiments) must not be summed and
compared as workers; `--workers` (Selection.workers) forces. Only the metadata of the
planes is read (no event lines): cheap beside reading the files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .. import readfile
from ..errors import InputFileError, RunDirError
from .xplane_wire import read_planes

JOB_FILE = "runlens.job.json"  # analyzer/capture/job.py JOB_FILE (written beside the profile)
# The share of the op names of the smaller of two workers' host planes that the other has,
# at least (a chief's extra work does not count against it). Workers of one job: 97.8%
# (TF2 MWMS), 100% (JAX); two similar MLPs written apart (fixtures/xplane/tf_function vs
# fixtures/workers/tf_slow): 73%; JAX jax_train vs jax_slow: 67.5%; TF vs JAX: 9-12%.
SAME_PROGRAM = 0.9
_TASK_ENV = "Task Environment"


class SeveralRuns(RunDirError):
    """A logdir whose TensorBoard runs below each hold a profile (`below`: their folders)."""

    def __init__(self, message: str, below: list[Path]) -> None:
        super().__init__(message)
        self.below = below


@dataclass(frozen=True)
class Facts:
    """What one file says about its worker: its profiling window (ns since the epoch, 0
    when absent) and the names of its host planes' event metadata."""

    start_ns: int
    stop_ns: int
    names: frozenset[str]


def facts(path: Path) -> Facts | None:
    """The file's window and op names; None when it cannot be read (said when read)."""
    try:
        planes = read_planes(path)
    except (InputFileError, RunDirError, OSError):
        return None
    start = stop = 0
    names: set[str] = set()
    for plane in planes:
        if plane.name == _TASK_ENV:
            stats = {plane.stat_names.get(s.metadata_id): s for s in plane.meta.stats}
            start = _int(stats.get("profile_start_time"))
            stop = _int(stats.get("profile_stop_time"))
        elif plane.name.startswith("/host:"):
            names.update(m.name for m in plane.meta.event_metadata.values() if m.name)
    return Facts(start, stop, frozenset(names))


def _int(stat: object) -> int:
    if stat is None:
        return 0
    return int(getattr(stat, "int64_value", 0) or getattr(stat, "uint64_value", 0) or 0)


def names(files: list[Path]) -> list[str]:
    """Each file's worker: its stem, or `<logdir folder>/<stem>` when the files lie in
    several logdirs (the folder above `plugins/profile/<run>/`)."""
    stems = [readfile.shown(f.name).removesuffix(".xplane.pb") for f in files]
    folders = {f.parent for f in files}
    if len(folders) == 1:
        return stems
    return [f"{readfile.shown(f.parents[3].name)}/{stem}" if len(f.parents) > 3 else stem
            for f, stem in zip(files, stems, strict=True)]


def why_not_one_job(files: list[Path], workers: list[str]) -> str | None:
    """Why the files are not one job ("windows do not overlap: ...", "different
    programs: ..."), or None when they are (or when it cannot be told: unreadable files
    are reported when read)."""
    known = [(w, f) for w, f in zip(workers, map(facts, files), strict=True) if f is not None]
    if len(known) < 2:
        return None
    timed = [(w, f) for w, f in known if f.start_ns and f.stop_ns]
    if len(timed) >= 2:
        latest_start = max(timed, key=lambda wf: wf[1].start_ns)
        earliest_stop = min(timed, key=lambda wf: wf[1].stop_ns)
        if latest_start[1].start_ns >= earliest_stop[1].stop_ns:
            gap = (latest_start[1].start_ns - earliest_stop[1].stop_ns) / 1e9
            return (f"their profiling windows do not overlap ({earliest_stop[0]} stopped "
                    f"{gap:.1f}s before {latest_start[0]} started)")
    first_worker, first = known[0]
    for worker, other in known[1:]:
        common = len(first.names & other.names)
        share = common / max(1, min(len(first.names), len(other.names)))
        if share < SAME_PROGRAM:
            return (f"they ran different programs ({first_worker} and {worker} share "
                    f"{share:.0%} of their op names)")
    return None


def check_one_job(where: Path, files: list[Path], workers: list[str], force: bool) -> None:
    """RunDirError (one line) when the workers' files are not one job and `force`
    (--workers) is not given."""
    if force or len(files) < 2:
        return
    why = why_not_one_job(files, workers)
    if why is None:
        return
    runs = sorted({w.split("/")[0] for w in workers if "/" in w})
    shown = ", ".join((runs or workers)[:6]) + (", ..." if len(runs or workers) > 6 else "")
    what = (f"profiles in several TensorBoard runs ({shown})" if runs
            else f"profiles of {len(files)} hosts ({shown})")
    raise RunDirError(f"{readfile.shown(where)}: {what} that are not one job: {why}; name "
                      "one of them, or pass --workers to read them as one job")


def missing_workers(files: list[Path]) -> str | None:
    """A warning when runlens's capture helper recorded more workers for the job
    (runlens.job.json beside a profile) than the files found."""
    expected = 0
    tasks: set[int] = set()
    for folder in sorted({f.parent for f in files}):
        try:
            body = json.loads(readfile.read_bytes(folder / JOB_FILE))
            expected = max(expected, int(body["workers"]))
            tasks.add(int(body["task"]))
        except (InputFileError, RunDirError, OSError, ValueError, KeyError, TypeError):
            continue
    if expected <= len(files):
        return None
    lost = sorted(set(range(expected)) - tasks)
    return (f"the job had {expected} workers ({JOB_FILE}) but {len(files)} profile(s) "
            f"were found" + (f"; missing task(s) {', '.join(map(str, lost))}" if lost else "")
            + ": the numbers cover the workers found only")
