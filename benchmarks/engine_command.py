"""benchmarks/engine.py --command: the cold `analyze ops RUN` command as a user runs it,
against tfprof in the same round.

Each round: the command once in a fresh process with an empty RUNLENS_CACHE_DIR of its
own (nothing cached anywhere: the run dir holds no .runlens, and the cache goes to that
folder), timed from the moment it is started to the moment it has exited: the
interpreter's start, every import, reading the step files, the per-node numbers, the
view, printing it, and writing the cache (the command waits for its background writer
before it exits, as a user's does); then the same command again with that cache (warm);
then tfprof (engine_measure.child_tfprof) on the first --tfprof-steps steps. Before the
rounds the package is byte-compiled (a pip install has .pyc files; without them every
command recompiles ~70 ms of modules).

Peak RSS of the command: the largest of its own `ru_maxrss` (os.wait4) and the sum of
the RSS of its whole process tree sampled every 20 ms (ingest may start threads or
processes; the sum covers them).
"""

from __future__ import annotations

import compileall
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.engine_measure import TreePeak
from benchmarks.machine import ROOT, cpu_busy_seconds

VIEW = "ops"


def command_line(run: Path) -> list[str]:
    """`analyze ops RUN`: the console script beside this interpreter when there is one
    (what `pip install` made), else the same entry point through the interpreter."""
    script = Path(sys.executable).with_name("analyze")
    if script.is_file():
        return [sys.executable, str(script), VIEW, str(run)]
    return [sys.executable, "-c", "import sys; from runlens.cli import main; "
            "sys.argv[0] = 'analyze'; sys.exit(main())", VIEW, str(run)]


def byte_compile() -> None:
    """.pyc files for the package, as an installed runlens has them."""
    compileall.compile_dir(str(ROOT), quiet=1, rx=re.compile(r"[/\\]\.(venv|git)[/\\]"))


def time_command(cmd: list[str], cache_dir: Path) -> dict[str, Any]:
    """Run `cmd` with RUNLENS_CACHE_DIR=`cache_dir`: wall seconds from start to exit, its
    CPU seconds, its own peak RSS and its process tree's sampled peak (KiB)."""
    env = dict(os.environ, RUNLENS_CACHE_DIR=str(cache_dir))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    busy0 = cpu_busy_seconds()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    out = [b"", b""]

    def drain(i: int, stream: Any) -> None:
        out[i] = stream.read()

    readers = [threading.Thread(target=drain, args=(i, s), daemon=True)
               for i, s in enumerate((proc.stdout, proc.stderr))]
    with TreePeak(proc.pid, 0.02) as sampled:
        for r in readers:
            r.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    for r in readers:
        r.join()
    peak = [sampled.peak_kib]
    proc.returncode = os.waitstatus_to_exitcode(status)
    busy1 = cpu_busy_seconds()
    cpu = usage.ru_utime + usage.ru_stime
    return {"returncode": proc.returncode, "seconds": wall, "cpu_seconds": cpu,
            "self_peak_rss_kib": usage.ru_maxrss, "tree_peak_rss_kib": peak[0],
            "peak_rss_kib": max(usage.ru_maxrss, peak[0]),
            "stdout_lines": len(out[0].splitlines()),
            "stdout_digest": hashlib.sha256(out[0]).hexdigest(),
            "stderr_tail": out[1].decode(errors="replace").strip().splitlines()[-3:],
            # CPU used meanwhile by anything but the command (this script's sampler
            # included): a sign that the figure is disturbed
            "other_cpu_seconds": (None if busy0 is None or busy1 is None
                                  else max(0.0, busy1 - busy0 - cpu))}


def _cache_written(cache_dir: Path) -> bool:
    return any(cache_dir.rglob("key.json"))


