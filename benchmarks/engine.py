"""Engine benchmark: runlens's ingest + four views vs tfprof's add_step + views.

What it does, in one run:

1. Builds a large run dir (default >= 1,000,000 node stats) from a real fixture
   (fixtures/runs/<name>, default rnn_while): graph.pb and op_log.pb are copied, no
   manifest.json is written, and steps/step-%08d.pb are the fixture's RunMetadata step
   files cycled. In every copy each NodeExecStats is shifted in time (all_start_*,
   scheduled_*, allocation records) so that steps do not overlap, and its op_end_rel_* and
   all_end_rel_* are multiplied by a seeded random factor in [0.5, 1.5). Partition graphs
   stay in every step file, as in the real ones.
2. runlens, each measurement in a fresh subprocess (no import or cache state leaks):
   no-cache = load_run(path, use_cache=False) (`analyze --no-cache`, e.g. a CI job that
           keeps no cache), then all four views with ViewOptions();
   cold  = delete the run's .runlens cache, load_run(path, use_cache=True) (which also
           writes the cache), then all four views with ViewOptions();
   warm  = the same again with the cache present.
3. tfprof in a subprocess on the first --tfprof-steps steps of the same run dir:
   Profiler construction (graph re-imported from graph.pb + op_log.pb, as
   tests/tfprof_oracle.py does), add_step per step, then profile_operations,
   profile_name_scope, profile_graph and profile_python with ProfileOptionBuilder's
   defaults (the same defaults as ViewOptions()) and .with_empty_output().
4. Does 2 and 3 in --rounds rounds (default 3), one after the other: each round measures
   every runlens path once, then tfprof once, and its ratios compare runlens with the
   tfprof of the same round. The speed of a shared machine drifts over minutes, so a
   tfprof measured once, a minute away from runlens, moved the ratios by +-25%.
5. Prints a Markdown table (node stats, seconds and node stats/s: medians over rounds;
   ratio vs tfprof: the median of the rounds' ratios, with their range; peak RSS) and the
   machine.

Rates are node stats per second. Engine: node stats / (ingest + views). tfprof: node stats
in its subset / (add_step + views); reading and parsing the step files for tfprof is timed
separately and not charged to it. Import time (polars, TensorFlow) is charged to nobody.
Peak RSS: `ru_maxrss` of the measured process (Linux: KiB), the peak of any worker it
started (load_run ingests in a process pool when there is enough to do), and the peak of
the whole process tree's summed RSS, sampled every 50 ms by this script.

"Cold" means the runlens cache is cold; the step files were just written, so the OS page
cache is warm for both runlens and tfprof.

usage: python benchmarks/engine.py [--node-stats 1000000] [--fixture rnn_while]
           [--tfprof-steps 1000] [--rounds 3] [--jobs N] [--keep] [--out DIR] [--seed 0]
       python benchmarks/engine.py --command [--rounds 3] [--tfprof-steps 1000]
           (the cold `analyze ops RUN` command as a user runs it: benchmarks/engine_command.py)
       python benchmarks/engine.py --node-stats 200000 --profile --no-tfprof [--jobs 1]
           (cProfile of the cold and warm paths; top cumulative hot spots in analyzer/;
           --jobs 1 keeps the step ingest in the profiled process)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# The children's measurements and the machine's description live beside this script.
from benchmarks.engine_command import measure_command_rounds, report_command  # noqa: E402
from benchmarks.engine_measure import (  # noqa: E402
    child_engine,
    child_profile,
    child_tfprof,
    run_child,
)
from benchmarks.machine import machine  # noqa: E402

# runlens's three paths, in the order each round measures them.
MODES = ("no-cache", "cold", "warm")


# ----------------------------------------------------------------------------- build


def build_run(fixture: Path, out: Path, target: int, seed: int) -> dict[str, Any]:
    """Write a run dir at `out` with >= `target` node stats from `fixture`'s step files."""
    from runlens.analyzer.proto import config_pb2

    src_files = sorted((fixture / "steps").glob("step-*.pb"))
    if not src_files:
        raise SystemExit(f"{fixture}: no steps/step-*.pb")
    sources = [p.read_bytes() for p in src_files]
    counts, starts, ends = [], [], []
    for raw in sources:
        rm = config_pb2.RunMetadata.FromString(raw)
        nodes = [n for d in rm.step_stats.dev_stats for n in d.node_stats]
        counts.append(len(nodes))
        starts.append(min(n.all_start_micros for n in nodes))
        ends.append(max(n.all_start_micros + n.all_end_rel_micros for n in nodes))
    # One cycle through the fixture's steps keeps their own order and spacing; the next
    # cycle starts after the last one ends, with room for the jitter (factor < 1.5).
    period = 2 * (max(ends) - min(starts)) + 1000

    (out / "steps").mkdir(parents=True, exist_ok=True)
    for name in ("graph.pb", "op_log.pb"):
        if (fixture / name).is_file():
            shutil.copyfile(fixture / name, out / name)

    rng = random.Random(seed)
    total_nodes = total_bytes = n_steps = 0
    t0 = time.perf_counter()
    while total_nodes < target:
        i = n_steps % len(sources)
        shift_us = (n_steps // len(sources)) * period
        shift_ns = shift_us * 1000
        rm = config_pb2.RunMetadata.FromString(sources[i])
        for dev in rm.step_stats.dev_stats:
            for n in dev.node_stats:
                n.all_start_micros += shift_us
                if n.all_start_nanos:
                    n.all_start_nanos += shift_ns
                if n.scheduled_micros:
                    n.scheduled_micros += shift_us
                if n.scheduled_nanos:
                    n.scheduled_nanos += shift_ns
                f = 0.5 + rng.random()
                n.op_end_rel_micros = max(n.op_start_rel_micros,
                                          int(n.op_end_rel_micros * f))
                n.all_end_rel_micros = max(n.op_end_rel_micros, int(n.all_end_rel_micros * f))
                if n.all_end_rel_nanos:
                    n.op_end_rel_nanos = max(n.op_start_rel_nanos, int(n.op_end_rel_nanos * f))
                    n.all_end_rel_nanos = max(n.op_end_rel_nanos,
                                              int(n.all_end_rel_nanos * f))
                for mem in n.memory:
                    for rec in mem.allocation_records:
                        if rec.alloc_micros:
                            rec.alloc_micros += shift_us
        raw = rm.SerializeToString()
        (out / "steps" / f"step-{n_steps + 1:08d}.pb").write_bytes(raw)
        total_nodes += counts[i]
        total_bytes += len(raw)
        n_steps += 1
    return {
        "fixture": fixture.name,
        "steps": n_steps,
        "node_stats": total_nodes,
        "bytes": total_bytes,
        "node_stats_per_step": counts,
        "build_seconds": time.perf_counter() - t0,
    }



# ----------------------------------------------------------------------------- report


def fmt_int(n: float) -> str:
    return f"{n:,.0f}"


def fmt_mib(kib: int | None) -> str:
    return "n/a" if not kib else f"{kib / 1024:,.0f} MiB"


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| measurement | node stats | seconds | node stats/s | vs tfprof (add_step+views) "
            "| peak RSS (process) | peak RSS (workers) | peak RSS (tree, sampled) "
            "| other processes' CPU-s |")
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        lines.append(
            f"| {r['name']} | {fmt_int(r['nodes'])} | {r['seconds']:.3f} | "
            f"{fmt_int(r['rate'])} | {r['ratio']} | {fmt_mib(r.get('self'))} | "
            f"{fmt_mib(r.get('workers'))} | {fmt_mib(r.get('tree'))} | "
            + ("" if r.get("other") is None else f"{r['other']:.1f}") + " |")
    return "\n".join(lines)


