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


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _delimited(field: int, payload: bytes) -> bytes:
    return _key(field, 2) + _varint(len(payload)) + payload


def build(source: Path, copies: int, out: Path) -> None:
    from analyzer.proto import xplane_pb2

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
                lines.append(_delimited(3, big.SerializeToString()))
            body = rest.SerializeToString() + b"".join(lines)
            f.write(_delimited(1, body))
    tmp.replace(out)
    print(f"built {out}: {out.stat().st_size / 2**20:.0f} MiB, {events:,} events "
          f"({copies} copies of {source.name})")


_RUNLENS = """
import json, resource, sys, time
t = time.perf_counter()
import polars as pl
from analyzer.load import load_run
run = load_run(sys.argv[1], use_cache=False, jobs=2)
ops = run.nodes_lazy().group_by("op_type").agg(pl.col("op_end_rel_ns").sum()).collect()
print(json.dumps({"seconds": time.perf_counter() - t, "executions": run.executions.height,
                  "op_types": ops.height,
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""

_XPROF = """
import json, resource, sys, time
t = time.perf_counter()
from xprof.convert import raw_to_tool_data
data, _ = raw_to_tool_data.xspace_to_tool_data([sys.argv[1]], "framework_op_stats", {})
print(json.dumps({"seconds": time.perf_counter() - t, "bytes": len(data or b""),
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""

_BASELINE = """
import json, resource
import polars, numpy
from analyzer.load import load_run
print(json.dumps({"peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def _child(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         cwd=REPO, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(path: Path, repeat: int) -> None:
    size = path.stat().st_size
    base = _child(_BASELINE)["peak_rss"]
    ours = [_child(_RUNLENS, str(path)) for _ in range(repeat)]
    theirs = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
            copy = Path(tmp) / path.name
            shutil.copy(path, copy)
            theirs.append(_child(_XPROF, str(copy)))
    best_ours = min(r["seconds"] for r in ours)
    best_theirs = min(r["seconds"] for r in theirs)
    peak = max(r["peak_rss"] for r in ours)
    print(f"file {size / 2**20:.0f} MiB, {ours[0]['executions']:,} op executions")
    print(f"runlens load + per-op: best {best_ours:.2f} s of "
          f"{[round(r['seconds'], 2) for r in ours]}")
    print(f"xprof framework_op_stats: best {best_theirs:.2f} s of "
          f"{[round(r['seconds'], 2) for r in theirs]}")
    print(f"speed-up {best_theirs / best_ours:.1f}x")
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
    args = ap.parse_args()
    if args.cmd == "build":
        started = time.perf_counter()
        build(args.source, args.copies, args.out)
        print(f"in {time.perf_counter() - started:.0f} s")
    else:
        run(args.path, args.repeat)


if __name__ == "__main__":
    main()
