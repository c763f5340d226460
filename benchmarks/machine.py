"""The machine a benchmark ran on, and how busy it was: CPU model, memory, versions, the
commit measured, machine-wide and own CPU time. Shared by the benchmarks so that each
describes its machine the same way (benchmarks/README.md records these with the figures)."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def mem_total_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024**2
    except OSError:
        pass
    return None


def cpu_busy_seconds() -> float | None:
    """Machine-wide busy CPU time (all cores, incl. steal) from /proc/stat, in seconds."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    ticks = [int(v) for v in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    busy = sum(ticks[:8]) - idle  # user nice system idle iowait irq softirq steal
    return busy / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU time of this process (its RSS sampler) and of its waited-for descendants (a
    child's own waited-for workers included)."""
    import resource

    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        ru = resource.getrusage(who)
        total += ru.ru_utime + ru.ru_stime
    return total


def version(dist: str) -> str:
    for name in (dist, dist.replace("-cpu", "")):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "not installed"


def code_version() -> str:
    """The commit measured, and whether analyzer/ differs from it (the engine under test)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "analyzer"], cwd=ROOT,
                               text=True, capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no git)"
    return head + (" + uncommitted changes in analyzer/" if dirty else "")


def machine() -> dict[str, Any]:
    mem = mem_total_gib()
    return {
        "code": code_version(),
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "mem_gib": round(mem, 1) if mem else None,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "polars": version("polars"),
        "protobuf": version("protobuf"),
        "tensorflow": version("tensorflow-cpu"),
    }
