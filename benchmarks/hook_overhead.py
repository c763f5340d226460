"""How much does CaptureHook cost on the steps it does not trace?

Claim under test: "untraced steps cost nothing measurable". This script times every
`sess.run` of a small tf.compat.v1 training loop (graph mode, MonitoredTrainingSession)
under several hook configurations, in one process, interleaved in rounds so that slow
drift of the machine (frequency, noisy neighbours, allocator state) hits all of them alike:

  A   no hooks
  B   tf.compat.v1.train.ProfilerHook(save_steps=10**9): TF's own hook, never tracing
  C   CaptureHook(save_steps=10**9): our hook, never tracing (the claim under test)
  D   CaptureHook(save_steps=--trace-every): traces every N steps; its traced and
      untraced steps are reported separately (traced steps are found from the step
      files the hook wrote, matched to the global step after each run)
  E   no hooks, but the caller fetches the global-step read tensor the hooks fetch:
      separates the cost of that extra fetch from the cost of the Python hook machinery
  F   no hooks, but the caller fetches a constant: the cost of any extra fetched output

Every configuration runs in --sessions independent copies (own graph, built identically,
and own MonitoredTrainingSession, created once, in a shuffled round-robin order, and kept
open), because one session can be a few percent faster or slower than an identical one
for its whole life; with one session per configuration that offset would pass for hook
cost. After a warm-up, every round runs --steps steps of each session, in an order
shuffled per round (seeded). The step time is time.perf_counter() around the caller's
`mon_sess.run(...)`, so it includes everything the hooks do in before_run/after_run (and,
on a traced step, the trace and the file writes).

Overheads are differences of medians against A, with a 95% CI from a hierarchical
bootstrap: rounds (the same rounds for both configurations: they shared the machine's
state), then sessions within each configuration, then steps within each (round, session).
The A sessions among themselves are the A/A control.

usage: python benchmarks/hook_overhead.py [--steps 100] [--rounds 8] [--sessions 3]
       python benchmarks/hook_overhead.py --fetch-loss  # a loop that also fetches the loss
       python benchmarks/hook_overhead.py --layers 16,10 --batch 8   # absolute cost in µs
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from hook_stats import listing, median_diff_boot, sign_test_p, sus, us  # noqa: E402
from machine import cpu_busy_seconds, cpu_model  # noqa: E402

DEFAULT_LAYERS = "256,512,512,10"


# ----------------------------------------------------------------------------- machine


# cpu_model and cpu_busy_seconds are machine.py's (one description of the machine).


def own_cpu_seconds() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


# ----------------------------------------------------------------------------- the model


@dataclass
class Session:
    """One graph + MonitoredTrainingSession of a configuration, and its timings."""

    name: str
    sess: Any
    gs: Any
    fetches: Any
    feeds: list[Any]
    out_dir: Path | None
    step_count: int = 0
    times: list[list[float]] = field(default_factory=list)  # per round, seconds
    post_steps: list[list[int]] = field(default_factory=list)  # global step after each run


@dataclass
class Config:
    key: str
    label: str
    hook: str  # "none" | "profiler" | "capture" | "capture-traced"
    fetch_step: bool = False  # the caller also fetches the global-step read tensor
    fetch_const: bool = False  # the caller also fetches a constant (any extra output)
    sessions: list[Session] = field(default_factory=list)

    def times(self) -> np.ndarray:
        """(sessions, rounds, steps) step times in seconds."""
        return np.array([s.times for s in self.sessions])


def build(
    cfg: Config, index: int, args: argparse.Namespace, tmp: Path, batches: list[tuple]
) -> Session:
    import tensorflow as tf

    from runlens.analyzer.capture.tf1 import CaptureHook

    layers = args.layers
    name = f"{cfg.key}{index + 1}"
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(args.seed)
        if args.input == "feed":
            x = tf.compat.v1.placeholder(tf.float32, [args.batch, layers[0]], name="x")
            y = tf.compat.v1.placeholder(tf.int32, [args.batch], name="y")
        else:
            x = tf.random.normal([args.batch, layers[0]], name="x")
            y = tf.random.uniform([args.batch], 0, layers[-1], dtype=tf.int32, name="y")
        h = x
        for i, (n_in, n_out) in enumerate(zip(layers[:-1], layers[1:], strict=False)):
            with tf.compat.v1.variable_scope(f"dense{i}"):
                w = tf.compat.v1.get_variable(
                    "kernel", [n_in, n_out],
                    initializer=tf.compat.v1.glorot_uniform_initializer(),
                )
                b = tf.compat.v1.get_variable("bias", [n_out], initializer=tf.zeros_initializer())
                h = tf.matmul(h, w) + b
                if i < len(layers) - 2:
                    h = tf.nn.relu(h)
        loss = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h)
        )
        gs = tf.compat.v1.train.get_or_create_global_step()
        train_op = tf.compat.v1.train.MomentumOptimizer(0.01, 0.9).minimize(
            loss, global_step=gs
        )

        hooks: list[Any] = []
        out_dir: Path | None = None
        if cfg.hook == "profiler":
            out_dir = tmp / f"{name}-timeline"
            hooks.append(tf.compat.v1.train.ProfilerHook(save_steps=10**9, output_dir=str(out_dir)))
        elif cfg.hook == "capture":
            out_dir = tmp / f"{name}-run"
            hooks.append(CaptureHook(save_steps=10**9, output_dir=out_dir))
        elif cfg.hook == "capture-traced":
            out_dir = tmp / f"{name}-run"
            hooks.append(CaptureHook(save_steps=args.trace_every, output_dir=out_dir))

        fetches: Any = [train_op, loss] if args.fetch_loss else [train_op]
        if cfg.fetch_step:
            from tensorflow.python.training import training_util

            # The very tensor ProfilerHook and CaptureHook fetch on every step.
            fetches = [*fetches, training_util._get_or_create_global_step_read()]
        elif cfg.fetch_const:
            fetches = [*fetches, tf.constant(1.0, name="extra_output")]
        if len(fetches) == 1:
            fetches = train_op  # the plain `sess.run(train_op)`
        sess = tf.compat.v1.train.MonitoredTrainingSession(
            hooks=hooks,
            checkpoint_dir=None,
            save_checkpoint_secs=None,
            save_summaries_steps=None,
            save_summaries_secs=None,
            log_step_count_steps=None,
        )
    feeds = [{x: bx, y: by} for bx, by in batches] if args.input == "feed" else [None]
    return Session(name, sess, gs, fetches, feeds, out_dir)


def run_steps(s: Session, n: int, record: bool) -> None:
    sess, fetches, feeds = s.sess, s.fetches, s.feeds
    nf = len(feeds)
    perf = time.perf_counter
    times = [0.0] * n
    post = [0] * n
    for i in range(n):
        feed = feeds[s.step_count % nf]
        t0 = perf()
        sess.run(fetches, feed_dict=feed)
        t1 = perf()
        times[i] = t1 - t0
        s.step_count += 1
        post[i] = s.step_count  # global step after this run (it starts at 0, +1 per run)
    if record:
        s.times.append(times)
        s.post_steps.append(post)


def read_global_step(s: Session) -> int:
    """The session's global step, read around the hooks (run_step_fn's raw session)."""
    gs = s.gs
    return int(s.sess.run_step_fn(lambda step_context: step_context.session.run(gs)))


def traced_steps(s: Session) -> set[int]:
    from runlens.analyzer.rundir import STEP_FILE_RE

    assert s.out_dir is not None
    return {
        int(m.group(1))
        for p in (s.out_dir / "steps").iterdir()
        if (m := STEP_FILE_RE.match(p.name))
    }


# ----------------------------------------------------------------------------- main


def parse_args() -> argparse.Namespace:
    """The command line, checked: settings that would make the comparison meaningless
    are refused (exit 2) before TensorFlow is imported."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100, help="steps per session per round")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--sessions", type=int, default=3,
                    help="independent sessions per configuration (at least 2)")
    ap.add_argument("--warmup", type=int, default=100, help="untimed steps per session first")
    ap.add_argument("--layers", default=DEFAULT_LAYERS,
                    help="MLP widths, input to logits (e.g. 16,10 for a tiny step that "
                         "exposes the hook's absolute cost)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--input", choices=("feed", "graph"), default="feed",
                    help="feed: numpy batches through placeholders; graph: in-graph random")
    ap.add_argument("--fetch-loss", action="store_true",
                    help="the training loop fetches [train_op, loss] instead of train_op alone")
    ap.add_argument("--trace-every", type=int, default=50, help="save_steps of config D")
    ap.add_argument("--order", choices=("shuffle", "fixed"), default="shuffle",
                    help="order of the sessions inside a round")
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.layers = tuple(int(v) for v in args.layers.split(","))
    if len(args.layers) < 2:
        ap.error("--layers needs at least an input and an output width")
    if args.sessions < 2:
        ap.error("--sessions must be at least 2: one session per config hides session offsets")
    if args.steps * args.rounds < 2 * args.trace_every:
        ap.error("--steps * --rounds should be at least 2 * --trace-every so that D traces")
    return args