def run_tfprof(out: Path, steps: int) -> dict[str, Any] | None:
    """One tfprof measurement (a child process), printed; None if it failed to give one."""
    r = run_child(["--_child", "tfprof", "--_run", str(out), "--tfprof-steps", str(steps)])
    views = r.get("views", {})
    errors = {k: v for k, v in views.items() if k.endswith("_error")}
    if r["returncode"] != 0:
        print(f"tfprof child exited with {r['returncode']} after "
              f"{sorted(views)}: {r.get('stderr_tail')}")
    print(f"tfprof: {r.get('steps')} steps, {r.get('node_stats', 0):,} node stats; "
          f"construction {r.get('construct_seconds', 0):.2f} s (not counted), "
          f"parse {r.get('parse_seconds', 0):.2f} s (not counted), add_step "
          f"{r.get('add_step_seconds', 0):.2f} s, views "
          + ", ".join(f"{k} {v:.2f}" for k, v in views.items() if not k.endswith("_error")))
    if r.get("steps"):
        print(f"tfprof add_step: {r['add_step_ms_first_tenth']:.1f} ms per step over "
              f"the first tenth of its steps, {r['add_step_ms_last_tenth']:.1f} ms "
              f"over the last tenth")
    for k, v in errors.items():
        print(f"tfprof {k[:-6]} view skipped: {v}")
    if "code" not in views:
        print("tfprof code view (profile_python) did not complete; it is not in tfprof's time")
    if not r.get("node_stats") or "views_seconds" not in r:
        return None
    r["rate"] = r["node_stats"] / (r["add_step_seconds"] + r["views_seconds"])
    return r


