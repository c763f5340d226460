"""benchmarks/engine.py's measurements, each in a fresh child process (no import or cache
state leaks between them): the parent side (`run_child`: runs engine.py with --_child,
samples the process tree's RSS, collects the RESULT lines) and the children (`child_engine`:
runlens's load_run + four views; `child_tfprof`: tfprof's add_step + views;
`child_profile`: cProfile of runlens's cold or warm path)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.machine import ROOT, cpu_busy_seconds, own_cpu_seconds

ENGINE = ROOT / "benchmarks" / "engine.py"  # the script the children run
RESULT_PREFIX = "@@RESULT "


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    except (OSError, ValueError, IndexError):
        return 0


class TreePeak:
    """The peak of a process tree's summed RSS (KiB), sampled every `every` seconds while
    the `with` block runs: a pool's or a thread's memory counts with its parent's."""

    def __init__(self, pid: int, every: float) -> None:
        self.pid, self.every, self.peak_kib = pid, every, 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(self.every):
            self.peak_kib = max(self.peak_kib, sum(_rss_kib(p) for p in _tree(self.pid)))

    def __enter__(self) -> TreePeak:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._done.set()
        self._thread.join()


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def run_child(args: list[str], timeout: float | None = None) -> dict[str, Any]:
    """Run this script as a child with `args`; returns its result dict plus the sampled
    peak RSS of its whole process tree. A child that dies keeps the partial results it
    printed (one RESULT line per finished phase)."""
    cmd = [sys.executable, str(ENGINE), *args]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    busy0, own0, wall0 = cpu_busy_seconds(), own_cpu_seconds(), time.perf_counter()
    with TreePeak(proc.pid, 0.05) as sampled:
        stdout, stderr = proc.communicate(timeout=timeout)
    peak = [sampled.peak_kib]
    busy1, own1, wall1 = cpu_busy_seconds(), own_cpu_seconds(), time.perf_counter()
    result: dict[str, Any] = {}
    for line in stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            result.update(json.loads(line[len(RESULT_PREFIX):]))
        else:
            print(line)
    result["returncode"] = proc.returncode
    result["tree_peak_rss_kib"] = peak[0]
    result["wall_seconds_total"] = wall1 - wall0
    result["cpu_seconds"] = own1 - own0  # includes the sampler's
    if busy0 is not None and busy1 is not None:
        # CPU used by anything but this measurement and this script while it ran: a sign
        # that the figures are disturbed.
        result["other_cpu_seconds"] = max(0.0, (busy1 - busy0) - (own1 - own0))
    other = result.get("other_cpu_seconds")
    if other is not None:
        label = args[1] if len(args) > 1 else ""
        print(f"  [{label}: wall {wall1 - wall0:.1f} s, its CPU (and the RSS sampler's) "
              f"{own1 - own0:.1f} s, other processes {other:.1f} CPU-s]")
        if other > max(0.5, 0.1 * (wall1 - wall0)):
            print(f"WARNING: other processes used {other:.1f} CPU-s during this "
                  f"{wall1 - wall0:.1f} s measurement; its figures are disturbed")
    if proc.returncode != 0:
        result["stderr_tail"] = stderr.strip().splitlines()[-5:]
    return result


def emit(**kv: Any) -> None:
    print(RESULT_PREFIX + json.dumps(kv), flush=True)


def emit_rusage() -> None:
    import resource

    emit(self_peak_rss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
         workers_peak_rss_kib=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)


def _drop_cache(run_path: Path) -> None:
    from runlens.analyzer import cache
    from runlens.analyzer.sources import Selection
    from runlens.analyzer.sources.rundir import SOURCE

    for part in SOURCE.parts(Path(run_path), Selection()):
        for loc in cache._locations(part):  # the run dir's .runlens/ and the user cache dir
            shutil.rmtree(loc, ignore_errors=True)
        shutil.rmtree(part.path / ".runlens", ignore_errors=True)


def _cache_present(run_path: Path) -> bool:
    from runlens.analyzer import cache
    from runlens.analyzer.sources import Selection
    from runlens.analyzer.sources.rundir import SOURCE

    part = SOURCE.parts(Path(run_path), Selection())[0]
    return any((loc / "key.json").is_file() for loc in cache._locations(part))


