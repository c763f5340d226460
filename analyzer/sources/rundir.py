"""The run directory written by runlens's capture hook (docs/run-dir-format.md).

A thin wrapper: finding the run dirs is analyzer.rundir's job and reading one is
analyzer.load's (`_load_run_dir`); this module only presents them as a source. Each run
dir (one per worker) is one part.
"""

from __future__ import annotations

from pathlib import Path

from analyzer import rundir
from analyzer.sources import Part, Progress, Selection, SourceFrames


class RunDirSource:
    kind = "rundir"
    description = "a run directory written by runlens's hook (steps/step-*.pb), or a " \
                  "folder of them (one per worker)"

    def accepts(self, path: Path) -> bool:
        if not path.is_dir():
            return False
        if rundir.is_run_dir(path):
            return True
        try:
            return any(rundir.is_run_dir(p) for p in path.iterdir())
        except OSError:
            return False

    def parts(self, path: Path, chosen: Selection) -> list[Part]:
        return [Part(self.kind, run.path, run.worker, _files(run), detail=run,
                     warnings=run.warnings)
                for run in rundir.find_runs(path, workers=chosen.workers)]

    def read(self, part: Part, jobs: int, progress: Progress | None) -> SourceFrames:
        from analyzer.load import _load_run_dir

        frames, warnings, digests = _load_run_dir(part.detail, jobs, progress, digests=True)
        return SourceFrames(frames, warnings, digests=digests)


def _files(run: rundir.RunDir) -> tuple[str, ...]:
    """Every file a run dir's frames depend on: graph, op log, manifest, step files."""
    files = [str(p) for p in (run.graph, run.op_log) if p is not None]
    manifest = run.path / rundir.MANIFEST
    if manifest.is_file():
        files.append(str(manifest))
    return (*files, *run.steps.values())


SOURCE = RunDirSource()