# ----------------------------------------------------------------------------- main


def parse_args() -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The command line; the parser comes back too, for its one-line errors (exit 2)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--node-stats", type=int, default=1_000_000,
                    help="target number of node stats in the built run (default 1,000,000)")
    ap.add_argument("--fixture", default="rnn_while", help="fixtures/runs/<name> to copy")
    ap.add_argument("--tfprof-steps", type=int, default=1000,
                    help="tfprof runs on the first N steps of the run in each round (default "
                         "1000: about 780k node stats and 60 s of add_step with rnn_while; "
                         "its rate falls as steps accumulate, so fewer steps favour tfprof: "
                         "500 steps run ~15%% faster per node stat); 0 = all")
    ap.add_argument("--jobs", type=int, default=None,
                    help="load_run(jobs=...) (default: os.cpu_count())")
    ap.add_argument("--keep", action="store_true", help="keep the built run dir")
    ap.add_argument("--out", type=Path, default=None,
                    help="build the run here (kept) instead of in a temp dir")
    ap.add_argument("--seed", type=int, default=0, help="seed of the time jitter")
    ap.add_argument("--no-tfprof", action="store_true", help="skip the tfprof measurement")
    ap.add_argument("--profile", action="store_true",
                    help="also cProfile the engine's cold and warm paths (load_run + views), "
                         "each in a child")
    ap.add_argument("--profile-top", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of measurement: each runs every runlens path once (a fresh "
                         "process each) and then tfprof; medians over rounds are reported "
                         "(default 3)")
    ap.add_argument("--command", action="store_true",
                    help="time the cold `analyze ops RUN` command itself (a fresh process, "
                         "imports and the cache write included) against tfprof, instead of "
                         "load_run + views (benchmarks/engine_command.py)")
    ap.add_argument("--json", type=Path, default=None, help="also write all results here")
    ap.add_argument("--_child", choices=["cold", "no-cache", "warm", "tfprof", "profile-cold",
                                         "profile-warm"],
                    help=argparse.SUPPRESS)
    ap.add_argument("--_run", type=Path, help=argparse.SUPPRESS)
    return ap, ap.parse_args()


def run_as_child(args: argparse.Namespace) -> bool:
    """Do the one measurement a parent asked this process for (--_child); False if none.

    Every measurement runs in a fresh process of this same script, so that no import or
    cache state leaks from one into the next."""
    if args._child in ("cold", "no-cache", "warm"):
        child_engine(args._run, args._child, args.jobs)
    elif args._child == "tfprof":
        child_tfprof(args._run, args.tfprof_steps)
    elif args._child in ("profile-cold", "profile-warm"):
        child_profile(args._run, args._child, args.jobs, args.profile_top)
    else:
        return False
    return True


def print_machine(mach: dict[str, Any]) -> None:
    """The machine and versions first: every figure below depends on them."""
    print(f"machine: {mach['nproc']} CPUs ({mach['cpu']}), {mach['mem_gib']} GiB RAM, "
          f"{mach['os']}; Python {mach['python']}, polars {mach['polars']}, "
          f"protobuf {mach['protobuf']}, tensorflow-cpu {mach['tensorflow']}; "
          f"runlens at {mach['code']}")


def print_built(out: Path, fixture: str, built: dict[str, Any]) -> None:
    """What build_run wrote, so that a reader can tell the size of the measured run."""
    print(f"built {out}: {built['steps']} steps of {fixture} "
          f"({min(built['node_stats_per_step'])}-{max(built['node_stats_per_step'])} "
          f"node stats each), {built['node_stats']:,} node stats, "
          f"{built['bytes']:,} bytes ({built['bytes'] / 2**20:,.0f} MiB) "
          f"in {built['build_seconds']:.1f} s")


def run_engine(out: Path, mode: str, jobs_args: list[str]) -> dict[str, Any] | None:
    """One runlens measurement (a child process), printed; None if the child failed."""
    r = run_child(["--_child", mode, "--_run", str(out), *jobs_args])
    if r["returncode"] != 0:
        print(f"engine {mode} failed: {r.get('stderr_tail')}")
        return None
    print(f"engine {mode}: ingest {r['ingest_seconds']:.3f} s, views "
          f"{r['views_seconds']:.3f} s, cache wait "
          f"{r.get('cache_wait_seconds', 0):.3f} s; "
          + ", ".join(f"{k} {v:.3f}" for k, v in r["views"].items()
                      if not k.endswith("_rows"))
          + f" (imports {r['import_seconds']:.2f} s, not counted)")
    r["seconds"] = (r["ingest_seconds"] + r["views_seconds"]
                    + r.get("cache_wait_seconds", 0))
    return r


def measure_rounds(
    out: Path, args: argparse.Namespace, jobs_args: list[str]
) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]] | None:
    """Every runlens path, then tfprof, in each of --rounds rounds; None if one failed.

    Rounds, not one long stretch per tool: the speed of a shared machine drifts over
    minutes, and each round's ratios compare runlens with the tfprof of that round."""
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    tfprof_runs: list[dict[str, Any]] = []
    for round_no in range(1, max(1, args.rounds) + 1):
        print(f"round {round_no}:")
        for mode in MODES:
            r = run_engine(out, mode, jobs_args)
            if r is None:
                return None
            runs[mode].append(r)
        if not args.no_tfprof:
            t = run_tfprof(out, args.tfprof_steps)
            if t is None:
                return None
            tfprof_runs.append(t)
    return runs, tfprof_runs