def child_engine(run_path: Path, mode: str, jobs: int | None) -> None:
    t = time.perf_counter()
    import polars  # noqa: F401

    from runlens.analyzer.analysis.views import VIEWS, ViewOptions
    from runlens.analyzer.ingest import native_decoder_available
    from runlens.analyzer.load import load_run
    emit(import_seconds=time.perf_counter() - t, native_decoder=native_decoder_available())

    if mode in ("cold", "no-cache"):
        _drop_cache(run_path)
    else:
        emit(cache_present_before=_cache_present(run_path))
    t = time.perf_counter()
    run = load_run(run_path, use_cache=mode != "no-cache", jobs=jobs)
    ingest = time.perf_counter() - t
    emit(ingest_seconds=ingest, node_rows=run.executions.height, warnings=len(run.warnings))
    opts = ViewOptions()
    per_view = {}
    for kind, fn in VIEWS.items():
        t = time.perf_counter()
        view = fn(run, opts)
        per_view[kind] = time.perf_counter() - t
        per_view[kind + "_rows"] = view.rows.height
    emit(views=per_view, views_seconds=sum(v for k, v in per_view.items()
                                           if not k.endswith("_rows")))
    # The cache is written in the background while views run; the process exits (and the
    # measurement ends) once it is written.
    from runlens.analyzer import cache

    t = time.perf_counter()
    cache.wait()
    emit(cache_wait_seconds=time.perf_counter() - t)
    if mode == "cold":
        emit(cache_present_after=_cache_present(run_path))
    emit_rusage()


def child_tfprof(run_path: Path, n_steps: int) -> None:
    t = time.perf_counter()
    import tensorflow as tf
    from tensorflow.core.profiler import tfprof_log_pb2
    from tensorflow.core.protobuf import config_pb2
    emit(import_seconds=time.perf_counter() - t)

    files = sorted((run_path / "steps").glob("step-*.pb"))
    if n_steps > 0:
        files = files[:n_steps]
    t = time.perf_counter()
    graph = tf.Graph()
    with graph.as_default():
        graph_def = tf.compat.v1.GraphDef.FromString((run_path / "graph.pb").read_bytes())
        tf.import_graph_def(graph_def, name="")
    op_log = tfprof_log_pb2.OpLogProto.FromString((run_path / "op_log.pb").read_bytes())
    prof = tf.compat.v1.profiler.Profiler(graph=graph, op_log=op_log)
    emit(construct_seconds=time.perf_counter() - t)

    parse = add = 0.0
    nodes = 0
    per_step: list[float] = []
    for path in files:
        t0 = time.perf_counter()
        rm = config_pb2.RunMetadata.FromString(path.read_bytes())
        t1 = time.perf_counter()
        prof.add_step(int(path.stem.split("-")[1]), rm)
        t2 = time.perf_counter()
        parse += t1 - t0
        add += t2 - t1
        per_step.append(t2 - t1)
        nodes += sum(len(d.node_stats) for d in rm.step_stats.dev_stats)
    tenth = max(1, len(per_step) // 10)
    emit(steps=len(files), node_stats=nodes, parse_seconds=parse, add_step_seconds=add,
         # does add_step get slower as steps accumulate? mean ms of the first/last tenth
         add_step_ms_first_tenth=1000 * sum(per_step[:tenth]) / tenth,
         add_step_ms_last_tenth=1000 * sum(per_step[-tenth:]) / tenth)

    opts = (tf.compat.v1.profiler.ProfileOptionBuilder()  # tfprof defaults == ViewOptions()
            .with_empty_output().build())
    per_view: dict[str, Any] = {}
    for kind, fn in (("ops", prof.profile_operations), ("scopes", prof.profile_name_scope),
                     ("graph", prof.profile_graph), ("code", prof.profile_python)):
        t = time.perf_counter()
        try:
            fn(opts)
        except Exception as e:  # profile_python can fail on re-imported graphs
            per_view[kind + "_error"] = f"{type(e).__name__}: {e}"
            emit(views=per_view)
            continue
        per_view[kind] = time.perf_counter() - t
        emit(views=per_view)  # partial results survive an abort in a later view
    emit(views_seconds=sum(v for k, v in per_view.items() if not k.endswith("_error")))
    emit_rusage()


def child_profile(run_path: Path, mode: str, jobs: int | None, top: int) -> None:
    """cProfile of load_run + the four views, cold (cache dropped first) or warm."""
    import cProfile
    import io
    import pstats

    from runlens.analyzer.analysis.views import VIEWS, ViewOptions
    from runlens.analyzer.load import load_run

    if mode == "profile-cold":
        _drop_cache(run_path)
    else:
        load_run(run_path, use_cache=True, jobs=jobs)  # make sure the cache exists
    pr = cProfile.Profile()
    t = time.perf_counter()
    pr.enable()
    run = load_run(run_path, use_cache=True, jobs=jobs)
    for fn in VIEWS.values():
        fn(run, ViewOptions())
    pr.disable()
    wall = time.perf_counter() - t
    stats = pstats.Stats(pr)
    rows = []
    for (file, line, func), (_cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if f"{os.sep}analyzer{os.sep}" in file and f"{os.sep}proto{os.sep}" not in file:
            rel = os.path.relpath(file, ROOT)
            rows.append({"where": f"{rel}:{line} {func}", "calls": nc,
                         "tottime": round(tt, 3), "cumtime": round(ct, 3)})
    rows.sort(key=lambda r: r["cumtime"], reverse=True)
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(15)
    emit(wall_seconds=wall, analyzer_top=rows[:top], tottime_top=buf.getvalue())
