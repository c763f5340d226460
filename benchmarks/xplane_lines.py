"""Per-line cost of reading an XSpace: many lines of one event each (issue 25).

    python benchmarks/xplane_lines.py [--lines 100000] [--repeat 3] [--xprof]

Builds a profile of N host lines (threads) holding one TF op event each (as a host with
many short-lived threads records them), then times, each in a fresh process, best of
`--repeat` (wall and CPU, from getrusage):
- runlens C decoder: `read_file(path, native=True)` (lines decoded in batches);
- runlens protobuf walk: `read_file(path, native=False)`;
- with --xprof, xprof's `xspace_to_tool_data([copy], "framework_op_stats", {})`.
Each includes its imports (polars and numpy for runlens). CPU: user + sys of all threads.
Before issue 25, each line was one task of the decoding pool (~90 us a line: 100k lines
took 21 s, while 1M events on few lines take 0.8 s).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

_CHILD = """
import json, resource, sys, time
from pathlib import Path
path, what = Path(sys.argv[1]), sys.argv[2]
u0 = resource.getrusage(resource.RUSAGE_SELF)
cpu0 = u0.ru_utime + u0.ru_stime
t = time.perf_counter()
if what == "xprof":
    from xprof.convert import raw_to_tool_data
    raw_to_tool_data.xspace_to_tool_data([str(path)], "framework_op_stats", {})
    rows = -1
else:
    from runlens.analyzer.sources.xplane import read_file
    rows = read_file(path, "w", native=what == "native").frames["executions"].height
wall = time.perf_counter() - t
u = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall": wall, "rows": rows, "peak_mib": u.ru_maxrss / 1024,
                  "cpu": u.ru_utime + u.ru_stime - cpu0}))
"""


def build(n: int, path: Path) -> None:
    from runlens.analyzer.proto import xplane_pb2

    space = xplane_pb2.XSpace()
    plane = space.planes.add(id=1, name="/host:CPU")
    plane.event_metadata[1].CopyFrom(xplane_pb2.XEventMetadata(id=1, name="dense/MatMul:MatMul"))
    for i in range(n):
        line = plane.lines.add(id=i, name=f"tf_executor/{i}", timestamp_ns=1000 + i)
        line.events.add(metadata_id=1, offset_ps=i * 10, duration_ps=1000)
    path.write_bytes(space.SerializeToString())


def time_one(path: Path, what: str) -> dict:
    target = path
    if what == "xprof":  # it caches its result beside its input: a new copy each time
        fresh = Path(tempfile.mkdtemp(dir=path.parent))
        target = fresh / path.name
        shutil.copy(path, target)
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(target), what],
                          capture_output=True, text=True, check=True,
                          env=dict(os.environ))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--xprof", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lines.xplane.pb"
        build(a.lines, path)
        print(f"{a.lines:,} one-event lines, {path.stat().st_size / 2**20:.1f} MiB")
        sides = ["native", "protobuf"] + (["xprof"] if a.xprof else [])
        results: dict[str, list[dict]] = {s: [] for s in sides}
        for _ in range(a.repeat):
            for side in sides:
                results[side].append(time_one(path, side))
        for side, runs in results.items():
            best = min(runs, key=lambda r: r["wall"])
            walls = ", ".join(f"{r['wall']:.2f}" for r in runs)
            cpu = min(r["cpu"] for r in runs)
            print(f"{side:9s} wall best {best['wall']:.2f} s of {walls}; CPU best "
                  f"{cpu:.2f} s; rows {best['rows']:,}; peak {best['peak_mib']:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
