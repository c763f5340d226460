"""Capture the real runs the CI validation study (benchmarks/ci_validation.py) resamples.

Each capture is its own process (fixtures/compare_transformer.py, or
benchmarks/ci_convnet.py for the convnet), started `--gap`
seconds after the previous one ends, configs interleaved, so same-config runs are
separate processes minutes apart on a machine whose speed drifts, like CI runs are.

usage: python benchmarks/ci_capture.py OUT_DIR [--steps 30] [--gap 60] [--runs tf_base=4 ...]
       [--warmup 0]
Writes OUT_DIR/{tf_base,tf_wide,mlp_base,mlp_wide,cnn_base,cnn_wide}_N (partition graphs
dropped). The convnet's runs are only made when named (--runs cnn_base=4 cnn_wide=2).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRANSFORMER = REPO / "fixtures" / "compare_transformer.py"
CONVNET = REPO / "benchmarks" / "ci_convnet.py"
# (name, script and its extra arguments, how many runs without --runs)
CONFIGS = [("tf_base", [TRANSFORMER], 8), ("mlp_base", [TRANSFORMER, "--mlp"], 8),
           ("tf_wide", [TRANSFORMER, "--wide-block", "3"], 3),
           ("mlp_wide", [TRANSFORMER, "--wide-mlp"], 2),
           ("cnn_base", [CONVNET], 0), ("cnn_wide", [CONVNET, "--wide-conv", "1"], 0)]


def schedule(counts: dict[str, int] | None = None) -> list[tuple[str, list]]:
    """Interleave the configs: base runs spread over the whole session."""
    todo = {name: [f"{name}_{i}" for i in range(n if counts is None else counts.get(name, 0))]
            for name, _, n in CONFIGS}
    args = {name: a for name, a, _ in CONFIGS}
    out: list[tuple[str, list]] = []
    while any(todo.values()):
        for name in todo:
            if todo[name]:
                out.append((todo[name].pop(0), args[name]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--gap", type=float, default=60.0)
    ap.add_argument("--warmup", type=int, default=None,
                    help="untraced steps before the traced ones (the scripts' default: 2; "
                         "0 traces from the first step, as a new user's run would be)")
    ap.add_argument("--runs", nargs="*", metavar="CONFIG=N",
                    help="only these configs, N runs each (e.g. tf_base=4 mlp_base=4): "
                         "a held-out set for the study")
    args = ap.parse_args()
    counts = None
    if args.runs:
        counts = {k: int(v) for k, v in (r.split("=") for r in args.runs)}
    args.out.mkdir(parents=True, exist_ok=True)
    for k, (run, extra) in enumerate(schedule(counts)):
        if (args.out / run).exists():
            continue
        if k:
            time.sleep(args.gap)
        started = time.time()
        script, *extra = extra
        if args.warmup is not None:
            extra = [*extra, "--warmup", str(args.warmup)]
        subprocess.run([sys.executable, str(script),
                        "--out", str(args.out / run), "--steps", str(args.steps), *extra],
                       check=True, stderr=subprocess.DEVNULL)
        print(f"{time.strftime('%H:%M:%S')} {run} in {time.time() - started:.0f}s", flush=True)


if __name__ == "__main__":
    main()
