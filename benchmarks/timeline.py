"""Timeline benchmark: `analyze timeline` (analyzer/timeline/ + render/chrome_trace.py)
against tf.timeline's Timeline.generate_chrome_trace_format, in the same process.

1. Builds a run dir of >= --node-stats node stats (default 200,000) from a fixture's step
   files with benchmarks/engine.py's build_run (copies shifted in time so that steps do
   not overlap, durations jittered).
2. Loads it once with load_run (not timed).
3. runlens: export() of every step to a .json file, best of --repeat: with dataflow and
   memory (what tf.timeline is asked for), then also with the critical path (our
   default), and the default to .json.gz. Then the same K steps tf.timeline gets.
4. tf.timeline on the first --tf-steps steps (K) of the same run: the step files are
   parsed first (not timed), then for each step Timeline(step_stats)
   .generate_chrome_trace_format(show_dataflow=True, show_memory=True) and the string
   written to a file, as tf.train.ProfilerHook does; best of --repeat.
   Each repeat writes new files on both sides, as a first export does (--overwrite: the
   same names every repeat; on ext4 replacing a file also flushes the new one's data).
5. Prints a Markdown table; rates are node stats per second.

usage: python benchmarks/timeline.py [--node-stats 200000] [--fixture rnn_while]
           [--tf-steps 32] [--repeat 3] [--seed 0] [--overwrite]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def best_of(repeat: int, fn: Callable[[int], Any]) -> tuple[float, Any]:
    """Best time of fn(0), fn(1), ...; the repeat index lets each write its own files."""
    best, result = float("inf"), None
    for i in range(repeat):
        t0 = time.perf_counter()
        result = fn(i)
        best = min(best, time.perf_counter() - t0)
    return best, result


def parse_args() -> argparse.Namespace:
    """The command line (parsed before any heavy import, so that --help is fast)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--node-stats", type=int, default=200_000)
    ap.add_argument("--fixture", default="rnn_while")
    ap.add_argument("--tf-steps", type=int, default=32,
                    help="tf.timeline runs on the first N steps (default 32)")
    ap.add_argument("--repeat", type=int, default=3, help="best of N (default 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--overwrite", action="store_true",
                    help="every repeat writes the same file names (on ext4, replacing a "
                         "file flushes the new one's data) instead of new files")
    return ap.parse_args()


def fresh(name: str, i: int, overwrite: bool) -> str:
    """The file name of repeat i: new files unless --overwrite."""
    return name if overwrite else f"r{i}-{name}"


def time_runlens(run: Any, tmp: Path, args: argparse.Namespace, label: str,
                 chosen: list[int], nodes: int, name: str, **kw: Any) -> dict[str, Any]:
    """One table row: export() of `chosen` steps to tmp/name, best of --repeat; the
    files are removed afterwards (disk space)."""
    from runlens.analyzer.render.chrome_trace import export
    from runlens.analyzer.timeline import TimelineOptions

    opts = TimelineOptions(tuple(chosen), **kw)
    sec, w = best_of(args.repeat,
                     lambda i: export(run, tmp / fresh(name, i, args.overwrite), opts))
    written = tmp / fresh(name, args.repeat - 1, args.overwrite)
    row = {"name": label, "steps": len(chosen), "nodes": nodes,
           "seconds": sec, "mb": w.json_bytes / 1e6,
           "file_mb": written.stat().st_size / 1e6}
    for i in range(args.repeat):  # disk space
        (tmp / fresh(name, i, args.overwrite)).unlink(missing_ok=True)
    return row


