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
import secrets
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analyzer.errors import RunDirError
from analyzer.samejob import check_one_job

FORMAT_NAME = "runlens-run"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
GRAPH = "graph.pb"
OP_LOG = "op_log.pb"
STEPS_DIR = "steps"
STEP_FILE_RE = re.compile(r"^step-(\d+)\.pb$")


def step_file_name(step: int) -> str:
    """File name of a traced step: the global step, zero-padded to 8 digits."""
    return f"step-{step:08d}.pb"


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that a reader sees either the old file or the whole new one.

    The bytes go to a hidden temporary file in the same directory, are flushed to disk, and
    the file is renamed over `path` (rename is atomic within one file system). A process
    killed mid-write leaves at most a stray `.name.tmp*` file, which readers ignore.
    """
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    # O_EXCL with mode 0o666 honours the umask, unlike tempfile.mkstemp's 0o600.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


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
        try:
            old = json.loads((self.path / MANIFEST).read_text())
            entries = old.get("steps", [])
            self._created = str(old.get("created", self._created))
        except (OSError, ValueError, AttributeError):
            entries = []
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
    (more than the rest of opening a cached run)."""

    path: Path
    worker: str
    steps: dict[int, str]
    graph: Path | None
    op_log: Path | None
    manifest: dict[str, Any]


def _step_files(steps_dir: Path, first_only: bool = False) -> dict[int, str]:
    """Step files by global step (scandir: no stat per file, which a big run feels)."""
    found: dict[int, str] = {}
    try:
        with os.scandir(steps_dir) as entries:
            for entry in entries:
                m = STEP_FILE_RE.match(entry.name)
                if m and entry.is_file():
                    found[int(m.group(1))] = entry.path
                    if first_only:
                        break
    except OSError:
        return found
    return dict(sorted(found.items()))


def _read_manifest(path: Path) -> dict[str, Any]:
    """The manifest if it is readable JSON, else {} (readers must not require it)."""
    try:
        data = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def is_run_dir(path: Path) -> bool:
    """A run is a directory with a steps/ folder holding at least one step file."""
    return path.is_dir() and bool(_step_files(path / STEPS_DIR, first_only=True))


def _check_manifest(path: Path, manifest: dict[str, Any]) -> None:
    if not manifest:
        return
    if manifest.get("format", FORMAT_NAME) != FORMAT_NAME:
        raise RunDirError(f"{path / MANIFEST}: format {manifest.get('format')!r} is not "
                          f"{FORMAT_NAME!r}")
    version = manifest.get("version", FORMAT_VERSION)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise RunDirError(f"{path / MANIFEST}: run-dir format version {version!r} is newer "
                          f"than this runlens reads ({FORMAT_VERSION}); upgrade runlens")


def _open_run(path: Path, worker: str) -> RunDir:
    manifest = _read_manifest(path)
    _check_manifest(path, manifest)
    graph = path / GRAPH
    op_log = path / OP_LOG
    return RunDir(
        path=path,
        worker=worker,
        steps=_step_files(path / STEPS_DIR),
        graph=graph if graph.is_file() else None,
        op_log=op_log if op_log.is_file() else None,
        manifest=manifest,
    )


def find_runs(path: str | os.PathLike[str], workers: bool = False) -> list[RunDir]:
    """The run dirs at `path`: the directory itself, or its subdirectories (one per worker).

    Raises RunDirError with a one-line reason when `path` holds no run, or holds run dirs
    that are not one job (analyzer.samejob) unless `workers` forces merging them.
    """
    root = Path(path)
    if not root.exists():
        raise RunDirError(f"{root}: no such file or directory")
    if not root.is_dir():
        raise RunDirError(f"{root}: not a run directory (expected a directory with steps/)")
    if is_run_dir(root):
        return [_open_run(root, worker=_worker_name(root, None))]
    found = [p for p in sorted(root.iterdir()) if is_run_dir(p)]
    if not found:
        raise RunDirError(f"{root}: not a run directory (no steps/step-*.pb found)")
    runs = [_open_run(p, worker=_worker_name(p, p.name)) for p in found]
    check_one_job(root, runs, force=workers)
    return runs


def _worker_name(path: Path, default: str | None) -> str:
    """Worker label: the manifest's task (job:index) when known, else the folder name."""
    task = _read_manifest(path).get("task")
    if isinstance(task, dict) and "type" in task:
        return f"{task['type']}:{task.get('index', 0)}"
    return default if default is not None else "worker:0"
