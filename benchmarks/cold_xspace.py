"""Cold read of one large XSpace file vs xprof (issue 33 point 3): runlens's
`analyze scopes FILE --format json --min-micros 0` against xprof's `hlo_stats` conversion
of the same file, each a fresh process, timed in the same round.

    python benchmarks/cold_xspace.py [--rounds 3] [--file PATH] [--stages] [--before DIR]

FILE: by default ../shared/data/gpu-jax/xf_long.tar.xz (the 500-step H200 transformer
profile, 38 MB) unpacked into a temporary folder. Per round:
- runlens: the `analyze` command beside this Python (as a user runs it), a fresh
  RUNLENS_CACHE_DIR (nothing cached, nothing beside the file): it reads, attributes, views,
  prints, and writes its cache before it exits, as a user's first command does;
- xprof: `raw_to_tool_data.xspace_to_tool_data([copy], "hlo_stats", {})` in a new Python
  on a copy of the file in a fresh folder (xprof writes ALL_HOSTS.op_stats_v2.pb beside
  its input and answers the next call from it: a reused folder is not a cold read). Its
  time includes its imports, as runlens's includes its own.
Both: wall time (from the spawn to the exit) and peak RSS (wait4's ru_maxrss). The two
take turns within a round; the report is each round, the ratio per round, and the median
of the rounds.

`--before DIR`: also, in each round, the same command with runlens imported from
DIR/runlens (a checkout of another commit with its C extensions: "before").

`--stages`: where runlens's cold time goes, in one extra process: the modules the command
imports, imported first and timed, then the command with each stage's functions timed
(wall, exclusive of the stages nested in them), then the wait for the cache at exit.

Python's bytecode: a pip install has .pyc files, so the repository is compiled first
(`compileall`, with PYTHONDONTWRITEBYTECODE lifted), else every run pays ~70 ms of
compiling runlens's own modules.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import ROOT, machine  # noqa: E402

ARCHIVE = ROOT.parent / "shared" / "data" / "gpu-jax" / "xf_long.tar.xz"
XPROF = ("import sys\nfrom xprof.convert import raw_to_tool_data\n"
         "raw_to_tool_data.xspace_to_tool_data([sys.argv[1]], 'hlo_stats', {})\n")


def analyze_command() -> list[str]:
    """The installed console script beside this interpreter (what a user runs)."""
    script = Path(sys.executable).parent / "analyze"
    return [str(script)] if script.exists() else [sys.executable, "-m", "runlens.cli"]


def before_command(tree: Path) -> list[str]:
    """`analyze` with runlens imported from tree/runlens (before the editable install)."""
    code = (f"import sys\nsys.path.insert(0, {str(tree)!r})\nsys.argv[0] = 'analyze'\n"
            "from runlens.cli import main\nmain()\n")
    return [sys.executable, "-c", code]


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, int, int]:
    """Wall seconds, peak RSS (KiB) and exit status of `cmd` in a child process."""
    t = time.perf_counter()
    child = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - t
    child.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss, child.returncode


def run_runlens(path: Path, env: dict[str, str], command: list[str] | None = None
                ) -> tuple[float, int]:
    with tempfile.TemporaryDirectory(prefix="runlens-cache-") as cache:
        wall, rss, rc = timed([*(command or analyze_command()), "scopes", str(path),
                               "--format", "json", "--min-micros", "0"],
                              {**env, "RUNLENS_CACHE_DIR": cache})
        if rc != 0:
            sys.exit(f"runlens exited {rc}")
        if not any(Path(cache).rglob("key.json")):
            sys.exit("runlens wrote no cache: not the cold command a user runs")
    return wall, rss


def run_xprof(path: Path, env: dict[str, str]) -> tuple[float, int]:
    with tempfile.TemporaryDirectory(prefix="xprof-") as fresh:
        copy = Path(fresh) / path.name
        shutil.copyfile(path, copy)
        wall, rss, rc = timed([sys.executable, "-c", XPROF, str(copy)], env)
        if rc != 0:
            sys.exit(f"xprof exited {rc}")
    return wall, rss


def compile_bytecode(env: dict[str, str], tree: Path) -> None:
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree)], env=env,
                   stdout=subprocess.DEVNULL, check=False)


def unpacked(folder: str) -> Path:
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(folder, filter="data")
    found = sorted(Path(folder).rglob("*.xplane.pb"))
    if not found:
        sys.exit(f"{ARCHIVE}: no .xplane.pb inside")
    return found[0]


def rounds(path: Path, n: int, env: dict[str, str], before: Path | None
           ) -> list[dict[str, float]]:
    out = []
    for i in range(n):
        row: dict[str, float] = {}
        if before is not None:
            b_wall, b_rss = run_runlens(path, env, before_command(before))
            row |= {"before_s": b_wall, "before_mib": b_rss / 1024}
        r_wall, r_rss = run_runlens(path, env)
        x_wall, x_rss = run_xprof(path, env)
        row |= {"runlens_s": r_wall, "runlens_mib": r_rss / 1024, "xprof_s": x_wall,
                "xprof_mib": x_rss / 1024, "ratio": r_wall / x_wall}
        out.append(row)
        print(f"round {i + 1}: runlens {r_wall:.3f} s {r_rss / 1024:.0f} MiB | xprof "
              f"{x_wall:.3f} s {x_rss / 1024:.0f} MiB | ratio {row['ratio']:.3f}"
              + (f" | before {row['before_s']:.3f} s {row['before_mib']:.0f} MiB "
                 f"(ratio {row['before_s'] / x_wall:.3f})" if before else ""), flush=True)
    return out


def report(rows: list[dict[str, float]]) -> None:
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"median: runlens {med['runlens_s']:.3f} s {med['runlens_mib']:.0f} MiB | xprof "
          f"{med['xprof_s']:.3f} s {med['xprof_mib']:.0f} MiB | ratio of medians "
          f"{med['runlens_s'] / med['xprof_s']:.3f} | median of round ratios "
          f"{med['ratio']:.3f} (target <= 0.25)"
          + (f" | before {med['before_s']:.3f} s {med['before_mib']:.0f} MiB"
             if "before_s" in med else ""))


# ------------------------------------------------------------------------------- stages

# (stage, module, function): wall time inside each, less the stages nested in it.
STAGES = [
    ("load: detect, key, setup", "runlens.analyzer.engines", "load_run"),
    ("read: open, plane metadata", "runlens.analyzer.sources.xplane", "planes_of"),
    ("read: HLO modules (metadata plane)", "runlens.analyzer.sources.xplane_hlo",
     "read_programs"),
    ("read: host planes", "runlens.analyzer.sources.xplane_read", "_read_host"),
    ("read: device planes", "runlens.analyzer.sources.xplane_device", "read_gpu"),
    ("attribution (kernels -> HLO ops)", "runlens.analyzer.sources.xla_attribution",
     "attribute"),
    ("read: the rest (collectives, code)", "runlens.analyzer.sources.xplane", "read_file"),
    ("frames", "runlens.analyzer.sources.xplane_read", "frames_of"),
    ("frames", "runlens.analyzer.sources.xplane", "_hlo_frames"),
    ("frames", "runlens.analyzer.sources", "raw_frames"),
    ("frames", "runlens.analyzer.load", "derive_keys"),
    ("view: scopes", "runlens.analyzer.analysis.views", "scope_view"),
    ("JSON rendering", "runlens.analyzer.render.views", "view_json"),
    ("print", "runlens.cli_options", "emit"),
    ("command: the rest (notes, options)", "runlens.cli", "_run_view"),
]
BACKGROUND = [("cache: frames written (writer thread)", "runlens.analyzer.cache", "store"),
              ("cache: products written (writer thread)", "runlens.analyzer.productcache",
               "_write")]


def stages_child(path: str, modules: list[str]) -> None:
    """In a fresh process: the imports, then the command with its stages timed."""
    import importlib
    import threading

    start, cpu = time.perf_counter(), time.thread_time()
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module only importable as a side effect
            pass
    spent: dict[str, tuple[float, float]] = {"imports (all the command imports)": (
        time.perf_counter() - start, time.thread_time() - cpu)}
    local = threading.local()

    def wrap(stage: str, fn: Any) -> Any:
        def timed_fn(*args: Any, **kwargs: Any) -> Any:
            stack = local.__dict__.setdefault("stack", [])
            stack.append([0.0, 0.0])
            t, c = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                took, cpu = time.perf_counter() - t, time.thread_time() - c
                nested = stack.pop()
                was = spent.get(stage, (0.0, 0.0))
                spent[stage] = (was[0] + took - nested[0], was[1] + cpu - nested[1])
                if stack:
                    stack[-1][0] += took
                    stack[-1][1] += cpu
        return timed_fn

    for stage, module, name in STAGES + BACKGROUND:
        _patch(sys.modules[module], name, lambda fn, s=stage: wrap(s, fn))
    from runlens.analyzer import cache
    from runlens.cli import main

    sys.argv = ["analyze", "scopes", path, "--format", "json", "--min-micros", "0"]
    t, c = time.perf_counter(), time.thread_time()
    try:
        main(standalone_mode=False)
    except SystemExit:
        pass
    command = (time.perf_counter() - t, time.thread_time() - c)
    t, c = time.perf_counter(), time.thread_time()
    cache.wait()
    spent["cache: wait at exit"] = (time.perf_counter() - t, time.thread_time() - c)
    spent["(total in the command, before the wait)"] = command
    sys.stderr.write("STAGES " + json.dumps(spent) + "\n")


def _patch(module: Any, name: str, make: Any) -> None:
    """module.name wrapped, and every runlens module's import of it."""
    fn = getattr(module, name)
    if module.__name__ == "runlens.analyzer.analysis.views" and name == "scope_view":
        views = module.VIEWS
        for kind, f in list(views.items()):
            if kind == "scopes":
                views[kind] = make(f)
        return
    new = make(fn)
    for other in list(sys.modules.values()):
        if getattr(other, "__name__", "").startswith("runlens") and \
                getattr(other, name, None) is fn:
            setattr(other, name, new)


