"""A large valid XLA module in a GPU profile (issue 29 point 4): `fusions` fusions of
64x64 dots (3 x fusions + 1 HLO instructions, one kernel each; tests/hlo_modules.py),
analysed with every fact known. Prints the build, the analysis's wall time and the
analysing process's peak RSS (VmHWM), and checks the facts against the rule.

    python benchmarks/hlo_module.py build --fusions 333333 OUT.xplane.pb
    /usr/bin/time -v analyze ops --no-cache OUT.xplane.pb          # or:
    python benchmarks/hlo_module.py run OUT.xplane.pb
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build(fusions: int, out: Path) -> None:
    from tests import hlo_modules as hm

    t = time.perf_counter()
    module = hm.module(fusions)
    data = hm.space(module)
    out.write_bytes(data)
    count = sum(len(c.instructions) for c in module.computations)
    print(f"built {count:,} instructions, {len(data) / 2**20:.1f} MiB in "
          f"{time.perf_counter() - t:.1f} s")


def run(path: Path) -> None:
    from runlens.analyzer.load import load_run

    t = time.perf_counter()
    loaded = load_run(path, use_cache=False)
    work = loaded.hlo_work
    took = time.perf_counter() - t
    peak = next(int(ln.split()[1]) for ln in open("/proc/self/status")
                if ln.startswith("VmHWM")) // 1024
    kernels = loaded.executions.height
    d = 64
    assert work.get_column("execs").sum() == kernels
    assert work.get_column("float_ops").sum() == kernels * 2.0 * d**3, "float ops"
    assert work.get_column("out_bytes").sum() == kernels * d * d * 4, "bytes"
    assert work.null_count().row(0)[1:5] == (0, 0, 0, 0)
    print(f"analysed {kernels:,} kernels of {path.name}: {took:.1f} s, peak RSS {peak} MiB, "
          "every fact known")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--fusions", type=int, default=33_333)
    b.add_argument("out", type=Path)
    r = sub.add_parser("run")
    r.add_argument("path", type=Path)
    a = ap.parse_args()
    build(a.fusions, a.out) if a.cmd == "build" else run(a.path)


if __name__ == "__main__":
    main()