def make_configs(trace_every: int) -> list[Config]:
    """The hook configurations A-F of the module docstring, in table order."""
    return [
        Config("A", "no hooks", "none"),
        Config("B", "ProfilerHook(save_steps=10**9), never traces", "profiler"),
        Config("C", "CaptureHook(save_steps=10**9), never traces", "capture"),
        Config("D", f"CaptureHook(save_steps={trace_every})", "capture-traced"),
        Config("E", "no hooks; caller also fetches the global-step read", "none",
               fetch_step=True),
        Config("F", "no hooks; caller also fetches a constant", "none", fetch_const=True),
    ]


def make_batches(args: argparse.Namespace) -> list[tuple]:
    """Eight seeded input batches, fed in turn, so that every session sees the same data."""
    data_rng = np.random.default_rng(args.seed)
    return [
        (
            data_rng.standard_normal((args.batch, args.layers[0]), dtype=np.float32),
            data_rng.integers(0, args.layers[-1], size=args.batch, dtype=np.int32),
        )
        for _ in range(8)
    ]


@dataclass
class Measured:
    """What the timed rounds leave besides the step times kept in each Session."""

    before: tuple[float | None, float, float]  # (machine busy CPU-s, own CPU-s, wall)
    after: tuple[float | None, float, float]
    c_traced: int  # steps C traced (should be 0)
    d_traced: list[set[int]]  # global steps each D session traced