def summarize(results: dict[str, Any], runs: dict[str, list[dict[str, Any]]],
              tfprof_runs: list[dict[str, Any]], n_runlens: int) -> None:
    """Medians over rounds into `results`, with each round's ratio against its own tfprof;
    warns where the figures are not what their labels say."""
    for mode in MODES:
        by_time = sorted(runs[mode], key=lambda r: r["seconds"])
        results[mode] = dict(by_time[len(by_time) // 2])  # the median run
        results[mode]["all_seconds"] = [r["seconds"] for r in by_time]
        if tfprof_runs:  # each round's rate against that round's tfprof
            results[mode]["ratios"] = sorted(
                (n_runlens / r["seconds"]) / t["rate"]
                for r, t in zip(runs[mode], tfprof_runs, strict=True))
    if not results["cold"].get("native_decoder"):
        print("WARNING: the C decoder is not built here (pip install -e '.[dev]' builds "
              "it in the tree); ingest used the protobuf walk")
    if not results["warm"].get("cache_present_before"):
        print("WARNING: the warm run found no cache; its figures are not warm")
    if tfprof_runs:
        by_rate = sorted(tfprof_runs, key=lambda t: t["rate"])
        results["tfprof"] = dict(by_rate[len(by_rate) // 2])
        results["tfprof"]["all_rates"] = [t["rate"] for t in by_rate]


def profile_paths(out: Path, args: argparse.Namespace, jobs_args: list[str],
                  results: dict[str, Any]) -> None:
    """--profile: cProfile the cold and warm paths, each in a child, and print where the
    time goes (analyzer/ by cumulative time, then all modules by own time)."""
    for mode in ("cold", "warm"):
        r = run_child(["--_child", f"profile-{mode}", "--_run", str(out), *jobs_args,
                       "--profile-top", str(args.profile_top)])
        results[f"profile_{mode}"] = r
        print(f"\ncProfile of the {mode} path (load_run + 4 views, jobs="
              f"{args.jobs or os.cpu_count()}), wall {r.get('wall_seconds', 0):.2f} s "
              f"under the profiler; top {args.profile_top} analyzer/ functions by "
              "cumulative time:")
        print("| function | calls | tottime s | cumtime s |\n|---|---|---|---|")
        for row in r.get("analyzer_top", []):
            print(f"| `{row['where']}` | {row['calls']} | {row['tottime']:.2f} | "
                  f"{row['cumtime']:.2f} |")
        print("\ntop by own time (all modules):\n" + r.get("tottime_top", ""))


def fmt_ratios(values: list[float]) -> str:
    """The median of sorted ratios, with their range when there are several rounds."""
    def x(v: float) -> str:
        return f"{v:,.1f}x" if v < 10 else f"{v:,.0f}x"
    mid = x(values[len(values) // 2])
    return mid if len(values) == 1 else f"{mid} ({x(values[0])}-{x(values[-1])})"


def engine_rows(results: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """The table's runlens rows: one per path, its median round, split into its parts."""
    rows = []
    for mode in MODES:
        r = results[mode]
        sec = r["seconds"]
        label = "cold, --no-cache" if mode == "no-cache" else mode
        spread = r["all_seconds"]
        median = (f"; median of {len(spread)}: {spread[0]:.3f}-{spread[-1]:.3f} s"
                  if len(spread) > 1 else "")
        rows.append({"name": f"runlens {label}: load_run + 4 views (ingest "
                             f"{r['ingest_seconds']:.3f} s + views "
                             f"{r['views_seconds']:.3f} s + cache wait "
                             f"{r.get('cache_wait_seconds', 0):.3f} s{median})",
                     "nodes": n, "seconds": sec, "rate": n / sec,
                     "ratio": fmt_ratios(r["ratios"]) if "ratios" in r else "n/a",
                     "self": r.get("self_peak_rss_kib"),
                     "workers": r.get("workers_peak_rss_kib"),
                     "tree": r.get("tree_peak_rss_kib"),
                     "other": r.get("other_cpu_seconds")})
    return rows


def tfprof_rows(t: dict[str, Any]) -> list[dict[str, Any]]:
    """The table's tfprof rows: add_step + views (the baseline, 1.0x), and add_step alone
    (most of its time)."""
    n_views = len([k for k in t["views"] if not k.endswith("_error")])
    rates = t["all_rates"]
    spread = (f"; median of {len(rates)}: {rates[0]:,.0f}-{rates[-1]:,.0f} node stats/s"
              if len(rates) > 1 else "")
    return [
        {"name": f"tfprof: add_step + {n_views} views ({t['steps']} steps{spread})",
         "nodes": t["node_stats"],
         "seconds": t["add_step_seconds"] + t["views_seconds"],
         "rate": t["rate"], "ratio": "1.0x",
         "self": t.get("self_peak_rss_kib"), "workers": None,
         "tree": t.get("tree_peak_rss_kib"),
         "other": t.get("other_cpu_seconds")},
        {"name": "tfprof: add_step only", "nodes": t["node_stats"],
         "seconds": t["add_step_seconds"],
         "rate": t["node_stats"] / t["add_step_seconds"],
         "ratio": "", "self": None, "workers": None, "tree": None},
    ]


def benchmark(args: argparse.Namespace, fixture: Path, out: Path,
              results: dict[str, Any]) -> int:
    """Build the run, measure it in rounds, print the table; the exit status."""
    built = build_run(fixture, out, args.node_stats, args.seed)
    results["built"] = built
    print_built(out, args.fixture, built)
    if args.command:
        return benchmark_command(args, out, results, built["node_stats"])
    jobs_args = ["--jobs", str(args.jobs)] if args.jobs else []
    measured = measure_rounds(out, args, jobs_args)
    if measured is None:
        return 1
    runs, tfprof_runs = measured
    summarize(results, runs, tfprof_runs, built["node_stats"])
    if args.profile:
        profile_paths(out, args, jobs_args, results)
    rows = engine_rows(results, built["node_stats"])
    if results.get("tfprof") is not None:
        rows.extend(tfprof_rows(results["tfprof"]))
    print()
    print(table(rows))
    results["table"] = rows
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str) + "\n")
    return 0


def benchmark_command(args: argparse.Namespace, out: Path, results: dict[str, Any],
                      nodes: int) -> int:
    """--command: the cold `analyze ops RUN` in rounds with tfprof; the table."""
    tfprof = None if args.no_tfprof else (lambda: run_tfprof(out, args.tfprof_steps))
    measured = measure_command_rounds(out, args.rounds, tfprof)
    if measured is None:
        return 1
    results["command"] = measured
    print()
    print("\n".join(report_command(measured, nodes)))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str) + "\n")
    return 0


def main() -> int:
    ap, args = parse_args()
    if run_as_child(args):
        return 0
    fixture = ROOT / "fixtures" / "runs" / args.fixture
    if not fixture.is_dir():
        ap.error(f"{fixture}: no such fixture")
    mach = machine()
    print_machine(mach)

    if args.out is not None:
        out = args.out
        if out.exists() and any(out.iterdir()):
            ap.error(f"{out}: exists and is not empty")
        cleanup = None
    else:
        cleanup = Path(tempfile.mkdtemp(prefix="runlens-bench-"))
        out = cleanup / "run"
    results: dict[str, Any] = {"machine": mach, "args": {
        k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
        if not k.startswith("_")}}
    try:
        return benchmark(args, fixture, out, results)
    finally:
        if cleanup is not None:
            if args.keep:
                print(f"kept {out}")
            else:
                shutil.rmtree(cleanup, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
