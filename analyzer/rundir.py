"""The run directory: its layout, atomic writes, and finding runs to read.

Both sides use this module: the capture hook writes through `RunDirWriter` inside the
training process, and the offline engine finds step files with `find_runs`. It never
imports TensorFlow. Format: docs/run-dir-format.md.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import readfile
from .errors import InputFileError, RunDirError, RunlensError
from .samejob import check_one_job

FORMAT_NAME = "runlens-run"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
GRAPH = "graph.pb"
OP_LOG = "op_log.pb"
STEPS_DIR = "steps"
STEP_FILE_RE = re.compile(r"^step-(\d+)\.pb$")
MAX_STEP = 2**63 - 1  # global steps are int64 in TensorFlow and in our frames
# A manifest lists each step in ~130 bytes: 256 MiB is ~2M traced steps, far more than a
# capture writes; a bigger one (or a FIFO, a device) is refused by name, never read whole.
MANIFEST_MAX_BYTES = 256 << 20


def step_file_name(step: int) -> str:
    """File name of a traced step: the global step, zero-padded to 8 digits."""
    return f"step-{step:08d}.pb"


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that a reader sees either the old file or the whole new one.

    The bytes go to a hidden temporary file beside it, are flushed to disk, and the file
    is renamed over `path` (rename is atomic within one file system). A process killed
    mid-write leaves at most a stray `.name.*.tmp` file, which readers ignore. Through a
    symbolic link the file it points to is written; a FIFO or character device is
    streamed to, never replaced (analyzer/output.py, the one writer). OSError on failure.
    """
    from .output import opened

    with opened(path) as f:
        f.write(data)


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _task_from_env() -> dict[str, Any] | None:
    """The cluster task of this process, from TF_CONFIG, when it has one."""
    try:
        task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task")
    except ValueError:
        return None
    return task if isinstance(task, dict) else None


@dataclass
class RunDirWriter:
    """Writes one run directory: graph.pb, op_log.pb, steps/step-N.pb and manifest.json.

    Every file goes through `atomic_write`; the manifest is rewritten after every step so
    it always lists exactly the step files that are complete. I/O errors propagate: the
    caller (the capture hook) decides to warn and stop capturing.
    """

    path: Path
    tf_version: str = ""
    _steps: dict[int, dict[str, Any]] = field(default_factory=dict)
    _created: str = field(default_factory=_utc_now)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        (self.path / STEPS_DIR).mkdir(parents=True, exist_ok=True)
        self._adopt_existing_steps()

    def _adopt_existing_steps(self) -> None:
        """Keep the steps of an earlier process (a resumed job) in the manifest."""
        old = _read_manifest(self.path)  # never blocks the training process on a FIFO
        entries = old.get("steps", [])
        if not isinstance(entries, list):
            entries = []
        self._created = str(old.get("created", self._created))
        for entry in entries:
            if isinstance(entry, dict) and isinstance(entry.get("step"), int):
                if (self.path / str(entry.get("file", ""))).is_file():
                    self._steps[entry["step"]] = entry

    def write_graph(self, graph_def: bytes) -> None:
        atomic_write(self.path / GRAPH, graph_def)
        self._write_manifest()

    def write_op_log(self, op_log: bytes) -> None:
        atomic_write(self.path / OP_LOG, op_log)

    def write_step(self, step: int, run_metadata: bytes, wall_time: float) -> Path:
        rel = f"{STEPS_DIR}/{step_file_name(step)}"
        target = self.path / rel
        atomic_write(target, run_metadata)
        self._steps[step] = {
            "step": step,
            "file": rel,
            "bytes": len(run_metadata),
            "wall_time": round(wall_time, 6),
        }
        self._write_manifest()
        return target

    def _write_manifest(self) -> None:
        manifest = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "tf_version": self.tf_version,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "task": _task_from_env(),
            "created": self._created,
            "updated": _utc_now(),
            "steps": [self._steps[s] for s in sorted(self._steps)],
        }
        atomic_write(self.path / MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode())


