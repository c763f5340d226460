"""Ingest of a big XSpace profile: runlens vs xprof's framework_op_stats conversion.

    python benchmarks/xplane.py build --copies 440 -o /tmp/big.xplane.pb
    python benchmarks/xplane.py run /tmp/big.xplane.pb

`build` makes a big profile from real events: every line of the public GPU profile
(../shared/data/xplane: TF2 BERT, host + 8 GPU planes) is repeated `--copies` times, each
copy shifted in time by the line's span and its group_id (step) by the file's step count,
so the result is that profile run for `copies` times as many steps. Lines are encoded one
at a time (memory stays small).

`run` times, each in a fresh process (peak RSS from getrusage, of that process):
- runlens: `load_run(path, use_cache=False)` and the per-op frame a view needs
  (`run.nodes` grouped by op), i.e. everything `analyze ops --no-cache` computes;
- xprof: `xspace_to_tool_data([copy], "framework_op_stats", {})` on a fresh copy of the
  file (it caches results beside its input; a warm cache would be no conversion).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
GPU = (REPO.parent / "shared" / "data" / "xplane"
       / "tensorflow__profiler__GPU-multi-worker__34.83.195.179_6003.xplane.pb")


def build(source: Path, copies: int, out: Path) -> None:
    from runlens.analyzer.proto import xplane_pb2
    from tests.wire_bytes import delimited

    space = xplane_pb2.XSpace.FromString(source.read_bytes())
    tmp = out.with_name(f".{out.name}.tmp")
    events = 0
    with open(tmp, "wb") as f:
        for plane in space.planes:
            group_ids = {k for k, v in plane.stat_metadata.items() if v.name == "group_id"}
            rest = xplane_pb2.XPlane()
            rest.CopyFrom(plane)
            del rest.lines[:]
            lines = []
            for line in plane.lines:
                if not line.events:
                    continue
                span = max(e.offset_ps + e.duration_ps for e in line.events) + 1_000_000
                big = xplane_pb2.XLine()
                big.CopyFrom(line)
                del big.events[:]
                for k in range(copies):
                    for e in line.events:
                        c = big.events.add()
                        c.CopyFrom(e)
                        c.offset_ps = e.offset_ps + k * span
                        for s in c.stats:
                            if s.metadata_id in group_ids:
                                s.int64_value += k * 8
                events += len(big.events)
                lines.append(delimited(3, big.SerializeToString()))
            body = rest.SerializeToString() + b"".join(lines)
            f.write(delimited(1, body))
    tmp.replace(out)
    print(f"built {out}: {out.stat().st_size / 2**20:.0f} MiB, {events:,} events "
          f"({copies} copies of {source.name})")


_RUNLENS = """
import json, resource, sys, time
t = time.perf_counter()
import polars as pl
from runlens.analyzer.load import load_run
run = load_run(sys.argv[1], use_cache=False, jobs=2)
ops = run.nodes_lazy().group_by("op_type").agg(pl.col("op_end_rel_ns").sum()).collect()
r = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"seconds": time.perf_counter() - t, "executions": run.executions.height,
                  "op_types": ops.height, "cpu": r.ru_utime + r.ru_stime,
                  "peak_rss": r.ru_maxrss * 1024}))
"""

_XPROF = """
import json, resource, sys, time
t = time.perf_counter()
from xprof.convert import raw_to_tool_data
data, _ = raw_to_tool_data.xspace_to_tool_data([sys.argv[1]], "framework_op_stats", {})
r = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"seconds": time.perf_counter() - t, "bytes": len(data or b""),
                  "cpu": r.ru_utime + r.ru_stime, "peak_rss": r.ru_maxrss * 1024}))
"""

_BASELINE = """
import json, resource
import polars, numpy
from runlens.analyzer.load import load_run
print(json.dumps({"peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def _child(code: str, *args: str, repo: Path = REPO) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         cwd=repo, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _line(what: str, runs: list[dict]) -> float:
    best = min(r["seconds"] for r in runs)
    print(f"{what}: best {best:.2f} s of {[round(r['seconds'], 2) for r in runs]}; "
          f"CPU (user+sys, all threads) best {min(r['cpu'] for r in runs):.2f} s")
    return best


def run(path: Path, repeat: int, before: Path | None = None) -> None:
    """Each repeat runs runlens (and the `before` checkout's, if given) then xprof, so
    that all see the same load."""
    size = path.stat().st_size
    base = _child(_BASELINE)["peak_rss"]
    ours, old, theirs = [], [], []
    for _ in range(repeat):
        ours.append(_child(_RUNLENS, str(path)))
        if before is not None:
            old.append(_child(_RUNLENS, str(path), repo=before))
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
            copy = Path(tmp) / path.name
            shutil.copy(path, copy)
            theirs.append(_child(_XPROF, str(copy)))
    peak = max(r["peak_rss"] for r in ours)
    print(f"file {size / 2**20:.0f} MiB, {ours[0]['executions']:,} op executions")
    best_ours = _line("runlens load + per-op", ours)
    if old:
        best_old = _line(f"runlens at {before} (before)", old)
        print(f"before: peak RSS {max(r['peak_rss'] for r in old) / size:.2f}x the file; "
              f"speed-up {min(r['seconds'] for r in theirs) / best_old:.1f}x")
    best_theirs = _line("xprof framework_op_stats", theirs)
    print(f"speed-up {best_theirs / best_ours:.1f}x (CPU time: "
          f"{min(r['cpu'] for r in theirs) / min(r['cpu'] for r in ours):.1f}x)")
    print(f"runlens peak RSS {peak / 2**20:.0f} MiB = {peak / size:.2f}x the file "
          f"({(peak - base) / 2**20:.0f} MiB above the {base / 2**20:.0f} MiB of its imports); "
          f"xprof peak RSS {max(r['peak_rss'] for r in theirs) / 2**20:.0f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--copies", type=int, default=440)
    b.add_argument("--source", type=Path, default=GPU)
    b.add_argument("-o", "--out", type=Path, required=True)
    r = sub.add_parser("run")
    r.add_argument("path", type=Path)
    r.add_argument("--repeat", type=int, default=2)
    r.add_argument("--before", type=Path,
                   help="another checkout (built) to time too, e.g. the commit before a change")
    args = ap.parse_args()
    if args.cmd == "build":
        started = time.perf_counter()
        build(args.source, args.copies, args.out)
        print(f"in {time.perf_counter() - started:.0f} s")
    else:
        run(args.path, args.repeat, args.before)


if __name__ == "__main__":
    main()