def measure(configs: list[Config], args: argparse.Namespace, batches: list[tuple],
            order_rng: np.random.Generator) -> Measured:
    """Build every session, warm them up, then time --rounds rounds of --steps steps each.

    Sessions are built round-robin in a shuffled order, so that no configuration gets all
    the first (or last) sessions of the process, and run in an order shuffled per round,
    so that the machine's drift hits every configuration alike."""
    by_key = {c.key: c for c in configs}
    with tempfile.TemporaryDirectory(prefix="runlens-hook-bench-") as tmp_name:
        tmp = Path(tmp_name)
        for i in range(args.sessions):
            build_order = list(configs)
            order_rng.shuffle(build_order)  # type: ignore[arg-type]
            for cfg in build_order:
                cfg.sessions.append(build(cfg, i, args, tmp, batches))
        segments = [s for cfg in configs for s in cfg.sessions]
        for s in segments:  # warm-up: executors built, caches and allocator warm
            run_steps(s, args.warmup, record=False)
        before = (cpu_busy_seconds(), own_cpu_seconds(), time.perf_counter())
        for _ in range(args.rounds):
            order = list(segments)
            if args.order == "shuffle":
                order_rng.shuffle(order)  # type: ignore[arg-type]
            for s in order:
                run_steps(s, args.steps, record=True)
        after = (cpu_busy_seconds(), own_cpu_seconds(), time.perf_counter())
        for s in segments:
            actual = read_global_step(s)
            if actual != s.step_count:
                raise SystemExit(f"{s.name}: global step {actual} != {s.step_count} runs")
        c_traced = sum(len(traced_steps(s)) for s in by_key["C"].sessions)
        d_traced = [traced_steps(s) for s in by_key["D"].sessions]
        for s in segments:
            s.sess.close()
    return Measured(before, after, c_traced, d_traced)