# ----------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class RunDir:
    """One run directory found on disk: its step files by global step, and metadata files.

    Step files are path strings: a big run has thousands, and a Path costs ~10 us each
    (more than the rest of opening a cached run). `warnings`: what the scan could not read
    (one line each, naming the file), which the loader reports."""

    path: Path
    worker: str
    steps: dict[int, str]
    graph: Path | None
    op_log: Path | None
    manifest: dict[str, Any]
    warnings: tuple[str, ...] = ()


def _step_files(steps_dir: Path, first_only: bool = False,
                problems: list[str] | None = None) -> dict[int, str]:
    """Step files by global step (scandir: no stat per file, which a big run feels).

    An entry named like a step file that cannot be used (a symlink loop, a directory or
    other special file, a step number beyond int64) is reported in `problems` and the
    scan goes on; so is a steps/ folder that cannot be listed."""
    found: dict[int, str] = {}
    report = problems.append if problems is not None else (lambda _: None)
    try:
        with os.scandir(steps_dir) as entries:
            for entry in entries:
                m = STEP_FILE_RE.match(entry.name)
                if not m:
                    continue
                try:
                    regular = entry.is_file()
                except OSError as e:  # a symlink loop, a dangling link's parent...
                    report(f"{entry.path}: cannot read ({e.strerror or e}); skipped")
                    continue
                step = int(m.group(1))
                if not regular:
                    report(f"{entry.path}: not a regular file; skipped")
                elif step > MAX_STEP:
                    report(f"{entry.path}: step number beyond int64; skipped")
                else:
                    found[step] = entry.path
                if first_only and found:
                    break
    except FileNotFoundError:
        return found
    except OSError as e:
        report(f"{steps_dir}: cannot list ({e.strerror or e})")
    return dict(sorted(found.items()))


def _read_manifest(path: Path, problems: list[str] | None = None) -> dict[str, Any]:
    """The manifest if it is readable JSON, else {} (readers must not require it); why
    not goes to `problems` when the file is there but unreadable."""
    where = readfile.shown(path / MANIFEST)
    if not os.path.lexists(path / MANIFEST):
        return {}
    try:  # a regular file only (a FIFO hung, /dev/zero grew without bound), bounded
        data = json.loads(readfile.read_bytes(path / MANIFEST, MANIFEST_MAX_BYTES,
                                              what="manifest"))
    except InputFileError as e:
        if problems is not None:
            problems.append(f"{e}; ignored")
        return {}
    except (ValueError, RecursionError) as e:
        reason = "nested too deeply" if isinstance(e, RecursionError) else (
            " ".join(str(e).split()))
        if problems is not None:
            problems.append(f"{where}: not a readable JSON file ({reason}); ignored")
        return {}
    if not isinstance(data, dict):
        if problems is not None:
            problems.append(f"{where}: not a JSON object; ignored")
        return {}
    return data


def is_run_dir(path: Path) -> bool:
    """A run is a directory with a steps/ folder holding at least one step file (or an
    entry named like one, which the loader then reports)."""
    if not path.is_dir():
        return False
    problems: list[str] = []
    return bool(_step_files(path / STEPS_DIR, first_only=True, problems=problems) or problems)


def _check_manifest(path: Path, manifest: dict[str, Any], problems: list[str]) -> None:
    """Refuse a manifest of another format or a newer version; a wrong-typed step list
    is reported in `problems` and ignored (the step files are what counts)."""
    if not manifest:
        return
    if manifest.get("format", FORMAT_NAME) != FORMAT_NAME:
        raise RunDirError(f"{path / MANIFEST}: format {manifest.get('format')!r} is not "
                          f"{FORMAT_NAME!r}")
    version = manifest.get("version", FORMAT_VERSION)
    if not isinstance(version, int) or isinstance(version, bool):
        raise RunDirError(f"{path / MANIFEST}: run-dir format version {version!r:.40} is not "
                          "an integer")
    if version > FORMAT_VERSION:
        raise RunDirError(f"{path / MANIFEST}: run-dir format version {version} is newer "
                          f"than this runlens reads ({FORMAT_VERSION}); upgrade runlens")
    if not isinstance(manifest.get("steps", []), list):
        problems.append(f"{path / MANIFEST}: 'steps' is not a list; ignored")
        manifest["steps"] = []


