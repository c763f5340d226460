"""Speed of the sources against the tools users would otherwise run on the same steps.

usage: python benchmarks/sources.py [--timelines 10000] [--profile-steps 1000]
                                    [--oracle-steps 1000] [--only timeline|tfprof]

1. A folder of ProfilerHook timelines: the three timeline-<step>.json files of
   fixtures/sources/profilerhook (captured with TensorFlow), copied round-robin into
   --timelines files timeline-1.json .. timeline-N.json (not timed).
   - runlens: `load_run(folder)` + the op, scope and graph views (the code view is
     skipped: timelines hold no code), three ways: --no-cache (`use_cache=False`), cold
     (no cache yet: it also writes the cache) and warm (the cache written by cold).
   - tfprof, the same work: a Profiler on the same graph (profilerhook_rundir/graph.pb and
     op_log.pb), add_step of the RunMetadata each timeline was written from (the same
     three, round-robin), then its op, scope and graph views.
   - tf.timeline, what wrote the files: `Timeline(step_stats)
     .generate_chrome_trace_format()` and writing the string, per step (as ProfilerHook).
   The two baselines run --oracle-steps steps (default 1,000) and are scaled linearly to
   --timelines steps (both cost the same per step; the table says so). tfprof's fixed
   cost (import the graph, make the Profiler, views of one step) is timed apart on 1
   step and not scaled: t(N) = t(1) + (t(m) - t(1)) * (N - 1) / (m - 1).
2. A ProfileProto of --profile-steps steps: a tfprof Profiler fed the RunMetadata of the
   fixture round-robin (not timed), serialized to profile_<N>.
   - tfprof: load it (`ProfilerFromFile`, what the tfprof CLI does with --profile_path)
     and print its op, scope, code and graph views;
   - runlens: `load_run(file)` + the same four views, --no-cache, cold and warm.

Each figure is the best of --repeat runs (default 3). Needs TensorFlow (dev extra).
--before DIR also times runlens from another checkout (e.g. `git worktree add DIR main`,
with its C extensions built) on the same files in the same run; each runlens figure is
timed in a child process (imports not timed; best of 2 there), ours and the checkout's
taking turns --repeat times (on a shared machine the load moves between minutes).
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

HOOK = REPO / "fixtures" / "sources" / "profilerhook"
HOOK_RUNDIR = REPO / "fixtures" / "sources" / "profilerhook_rundir"


def best(fn: Callable[[], Any], repeat: int, before: Callable[[], None] | None = None
         ) -> float:
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        gc.collect()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


JOBS: int | None = None  # load_run(jobs=...); None: os.cpu_count()


def runlens_work(path: Path, use_cache: bool, views: tuple[str, ...]) -> None:
    from runlens.analyzer.analysis.views import VIEWS, ViewOptions
    from runlens.analyzer.load import load_run

    run = load_run(path, use_cache=use_cache, jobs=JOBS)
    for kind in views:
        VIEWS[kind](run, ViewOptions())


def drop_cache(path: Path) -> Callable[[], None]:
    def drop() -> None:
        from runlens.analyzer import cache

        cache.wait()
        folder = path if path.is_dir() else path.parent
        shutil.rmtree(folder / ".runlens", ignore_errors=True)
        shutil.rmtree(Path(os.environ["XDG_CACHE_HOME"]), ignore_errors=True)

    return drop


def runlens_rows(path: Path, views: tuple[str, ...], repeat: int,
                 repos: list[Path]) -> list[dict[str, float]]:
    """no-cache, cold and warm of runlens imported from each of `repos`, each timed in a
    child process (best of 2 there), the repos taking turns `repeat` times so that each
    sees the same load; best per repo and mode."""
    import json
    import subprocess

    best_of: list[dict[str, float]] = [{} for _ in repos]
    for _ in range(repeat):
        for i, repo in enumerate(repos):
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(repo), str(path), ",".join(views),
                 "2", str(JOBS or 0)], check=True, capture_output=True, text=True).stdout
            for mode, s in json.loads(out.strip().splitlines()[-1]).items():
                best_of[i][mode] = min(s, best_of[i].get(mode, s))
    return best_of


def child(repo: str, path: str, views: str, repeat: str, jobs: str) -> None:
    import json

    global JOBS
    JOBS = int(jobs) or None
    sys.path.insert(0, repo)
    from runlens import analyzer

    assert Path(analyzer.__file__).resolve().is_relative_to(Path(repo).resolve()), (
        f"runlens imported from {analyzer.__file__}, not {repo}")
    print(json.dumps(_runlens_rows(Path(path), tuple(views.split(",")), int(repeat))))


def _runlens_rows(path: Path, views: tuple[str, ...], repeat: int) -> dict[str, float]:
    from runlens.analyzer import cache

    drop = drop_cache(path)
    out = {
        "no-cache": best(lambda: runlens_work(path, False, views), repeat),
        "cold": best(lambda: (runlens_work(path, True, views), cache.wait()), repeat, drop),
    }
    runlens_work(path, True, views)
    cache.wait()
    out["warm"] = best(lambda: runlens_work(path, True, views), repeat)
    return out


def hook_steps() -> list[Any]:
    from tensorflow.core.protobuf import config_pb2

    return [config_pb2.RunMetadata.FromString(p.read_bytes())
            for p in sorted((HOOK_RUNDIR / "steps").glob("step-*.pb"))]


def tfprof_options() -> dict[str, Any]:
    from tests.tfprof_oracle import options

    return options()


def tfprof_add_steps(steps: int) -> Any:
    import tensorflow as tf
    from tensorflow.core.profiler import tfprof_log_pb2

    graph = tf.Graph()
    with graph.as_default():
        tf.import_graph_def(tf.compat.v1.GraphDef.FromString(
            (HOOK_RUNDIR / "graph.pb").read_bytes()), name="")
    op_log = tfprof_log_pb2.OpLogProto.FromString((HOOK_RUNDIR / "op_log.pb").read_bytes())
    from tests.tfprof_oracle import _saved_code_traces

    mds = hook_steps()
    with _saved_code_traces():
        prof = tf.compat.v1.profiler.Profiler(graph=graph, op_log=op_log)
        for i in range(steps):
            prof.add_step(i + 1, mds[i % len(mds)])
    return prof


def bench_timelines(n: int, oracle_steps: int, repeat: int, tmp: Path,
                    before: Path | None) -> list[dict]:
    from tensorflow.python.client import timeline as tf_timeline

    folder = tmp / "timelines"
    folder.mkdir()
    sources = sorted(HOOK.glob("timeline-*.json"))
    for i in range(n):
        shutil.copyfile(sources[i % len(sources)], folder / f"timeline-{i + 1}.json")
    views = ("ops", "scopes", "graph")
    timed = runlens_rows(folder, views, repeat, [REPO, *([before] if before else [])])
    ours, old = timed[0], (timed[1] if before else {})
    m = min(n, oracle_steps)
    opts = tfprof_options()

    def tfprof(steps: int) -> None:
        prof = tfprof_add_steps(steps)
        prof.profile_operations(opts)
        prof.profile_name_scope(opts)
        prof.profile_graph(opts)
        del prof

    tfprof_m = best(lambda: tfprof(m), repeat)
    tfprof_1 = best(lambda: tfprof(1), repeat)
    tfprof_s = tfprof_1 + (tfprof_m - tfprof_1) * (n - 1) / max(m - 1, 1)
    mds = hook_steps()
    out_dir = tmp / "tf_timeline"
    out_dir.mkdir()

    def write_timelines() -> None:
        for i in range(m):
            tl = tf_timeline.Timeline(mds[i % len(mds)].step_stats)
            (out_dir / f"timeline-{i}.json").write_text(tl.generate_chrome_trace_format())

    timeline_s = best(write_timelines, repeat) * n / m
    rows = [{"what": f"tfprof: add_step x{n:,} + op/scope/graph views"
                     + (f" (measured on {m:,}, scaled)" if m < n else ""), "s": tfprof_s},
            {"what": f"tf.timeline: write {n:,} timelines"
                     + (f" (measured on {m:,}, scaled)" if m < n else ""), "s": timeline_s},
            {"what": f"(tfprof measured: {m:,} steps {tfprof_m:.3f} s, 1 step "
                     f"{tfprof_1:.3f} s)", "s": tfprof_m}]
    for who, times in (("runlens before", old), ("runlens", ours)):
        for mode, s in times.items():
            rows.append({"what": f"{who} {mode}: {n:,} timeline files + op/scope/graph "
                                 "views", "s": s, "vs tfprof": tfprof_s / s,
                         "vs tf.timeline": timeline_s / s})
    return rows


def bench_profile(steps: int, repeat: int, tmp: Path, before: Path | None) -> list[dict]:
    from tensorflow.python.util import _pywrap_tfprof as print_mdl

    prof = tfprof_add_steps(steps)
    target = tmp / f"profile_{steps}"
    target.write_bytes(prof.serialize_to_string())
    del prof
    gc.collect()
    from tensorflow.python.profiler.model_analyzer import _build_options

    opts = _build_options(tfprof_options()).SerializeToString()

    def tfprof() -> None:
        print_mdl.ProfilerFromFile(str(target).encode())
        for cmd in (b"op", b"scope", b"code", b"graph"):
            print_mdl.Profile(cmd, opts)
        print_mdl.DeleteProfiler()

    def tfprof_load() -> None:
        print_mdl.ProfilerFromFile(str(target).encode())
        print_mdl.DeleteProfiler()

    tfprof_s = best(tfprof, repeat)
    load_s = best(tfprof_load, repeat)
    views = ("ops", "scopes", "code", "graph")
    timed = runlens_rows(target, views, repeat, [REPO, *([before] if before else [])])
    ours, old = timed[0], (timed[1] if before else {})
    size = target.stat().st_size / 1e6
    rows = [{"what": f"tfprof: load a {steps:,}-step profile ({size:.1f} MB) + op/scope/"
                     "code/graph views", "s": tfprof_s},
            {"what": "(tfprof: its load alone)", "s": load_s}]
    for who, times in (("runlens before", old), ("runlens", ours)):
        for mode, s in times.items():
            rows.append({"what": f"{who} {mode}: the same profile + the four views",
                         "s": s, "vs tfprof": tfprof_s / s})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| what | seconds | vs tfprof | vs tf.timeline |", "|---|---:|---:|---:|"]
    for r in rows:
        ratio = [f"{r[k]:.1f}x" if k in r else "" for k in ("vs tfprof", "vs tf.timeline")]
        lines.append(f"| {r['what']} | {r['s']:.3f} | {ratio[0]} | {ratio[1]} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(*argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timelines", type=int, default=10_000)
    ap.add_argument("--profile-steps", type=int, default=1_000)
    ap.add_argument("--oracle-steps", type=int, default=1_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=["timeline", "tfprof"])
    ap.add_argument("--jobs", type=int, default=None,
                    help="load_run(jobs=...) (default: os.cpu_count())")
    ap.add_argument("--before", type=Path, help="also time runlens from this checkout")
    a = ap.parse_args(argv)
    global JOBS
    JOBS = a.jobs
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    with tempfile.TemporaryDirectory(prefix="runlens-bench-sources-") as tmp:
        os.environ["XDG_CACHE_HOME"] = str(Path(tmp) / "user-cache")
        if a.only in (None, "timeline"):
            print(table(bench_timelines(a.timelines, a.oracle_steps, a.repeat, Path(tmp),
                                              a.before)),
                  flush=True)
        if a.only in (None, "tfprof"):
            print(table(bench_profile(a.profile_steps, a.repeat, Path(tmp), a.before)),
                  flush=True)


if __name__ == "__main__":
    main()