def modules_imported(path: Path, env: dict[str, str], tree: Path | None) -> list[str]:
    code = (f"import sys\nsys.path[:0] = {[str(tree)] if tree else []!r}\n"
            "from runlens.cli import main\n"
            f"sys.argv = ['analyze', 'scopes', {str(path)!r}, '--format', 'json', "
            "'--min-micros', '0']\n"
            "try:\n    main(standalone_mode=False)\nexcept SystemExit:\n    pass\n"
            "from runlens.analyzer import cache\ncache.wait()\n"
            "sys.stderr.write('MODULES ' + ' '.join(sys.modules) + '\\n')\n")
    with tempfile.TemporaryDirectory() as cache_dir:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**env, "RUNLENS_CACHE_DIR": cache_dir}, check=True)
    line = [s for s in done.stderr.splitlines() if s.startswith("MODULES ")][-1]
    return [m for m in line.split()[1:] if m not in ("__main__", "sys", "builtins")]


def stages(path: Path, env: dict[str, str], tree: Path | None = None) -> None:
    """The stages of this checkout's command, or (`tree`) of the one in tree/runlens."""
    modules = modules_imported(path, env, tree)
    with tempfile.TemporaryDirectory() as cache_dir:
        t = time.perf_counter()
        done = subprocess.run([sys.executable, __file__, "--stages-child", str(path),
                               "--modules", ",".join(modules),
                               *(["--tree", str(tree)] if tree else [])], capture_output=True,
                              text=True, env={**env, "RUNLENS_CACHE_DIR": cache_dir},
                              check=True)
        wall = time.perf_counter() - t
    line = [s for s in done.stderr.splitlines() if s.startswith("STAGES ")][-1]
    spent = json.loads(line[len("STAGES "):])
    total = spent.pop("(total in the command, before the wait)")
    background = {k: spent.pop(k) for k in list(spent) if "writer thread" in k}
    print(f"stages of one cold runlens command{f' of {tree}' if tree else ''} "
          f"(wall {wall:.3f} s, the interpreter's start "
          "and exit included; per stage: wall ms, and CPU ms of the thread it ran in):")
    for stage, (s, c) in spent.items():
        print(f"  {stage:42s} {s * 1e3:7.1f} {c * 1e3:7.1f}")
    rest = [total[i] - sum(v[i] for k, v in spent.items()
                           if not k.startswith(("imports", "cache: wait"))) for i in (0, 1)]
    print(f"  {'other (click, threads, gaps)':42s} {rest[0] * 1e3:7.1f} {rest[1] * 1e3:7.1f}")
    for stage, (s, c) in background.items():
        print(f"  {stage:42s} {s * 1e3:7.1f} {c * 1e3:7.1f} (beside the command: what is "
              "left of it at exit is the wait)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--file", type=Path, default=None,
                    help="the .xplane.pb (default: xf_long.tar.xz unpacked in a temp folder)")
    ap.add_argument("--stages", action="store_true",
                    help="also where runlens's time goes, stage by stage")
    ap.add_argument("--before", type=Path, default=None,
                    help="a folder holding another checkout as runlens/ (built): also timed")
    ap.add_argument("--stages-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--modules", default="", help=argparse.SUPPRESS)
    ap.add_argument("--tree", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.stages_child:
        if args.tree:
            sys.path.insert(0, str(args.tree))
        stages_child(args.stages_child, [m for m in args.modules.split(",") if m])
        return
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    compile_bytecode(env, ROOT)
    if args.before:
        compile_bytecode(env, args.before)
    with tempfile.TemporaryDirectory(prefix="cold-xspace-") as folder:
        path = args.file or unpacked(folder)
        print(json.dumps({**machine(), "xprof": _version("xprof"),
                          "file": str(path), "mb": round(path.stat().st_size / 1e6, 1),
                          "load_avg": os.getloadavg()}))
        rows = rounds(path, args.rounds, env, args.before)
        report(rows)
        if args.stages:
            stages(path, env)
            if args.before:
                stages(path, env, args.before)
        print(f"load average after: {os.getloadavg()}")


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


if __name__ == "__main__":
    main()
