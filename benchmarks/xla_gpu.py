"""Reading GPU profiles of XLA programs: time per MB, runlens (before/after a change) and
xprof's hlo_stats on the same files.

    python benchmarks/xla_gpu.py [--repeat 5] [--tree DIR] [--xprof]

Files: every vm.xplane.pb of ../shared/data/gpu-jax (JAX on an H200, command buffers on
and off) and the public TF2 GPU profile of ../shared/data/xplane (BERT, 8 GPUs).
runlens: `analyzer.sources.xplane.read_file` (the source's whole read: planes, HLO,
attribution, frames; no cache), best of `--repeat` in this process. `--tree DIR` imports
runlens from DIR/runlens instead (a checkout of another commit, for "before"). `--xprof`:
`xspace_to_tool_data([copy], "hlo_stats", {})` on a fresh copy, best of `--repeat`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"


def files() -> list[Path]:
    found = sorted((SHARED / "gpu-jax").glob("*/plugins/profile/*/*.xplane.pb"))
    return found + sorted((SHARED / "xplane").glob("tensorflow__profiler__GPU*.xplane.pb"))


def best(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--tree", type=Path, default=None)
    ap.add_argument("--xprof", action="store_true")
    args = ap.parse_args()
    if args.tree:
        sys.path.insert(0, str(args.tree))
    from runlens.analyzer.sources.xplane import read_file

    total_mb = total_s = total_x = 0.0
    print(f"{'file':48s} {'MB':>6s} {'runlens ms':>11s} {'ms/MB':>7s}"
          + (f" {'xprof ms':>9s}" if args.xprof else ""))
    for path in files():
        mb = path.stat().st_size / 1e6
        s = best(lambda p=path: read_file(p, "w"), args.repeat)
        line = f"{path.parts[-5][:20] + '/' + path.name[-28:]:48s} {mb:6.2f} {s * 1e3:11.1f} " \
               f"{s * 1e3 / mb:7.1f}"
        if args.xprof:
            x = best(lambda p=path: _xprof(p), args.repeat)
            total_x += x
            line += f" {x * 1e3:9.1f}"
        total_mb, total_s = total_mb + mb, total_s + s
        print(line)
    print(f"{'all':48s} {total_mb:6.2f} {total_s * 1e3:11.1f} {total_s * 1e3 / total_mb:7.1f}"
          + (f" {total_x * 1e3:9.1f}" if args.xprof else ""))


def _xprof(path: Path) -> None:
    from xprof.convert import raw_to_tool_data

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        shutil.copy(path, copy)
        raw_to_tool_data.xspace_to_tool_data([str(copy)], "hlo_stats", {})


if __name__ == "__main__":
    main()