def split_d(
    d: Config, d_traced: list[set[int]], args: argparse.Namespace
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """D's step times split into untraced (sessions, rounds, steps) and traced (flat),
    and the mask of the traced ones: the two kinds of step cost very different things."""
    d_all = d.times()
    d_mask = np.array(
        [np.isin(np.array(s.post_steps), list(t)) for s, t in zip(d.sessions, d_traced,
                                                                   strict=True)]
    )
    # The bootstrap needs equal-length rows; (session, round) cells differ by at most one
    # traced step, so trim every cell to the shortest.
    cells = [[d_all[i, r][~d_mask[i, r]] for r in range(args.rounds)]
             for i in range(args.sessions)]
    m = min(len(c) for row in cells for c in row)
    return np.array([[c[:m] for c in row] for row in cells]), d_mask, d_all[d_mask]


def print_setup(args: argparse.Namespace, tf_version: str, wall: float, measured: Measured,
                d_mask: np.ndarray) -> None:
    """The setting, and how busy the rest of the machine was while the rounds ran: other
    processes' load inflates the step times and their spread."""
    print()
    print(f"python {platform.python_version()}, TensorFlow {tf_version}, "
          f"{os.cpu_count()} CPUs ({cpu_model()}), "
          f"MLP {'-'.join(map(str, args.layers))}, batch {args.batch}, input={args.input}, "
          f"loop fetches {'[train_op, loss]' if args.fetch_loss else 'train_op'}")
    print(f"{args.rounds} rounds x {args.sessions} sessions x {args.steps} steps per config, "
          f"after {args.warmup} warm-up steps per session; wall time {wall:.0f} s")
    (busy0, own0, wall0), (busy1, own1, wall1) = measured.before, measured.after
    if busy0 is not None and busy1 is not None:
        timed = wall1 - wall0
        other = max(0.0, (busy1 - busy0) - (own1 - own0))
        print(f"Timed rounds: {timed:.0f} s; this process used {own1 - own0:.0f} CPU-s, "
              f"other processes {other:.0f} CPU-s ({100 * other / timed:.0f}% of one core on "
              f"average, from /proc/stat)")
        if other > 0.1 * timed:
            print("WARNING: other processes were busy during the measurement; step times and "
                  "their spread are inflated. Rerun on a quiet machine for a clean number.")
    print(f"C traced {measured.c_traced} steps; D traced "
          f"{sum(len(t) for t in measured.d_traced)} steps "
          f"({int(d_mask.sum())} of them in the timed rounds)")


def print_table(configs: list[Config], arr: dict[str, np.ndarray], d_traced_times: np.ndarray,
                args: argparse.Namespace,
                rng: np.random.Generator) -> dict[str, tuple[float, float, float]]:
    """The Markdown table of every configuration against A; returns each one's
    (median difference, CI low, CI high) in seconds for the verdict."""
    a = arr["A"]
    a_med = float(np.median(a))
    d = next(c for c in configs if c.key == "D")
    print()
    print("| config | hooks | timed steps | median (µs) | p90 (µs) "
          "| Δ median vs A (µs) [95% CI] | Δ vs A (%) | session medians (µs) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    rows = [(c.key, c.label) for c in configs if c.key != "D"]
    rows.insert(3, ("D untraced", f"{d.label}, untraced steps"))
    results: dict[str, tuple[float, float, float]] = {}
    for key, label in rows:
        x = arr[key]
        med, p90 = float(np.median(x)), float(np.percentile(x, 90))
        per_session = " / ".join(us(float(np.median(s))) for s in x)
        if key == "A":
            delta = pct = "—"
        else:
            point, lo, hi = median_diff_boot(a, x, args.bootstrap, rng)
            results[key] = (point, lo, hi)
            delta = f"{sus(point)} [{sus(lo)}, {sus(hi)}]"
            pct = f"{100 * point / a_med:+.1f}%"
        print(f"| {key} | {label} | {x.size} | {us(med)} | {us(p90)} | {delta} | {pct} "
              f"| {per_session} |")
    if d_traced_times.size:
        med, p90 = float(np.median(d_traced_times)), float(np.percentile(d_traced_times, 90))
        print(f"| D traced | {d.label}, traced steps | {d_traced_times.size} | {us(med)} "
              f"| {us(p90)} | {sus(med - a_med)} | {100 * (med - a_med) / a_med:+.0f}% | |")
    return results


def print_noise(a: np.ndarray, c: np.ndarray, args: argparse.Namespace) -> float:
    """How much A moves by itself (rounds, identical sessions), and C - A round by round,
    so that the verdict can be read against the noise; returns the sd of A's per-round
    medians in seconds."""
    a_med = float(np.median(a))
    a_round_meds = np.median(a.transpose(1, 0, 2).reshape(args.rounds, -1), axis=1)
    sd_rounds = float(np.std(a_round_meds, ddof=1)) if args.rounds > 1 else float("nan")
    a_sessions = np.median(a.reshape(args.sessions, -1), axis=1)
    c_round_diffs = (
        np.median(c.transpose(1, 0, 2).reshape(args.rounds, -1), axis=1) - a_round_meds
    )
    sign_p = sign_test_p(c_round_diffs)
    print()
    print(f"Noise: A's per-round medians (µs): {listing(a_round_meds, us)}; "
          f"sd {us(sd_rounds)} µs ({100 * sd_rounds / a_med:.1f}% of A's median).")
    print(f"A/A: A's {args.sessions} identical sessions have medians "
          f"{' / '.join(us(v) for v in a_sessions)} µs: spread {us(float(np.ptp(a_sessions)))} "
          f"µs ({100 * float(np.ptp(a_sessions)) / a_med:.1f}%).")
    print(f"Per-round C - A (µs): {listing(c_round_diffs, sus)}; "
          f"C slower in {int(np.sum(c_round_diffs > 0))}/{args.rounds} rounds "
          f"(sign test p = {sign_p:.3f}).")
    return sd_rounds


def print_verdict(results: dict[str, tuple[float, float, float]], arr: dict[str, np.ndarray],
                  d_traced_times: np.ndarray, sd_rounds: float, trace_every: int) -> None:
    """The answer to the claim under test (C - A), then the references that explain it:
    TF's own hook, the replicate D, the extra fetch alone, and what tracing costs."""
    a_med = float(np.median(arr["A"]))
    p, lo, hi = results["C"]
    excludes_zero = lo > 0 or hi < 0
    print()
    print(f"Verdict: untraced-step overhead of CaptureHook (C - A) = {sus(p)} µs "
          f"({100 * p / a_med:+.1f}% of a {us(a_med)} µs step), 95% CI [{sus(lo)}, {sus(hi)}] "
          f"µs ({100 * lo / a_med:+.1f}% to {100 * hi / a_med:+.1f}%).")
    print(f"  -> {'MEASURABLE: distinguishable' if excludes_zero else 'NOT distinguishable'} "
          f"from zero (the CI {'excludes' if excludes_zero else 'includes'} 0); "
          f"{'larger' if abs(p) > sd_rounds else 'smaller'} than the round-to-round sd of A's "
          f"own median ({us(sd_rounds)} µs).")
    if "B" in results:
        pb, blo, bhi = results["B"]
        print(f"  Reference: ProfilerHook (B - A) = {sus(pb)} µs [{sus(blo)}, {sus(bhi)}] "
              f"({100 * pb / a_med:+.1f}%).")
    if "D untraced" in results:
        pd_, dlo, dhi = results["D untraced"]
        print(f"  Replicate: untraced steps of D run the same hook code as C: (D untraced - A) "
              f"= {sus(pd_)} µs [{sus(dlo)}, {sus(dhi)}].")
    if "E" in results:
        pe, elo, ehi = results["E"]
        print(f"  Extra fetch alone: no hook, the caller fetches the global-step read (E - A) = "
              f"{sus(pe)} µs [{sus(elo)}, {sus(ehi)}]; C - E = {sus(p - pe)} µs is what the "
              f"hook adds on top (before_run/after_run, fetch-dict merging).")
    if "F" in results:
        pf, flo, fhi = results["F"]
        print(f"  Any extra output: no hook, the caller fetches a constant (F - A) = {sus(pf)} µs "
              f"[{sus(flo)}, {sus(fhi)}].")
    if d_traced_times.size:
        d_un_med = float(np.median(arr["D untraced"]))
        extra = (float(np.mean(d_traced_times)) - d_un_med) / trace_every
        print(f"  A traced step costs {us(float(np.median(d_traced_times)) - d_un_med)} µs more "
              f"than an untraced one (median); tracing every {trace_every} steps adds "
              f"{us(extra)} µs ({100 * extra / a_med:.1f}%) to the mean step time.")


def main() -> None:
    args = parse_args()
    t_start = time.perf_counter()
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    tf.compat.v1.disable_eager_execution()

    configs = make_configs(args.trace_every)
    batches = make_batches(args)
    order_rng = np.random.default_rng(args.seed + 1)
    measured = measure(configs, args, batches, order_rng)
    wall = time.perf_counter() - t_start

    rng = np.random.default_rng(args.seed + 2)
    arr = {c.key: c.times() for c in configs if c.key != "D"}
    d = next(c for c in configs if c.key == "D")
    arr["D untraced"], d_mask, d_traced_times = split_d(d, measured.d_traced, args)

    print_setup(args, tf.__version__, wall, measured, d_mask)
    results = print_table(configs, arr, d_traced_times, args, rng)
    sd_rounds = print_noise(arr["A"], arr["C"], args)
    print_verdict(results, arr, d_traced_times, sd_rounds, args.trace_every)


if __name__ == "__main__":
    main()
