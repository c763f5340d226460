"""Report benchmark: `analyze report` of a run of >= 1,000,000 node stats.

Builds the run as benchmarks/engine.py does (build_run: the rnn_while fixture's step
files cycled, shifted in time, op times jittered), then times, each in a fresh
subprocess, best of --repeat:

- cold: `analyze report BIG -o page.html` with no cache (ingest + the page: what a first
  report costs; it writes the cache in the background as every command does);
- warm: the same with the cache present (the issue's budget: under 3 s);
- page only: in one process, load the run from the cache (not timed), then the timed
  part: the advisor's findings and `analyzer.report.run_page` (views, step marks,
  critical path, memory, HTML).

and prints the page's size (budget: under 10 MB) and the size of each embedded section.

usage: python benchmarks/report.py [--node-stats 1000000] [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.engine import build_run  # noqa: E402
from benchmarks.machine import machine  # noqa: E402

PAGE_ONLY = """
import sys, time
from runlens import checkers
from runlens.analyzer.load import load_run
from runlens.analyzer.report import run_page
run = load_run(sys.argv[1])
t = time.perf_counter()
html = run_page(run, checkers.run_checks(run), sys.argv[1])
print(time.perf_counter() - t, len(html.encode()))
"""


CPU: list[float] = []  # CPU seconds (user + system) of each timed child, in order


def timed(cmd: list[str]) -> float:
    """Wall seconds of `cmd`; its CPU seconds go to CPU (on a shared machine the wall time
    moves with the load, the CPU time much less)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--node-stats", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="build the run here, keep it")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="runlens-report-bench-"))
    big = args.keep or tmp / "big"
    try:
        if not (big / "steps").is_dir():
            info = build_run(ROOT / "fixtures" / "runs" / "rnn_while", big, args.node_stats, 0)
            print(f"built {info['node_stats']:,} node stats in {info['steps']} steps "
                  f"({info['build_seconds']:.0f} s)")
        page = tmp / "page.html"
        analyze = [sys.executable, "-c", "from runlens import cli; cli.main()", "report", str(big),
                   "-o", str(page)]
        env_cmd = ["env", f"PYTHONPATH={ROOT}", *analyze]
        cold = []
        load_before = os.getloadavg()[0]
        for _ in range(args.repeat):
            shutil.rmtree(big / ".runlens", ignore_errors=True)
            cold.append(timed([*env_cmd, "--no-cache"]))
        cold_cpu = CPU[-args.repeat:]
        timed(env_cmd)  # writes the cache
        warm = [timed(env_cmd) for _ in range(args.repeat)]
        warm_cpu = CPU[-args.repeat:]
        only = []
        for _ in range(args.repeat):
            out = subprocess.run([sys.executable, "-c", PAGE_ONLY, str(big)], check=True,
                                 cwd=ROOT, capture_output=True, text=True,
                                 env={**os.environ, "PYTHONPATH": str(ROOT)})
            only.append(float(out.stdout.split()[0]))
        html = page.read_text(encoding="utf-8")
        data = json.loads(re.findall(r'id="runlens-data">(.*?)</script>', html, re.S)[0])
        sections = {k: len(json.dumps(v, separators=(",", ":")).encode())
                    for k, v in data.items()}
        print(json.dumps({"machine": machine()}, indent=1))
        print(f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
        print(f"\n| measurement | best of {args.repeat} (s) | all runs (s) | CPU s |"
              "\n|---|---:|---|---|")
        for name, values, cpu in (
                ("`analyze report --no-cache` (ingest + page)", cold, cold_cpu),
                ("`analyze report`, warm cache", warm, warm_cpu),
                ("findings + run_page, run loaded", only, [])):
            print(f"| {name} | {min(values):.2f} | "
                  f"{', '.join(f'{v:.2f}' for v in values)} | "
                  f"{', '.join(f'{v:.2f}' for v in cpu) or '-'} |")
        print(f"\npage: {len(html.encode()) / 1e6:.2f} MB; embedded data by section (bytes): "
              + ", ".join(f"{k} {v:,}" for k, v in sorted(sections.items(),
                                                          key=lambda kv: -kv[1])))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
