"""The run directory written by runlens's capture hook (docs/run-dir-format.md).

A thin wrapper: finding the run dirs is analyzer.rundir's job and reading one is
analyzer.ingest.rundir's (`read_run_dir`); this module only presents them as a source. Each run
dir (one per worker) is one part.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from .. import readfile, rundir
from ..ingest.rundir import read_run_dir
from . import Part, Progress, Selection, SourceFrames


class RunDirSource:
    kind = "rundir"
    files = "steps/step-*.pb"  # what the not-a-profile error names
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
        frames, warnings, digests, unreadable = read_run_dir(part.detail, jobs, progress,
                                                             digests=True)
        return SourceFrames(frames, warnings, lacks(part.detail, frames, unreadable),
                            digests=digests)


def lacks(run: rundir.RunDir, frames: dict[str, pl.DataFrame],
          unreadable: frozenset[str] = frozenset()) -> dict[str, str]:
    """What this run dir does not hold (Run.lacks: what -> why), as every source says it:
    a run dir converted from a timeline (fixtures/from_timeline.py), or captured without
    memory tracing, has steps but no graph.pb, op_log.pb, partition graphs or memory."""
    out: dict[str, str] = {}
    sources = set(frames["graph_nodes"].get_column("source").unique().to_list())
    partitions = bool(sources - {"graph"})
    if "graph" not in sources:
        out["graph"] = (("no graph.pb in the run dir" if run.graph is None else
                         "graph.pb could not be read")
                        + " (graph op types, parameters, data formats"
                        + (")" if partitions else
                                     "; with no partition graphs either, no dataflow edges)"))
    if not partitions:
        out["partition graphs"] = ("no partition graphs in the step files (kernels come "
                                   "from timeline labels)")
    if run.op_log is None:
        out["code"] = "no op_log.pb in the run dir (code traces, float_ops)"
        out["float_ops"] = out["code"]
    elif "op_log.pb" in unreadable:  # its warning says why, once
        out["code"] = "op_log.pb could not be read (code traces, float_ops)"
        out["float_ops"] = out["code"]
    elif not frames["code"].height:
        out["code"] = "op_log.pb holds no code traces"
    if not frames["memory"].height and not frames["allocations"].height:
        out["memory"] = "the step files hold no memory records"
    if not frames["output_rows"].height:
        out["outputs"] = "the step files hold no output records"
    return out


def _files(run: rundir.RunDir) -> tuple[str, ...]:
    """Every file a run dir's frames depend on: graph, op log, manifest, step files."""
    # graph.pb or op_log.pb that is not a regular file is read (and reported) but not
    # digested for the cache key: a FIFO would block the cache writer.
    files = [str(p) for p in (run.graph, run.op_log) if p is not None and readfile.regular(p)]
    manifest = run.path / rundir.MANIFEST
    if readfile.regular(manifest):
        files.append(str(manifest))
    return (*files, *run.steps.values())


SOURCE = RunDirSource()