def _open_run(path: Path, worker: str, problems: list[str] | None = None) -> RunDir:
    problems = list(problems or [])
    manifest = _read_manifest(path, problems)
    _check_manifest(path, manifest, problems)
    graph = path / GRAPH
    op_log = path / OP_LOG
    steps = _step_files(path / STEPS_DIR, problems=problems)
    return RunDir(
        path=path,
        worker=worker,
        steps=steps,
        # There but not a readable regular file: kept, so that reading it says why
        # ("cannot read", not "missing").
        graph=graph if _exists(graph) else None,
        op_log=op_log if _exists(op_log) else None,
        manifest=manifest,
        warnings=tuple(problems),
    )


def _exists(path: Path) -> bool:
    """Something is at `path` (a file, a dangling link, a folder: anything but nothing)."""
    try:
        return os.path.lexists(path)
    except (OSError, ValueError):
        return False


def find_runs(path: str | os.PathLike[str], workers: bool = False) -> list[RunDir]:
    """The run dirs at `path`: the directory itself, or its subdirectories (one per worker).

    Raises RunDirError with a one-line reason when `path` holds no run, or holds run dirs
    that are not one job (analyzer.samejob) unless `workers` forces merging them. A
    subdirectory that cannot be read, or whose manifest is refused, is reported in the
    first run dir's warnings and left out.
    """
    root = Path(path)
    try:
        os.stat(root)
    except FileNotFoundError:
        raise RunDirError(f"{root}: no such file or directory") from None
    except OSError as e:  # a folder on the way that cannot be searched, a loop...
        raise RunDirError(f"{root}: cannot read ({e.strerror or e})") from None
    if not root.is_dir():
        raise RunDirError(f"{root}: not a run directory (expected a directory with steps/)")
    try:
        os.listdir(root)
    except OSError as e:
        raise RunDirError(f"{root}: cannot read ({e.strerror or e})") from None
    if is_run_dir(root):
        return [_open_run(root, worker=_worker_name(root, None))]
    try:
        children = sorted(root.iterdir())
    except OSError as e:
        raise RunDirError(f"{root}: cannot read ({e.strerror or e})") from None
    found, problems = [], []
    for p in children:
        try:
            os.stat(p)
            if p.is_dir():
                os.listdir(p)
        except OSError as e:
            problems.append(f"{p}: cannot read ({e.strerror or e}); left out")
            continue
        if is_run_dir(p):
            found.append(p)
    if not found:
        raise RunDirError(f"{root}: not a run directory (no steps/step-*.pb found"
                          + (f"; {problems[0]}" if problems else "") + ")")
    runs, refused = [], []
    for p in found:  # a worker whose manifest is refused is left out, not the run
        try:
            runs.append(_open_run(p, worker=_worker_name(p, readfile.shown(p.name))))
        except RunDirError as e:
            refused.append(e)
            problems.append(f"{e}; worker left out")
    if not runs:
        raise refused[0]
    first = runs[0]
    runs[0] = RunDir(first.path, first.worker, first.steps, first.graph, first.op_log,
                     first.manifest, (*problems, *first.warnings))
    check_one_job(root, runs, force=workers)
    return runs


def _worker_name(path: Path, default: str | None) -> str:
    """Worker label: the manifest's task (job:index) when known, else the folder name."""
    task = _read_manifest(path).get("task")
    if isinstance(task, dict) and "type" in task:
        return f"{task['type']}:{task.get('index', 0)}"
    return default if default is not None else "worker:0"


def check_output(path: str | os.PathLike[str]) -> Path:
    """Raise RunlensError unless `path` can be written (analyzer/output.py's rules: a
    regular file or a new path in a writable directory, a link to one, a FIFO, a
    character device or - for standard output)."""
    from .output import check

    return check(path)


def check_output_dir(directory: str | os.PathLike[str]) -> Path:
    """Raise RunlensError unless `directory` is one or can be made in an existing one."""
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise RunlensError(f"{d}: not a directory")
    if not d.exists() and not d.parent.is_dir():
        raise RunlensError(f"{d}: directory {d.parent} does not exist")
    return d