def measure_command_rounds(run: Path, rounds: int, tfprof: Any) -> dict[str, Any] | None:
    """--rounds rounds of: the cold command, the warm command, tfprof (`tfprof()`: its
    result dict or None; `tfprof` None: --no-tfprof). None when a measurement failed."""
    cmd = command_line(run)
    print("command: " + " ".join(cmd) + "  (RUNLENS_CACHE_DIR: a fresh empty folder)")
    byte_compile()
    cold: list[dict[str, Any]] = []
    warm: list[dict[str, Any]] = []
    tf_runs: list[dict[str, Any]] = []
    for round_no in range(1, max(1, rounds) + 1):
        print(f"round {round_no}:")
        cache_dir = Path(tempfile.mkdtemp(prefix="runlens-bench-cache-"))
        try:
            for kind, into in (("cold", cold), ("warm", warm)):
                r = time_command(cmd, cache_dir)
                if r["returncode"] != 0 or not r["stdout_lines"]:
                    print(f"command ({kind}) failed: exit {r['returncode']}: "
                          f"{r['stderr_tail']}")
                    return None
                if kind == "cold" and not _cache_written(cache_dir):
                    print("WARNING: the cold command left no cache")
                if kind == "warm" and r["stdout_digest"] != cold[-1]["stdout_digest"]:
                    print("WARNING: the warm command printed other bytes than the cold one")
                if (run / ".runlens").exists():
                    print(f"WARNING: {run / '.runlens'} exists: the command was not cold")
                into.append(r)
                print(f"  {kind} `analyze {VIEW}`: {r['seconds']:.3f} s wall, "
                      f"{r['cpu_seconds']:.2f} CPU-s, peak RSS "
                      f"{r['peak_rss_kib'] / 1024:,.0f} MiB (own "
                      f"{r['self_peak_rss_kib'] / 1024:,.0f}, tree sampled "
                      f"{r['tree_peak_rss_kib'] / 1024:,.0f}), other processes "
                      f"{r['other_cpu_seconds'] or 0:.2f} CPU-s")
                if (r["other_cpu_seconds"] or 0) > max(0.2, 0.1 * r["seconds"]):
                    print(f"WARNING: other processes used {r['other_cpu_seconds']:.2f} CPU-s "
                          f"during this {r['seconds']:.2f} s command; its figures are "
                          "disturbed")
        finally:
            shutil.rmtree(cache_dir, ignore_errors=True)
        if tfprof is None:
            continue
        t = tfprof()
        if t is None:
            return None
        t["ops_rate"] = t["node_stats"] / (t["add_step_seconds"] + t["views"]["ops"])
        tf_runs.append(t)
    return {"cold": cold, "warm": warm, "tfprof": tf_runs}


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def report_command(measured: dict[str, Any], nodes: int) -> list[str]:
    """The per-round table and the medians, as Markdown lines."""
    lines = ["| round | cold command s | node stats/s | tfprof add_step+ops s/Mnode | "
             "vs tfprof add_step+ops | vs tfprof add_step+all views | peak RSS (cold) "
             "| warm command s |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    ratios, ratios_all = [], []
    tf_runs = measured["tfprof"] or [None] * len(measured["cold"])
    for i, (c, w, t) in enumerate(zip(measured["cold"], measured["warm"], tf_runs,
                                      strict=True), start=1):
        rate = nodes / c["seconds"]
        versus = "| n/a | n/a | n/a "
        if t is not None:
            ratio, ratio_all = rate / t["ops_rate"], rate / t["rate"]
            ratios.append(ratio)
            ratios_all.append(ratio_all)
            versus = (f"| {1e6 / t['ops_rate']:.1f} | {ratio:.0f}x | {ratio_all:.0f}x ")
        lines.append(f"| {i} | {c['seconds']:.3f} | {rate:,.0f} {versus}| "
                     f"{c['peak_rss_kib'] / 1024:,.0f} MiB | {w['seconds']:.3f} |")
    cold_s = _median([c["seconds"] for c in measured["cold"]])
    peak = max(c["peak_rss_kib"] for c in measured["cold"])
    lines.append("")
    versus = (f"**{_median(ratios):.0f}x** tfprof add_step + ops view ({min(ratios):.0f}-"
              f"{max(ratios):.0f}x), {_median(ratios_all):.0f}x tfprof add_step + all "
              "views" if ratios else "tfprof not measured")
    lines.append(f"median of {len(measured['cold'])} rounds: cold `analyze {VIEW}` "
                 f"{cold_s:.3f} s for {nodes:,} node stats ({nodes / cold_s:,.0f}/s); "
                 f"{versus}; peak RSS (max over rounds) "
                 f"{peak / 1024:,.0f} MiB; warm "
                 f"{_median([w['seconds'] for w in measured['warm']]):.3f} s")
    return lines