def runlens_rows(run: Any, tmp: Path, args: argparse.Namespace, subset: list[int],
                 n_subset: int) -> list[dict[str, Any]]:
    """runlens's rows: what tf.timeline is asked for (dataflow + memory), our default
    (+ critical path), gzip, and the same steps tf.timeline gets."""
    steps, n_all = run.steps, run.nodes.height
    return [
        time_runlens(run, tmp, args, "runlens, dataflow + memory", steps, n_all, "a.json",
                     critical_path=False),
        time_runlens(run, tmp, args, "runlens, dataflow + memory + critical path (default)",
                     steps, n_all, "b.json"),
        time_runlens(run, tmp, args, "runlens, default, .json.gz", steps, n_all,
                     "c.json.gz"),
        time_runlens(run, tmp, args, f"runlens, dataflow + memory, first {len(subset)} steps",
                     subset, n_subset, "d.json", critical_path=False),
    ]


def tf_timeline_row(tmp: Path, args: argparse.Namespace, n_steps: int,
                    n_subset: int) -> dict[str, Any]:
    """tf.timeline's row: Timeline(step_stats).generate_chrome_trace_format + the file
    write per step, as ProfilerHook does, best of --repeat; parsing is not timed."""
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.client import timeline as tf_timeline

    files = sorted((tmp / "run" / "steps").glob("step-*.pb"))[:n_steps]
    metas = [config_pb2.RunMetadata.FromString(p.read_bytes()) for p in files]
    tf_nodes = sum(len(d.node_stats) for md in metas for d in md.step_stats.dev_stats)
    assert tf_nodes == n_subset, (tf_nodes, n_subset)

    def tf_export(repeat: int) -> int:
        size = 0
        for i, md in enumerate(metas):
            text = tf_timeline.Timeline(md.step_stats).generate_chrome_trace_format(
                show_dataflow=True, show_memory=True)
            (tmp / fresh(f"tf-{i}.json", repeat, args.overwrite)).write_text(text)
            size += len(text)
        return size

    sec, size = best_of(args.repeat, tf_export)
    return {"name": f"tf.timeline, show_dataflow + show_memory, first "
                    f"{n_steps} steps", "steps": n_steps, "nodes": tf_nodes,
            "seconds": sec, "mb": size / 1e6, "file_mb": size / 1e6}


def print_table(rows: list[dict[str, Any]], tf_rate: float) -> None:
    """The Markdown table; every rate against tf.timeline's."""
    print("\n| exporter | steps | node stats | seconds | node stats/s | MB of JSON | "
          "vs tf.timeline |\n|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        rate = r["nodes"] / r["seconds"]
        mb = f"{r['mb']:.1f}" + (f" ({r['file_mb']:.1f} gz)" if r["file_mb"] != r["mb"]
                                 else "")
        print(f"| {r['name']} | {r['steps']} | {r['nodes']:,} | {r['seconds']:.3f} | "
              f"{rate:,.0f} | {mb} | {rate / tf_rate:.1f}x |")


def main() -> int:
    args = parse_args()
    from engine import build_run, machine

    from runlens.analyzer.load import load_run

    m = machine()
    print(f"machine: {m['nproc']} CPUs ({m['cpu']}), {m['mem_gib']} GiB RAM, {m['os']}; "
          f"Python {m['python']}, polars {m['polars']}, tensorflow-cpu {m['tensorflow']}")
    tmp = Path(tempfile.mkdtemp(prefix="runlens-timeline-bench-"))
    try:
        built = build_run(ROOT / "fixtures" / "runs" / args.fixture, tmp / "run",
                          args.node_stats, args.seed)
        run = load_run(tmp / "run", use_cache=False)
        print(f"built {built['steps']} steps of {args.fixture}: {run.nodes.height:,} node "
              f"stats ({run.outputs.height:,} outputs, {run.allocations.height:,} allocation "
              "records); loaded once, not timed")
        subset = run.steps[: args.tf_steps]
        n_subset = run.nodes.filter(run.nodes["step"].is_in(subset)).height
        rows = runlens_rows(run, tmp, args, subset, n_subset)
        tf_row = tf_timeline_row(tmp, args, len(subset), n_subset)
        rows.append(tf_row)
        print_table(rows, tf_row["nodes"] / tf_row["seconds"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
