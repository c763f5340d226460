"""Regression statistics between two runs: per-step samples, a machine-wide factor, tests.

A run is reduced to `Samples`: for each traced step (per worker), the step time and the
time of each op type and each name scope (tfprof's micros per execution, summed). A
baseline file (analyzer.gate.baseline) is exactly these samples as JSON.

The decision is documented, with its measured false-alarm and detection rates, in
docs/ci.md: warm-up and outlier steps are left out (analyzer.analysis.warmup), the new
run is divided by machine factors (per node-duration class, analyzer.gate.machinefactor:
a uniformly slower machine, or one whose tiny ops run slower, is not a regression), step
time is tested
alone and scopes/op types as one Benjamini-Hochberg family, with exact Mann-Whitney
p-values, and every call also needs a Hodges-Lehmann change above an effect-size floor
measured between separate runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ..analysis.steps import step_times
from ..analysis.warmup import flag_steps
from ..errors import InputFileError, RunDirError
from ..model import Run
from .baseline import BASELINE_KIND, BASELINE_SCHEMA, load_baseline, save_baseline
from .baseruns import (
    n_runs,
    normalize_runs,
    pooled_node_medians,
    run_floors,
    run_index,
    run_spread,
    step_label,
)
from .machinefactor import metric_factors
from .stats import (
    benjamini_hochberg,
    hodges_lehmann,
    mann_whitney_greater,
    smallest_p,
)

__all__ = ["BASELINE_KIND", "BASELINE_SCHEMA", "Comparison", "Samples", "compare",
           "is_baseline_file", "load_baseline", "samples_from_run", "save_baseline"]

MIN_STEPS = 3  # fewer steps a side: no test at all, the floors alone decide (a warning)
FACTOR_MIN_NODES = 5
FACTOR_MIN_US = 5.0
FACTOR_OUTLIER = 1.5  # nodes whose ratio is this far from the first estimate changed locally
NOISE_FLOOR = 0.01  # a metric must be at least this share of the median step to be called
# ... and this many microseconds per step: the trace has 1 us resolution, and tiny ops
# jump between ~1 and ~10 us between processes of the same code (an MLP's dense2/MatMul:
# median 1 us in two runs, 9 us in two others; docs/ci.md).
NOISE_FLOOR_US = 20.0
# Effect-size floors: the lower end of a regression's 95% interval (normalized
# Hodges-Lehmann change, new/base - 1) must reach its metric's floor. Each floor is the
# largest lower end seen at 10 steps a side between separate same-config processes
# (8 runs of each of two models, every ordered pair, 4 draws; spikes capped) x 1.25,
# rounded up to the next 10%; rates measured on other runs (docs/ci.md).
STEP_TIME, OP_TIME = "step time", "op time"  # the two step-level metrics
# Contention spikes: on a busy machine a descheduled op runs 2-20x its usual time in one
# step, in no scope in particular (one same-config transformer run had op time 4.4-30 ms
# against 4.5-5.6 ms). Each node's time in a step is capped at SPIKE_CAP x its median
# over the run's steps (+ FACTOR_MIN_US), before any sum. A regression makes a node slower
# in every step, which moves its median, so it is not capped (docs/ci.md).
SPIKE_CAP: float | None = 1.5
STEP_FLOORS = {STEP_TIME: 0.50, OP_TIME: 0.10}
# The wall span of a step gates only with --no-normalize (dedicated hardware). On a shared
# machine it holds idle time that contention stretches: same-config transformer runs of
# two capture sessions differed by up to 140% in median step time, op time (spikes
# capped) by at most 10%. A step slower by op work is caught on op time (docs/ci.md).
WALL_GATES_SHARED = False
SCOPE_FLOORS = ((0.10, 0.50), (0.03, 0.50), (NOISE_FLOOR, 1.20))  # (share >=, floor)
# A scope of >= 3% whose time is mostly divided by its own size class (no nodes of the
# same kernel and size outside it, analyzer.gate.machinefactor) keeps the floor chosen for that
# method: a regression there moves the factor it is divided by, and so does a process
# that runs one kernel slower (tf_base_a: every optimizer update 3x slower).
SCOPE_FLOOR_NO_PEERS = 0.60
PEERS_ENOUGH = 0.5  # share of a scope's time divided by its peers' speed
# Op types sum one kernel over the whole model: the six attention softmaxes together
# (op type Softmax) moved more between processes than any one scope did.
OP_FLOORS = ((0.10, 0.70), (0.03, 0.70), (NOISE_FLOOR, 1.20))


@dataclass
class Samples:
    """Per-step samples of a run: long frame (kind, name, sample, value_us) + node medians."""

    source: str
    samples: pl.DataFrame  # kind ("step"|"op"|"scope"), name, sample ("worker/step"), value_us
    node_medians: pl.DataFrame  # name, median_us[, op_type] (every timed node: the factors)
    scope_depth: int = 3
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def n_samples(self) -> int:
        return self.samples.filter(pl.col("name") == STEP_TIME).height


def _exec_us() -> pl.Expr:
    return pl.when(pl.col("op_end_rel_us") == 0).then(1).otherwise(pl.col("op_end_rel_us"))


def samples_from_run(run: Run, source: str, scope_depth: int = 3) -> Samples:
    """Reduce a run to per-step samples of step time, op type time and scope time.

    Op time, op types and scopes are sums of per-node step times capped at SPIKE_CAP x
    the node's median step time (contention spikes); step time is the wall span, as is.
    """
    n = run.nodes.filter((pl.col("all_start_us") > 0)
                         & pl.col("lane_kind").is_in(["device", "stream_all"]))
    n = n.with_columns(us=_exec_us().cast(pl.Float64),
                       sample=pl.format("{}/{}", pl.col("worker"), pl.col("step")))
    # One row per node and step: its time in that step, capped (see SPIKE_CAP).
    n = (n.group_by("node_name", "op_type", "sample").agg(us=pl.col("us").sum())
         .with_columns(median_us=pl.col("us").median().over("node_name")))
    if SPIKE_CAP is not None:
        n = n.with_columns(us=pl.min_horizontal(
            "us", pl.col("median_us") * SPIKE_CAP + FACTOR_MIN_US))
    steps = step_times(run).select(
        kind=pl.lit("step"), name=pl.lit(STEP_TIME),
        sample=pl.format("{}/{}", pl.col("worker"), pl.col("step")),
        value_us=pl.col("duration_ns") / 1000.0)
    op_time = n.group_by("sample").agg(value_us=pl.col("us").sum()).select(
        kind=pl.lit("step"), name=pl.lit(OP_TIME), sample="sample", value_us="value_us")
    ops = n.group_by("op_type", "sample").agg(value_us=pl.col("us").sum()).select(
        kind=pl.lit("op"), name="op_type", sample="sample", value_us="value_us")
    parts = pl.col("node_name").str.split("/")
    scopes = (
        n.filter(parts.list.len() > 1)
        .with_columns(level=pl.int_ranges(1, pl.min_horizontal(parts.list.len(),
                                                               scope_depth + 1)))
        .explode("level")
        .with_columns(name=pl.col("node_name").str.split("/").list.head(pl.col("level"))
                      .list.join("/"))
        .group_by("name", "sample").agg(value_us=pl.col("us").sum())
        .select(kind=pl.lit("scope"), name="name", sample="sample", value_us="value_us")
    )
    node_medians = (n.group_by("node_name").agg(median_us=pl.col("median_us").first(),
                                                op_type=pl.col("op_type").first())
                    .rename({"node_name": "name"}).sort("name"))
    long = _fill_missing(pl.concat([steps, op_time, ops, scopes]))

    return Samples(source, long, node_medians, scope_depth,
                   {"steps": len(run.steps), "workers": run.workers, "spike_cap": SPIKE_CAP})


def _fill_missing(long: pl.DataFrame) -> pl.DataFrame:
    """A metric absent from a step is 0 there (an op type that did not run)."""
    all_samples = long.select("sample").unique()
    metrics = long.select("kind", "name").unique()
    return (
        metrics.join(all_samples, how="cross")
        .join(long, on=["kind", "name", "sample"], how="left")
        .with_columns(pl.col("value_us").fill_null(0.0))
        .sort("kind", "name", "sample")
    )




def is_baseline_file(path: Path) -> bool:
    """A .json file that no source reads as a profile (a tf.timeline trace is a .json
    too); InputFileError when the path cannot even be looked at."""
    from ..sources import detect

    try:
        if not (path.is_file() and path.suffix == ".json"):
            return False
    except OSError as e:  # a folder on the way that we may not search
        raise InputFileError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        detect(path)
    except RunDirError:
        return True
    return False


# ----------------------------------------------------------------------------- warm-up


def _step_number(sample: pl.Expr) -> pl.Expr:
    return sample.str.extract(r"/(\d+)$", 1).cast(pl.Int64, strict=False)


def warmup_steps(s: Samples) -> pl.DataFrame:
    """The run's steps with outlier and warm-up flags (analyzer.analysis.warmup's rule)."""
    steps = s.samples.filter(pl.col("name") == STEP_TIME).select(
        "sample", worker=pl.col("sample").str.replace(r"/\d+$", ""),
        step=_step_number(pl.col("sample")), step_us="value_us")
    return flag_steps(steps.with_columns(pl.col("step").fill_null(0)))


def drop_samples(s: Samples, samples: list[str]) -> Samples:
    return Samples(s.source, s.samples.filter(~pl.col("sample").is_in(samples)),
                   s.node_medians, s.scope_depth, s.meta)


# ----------------------------------------------------------------------------- comparison


@dataclass
class Comparison:
    rows: pl.DataFrame  # one row per metric, see compare()
    factor: float
    factor_nodes: int
    method: str
    threshold_pct: float
    alpha: float
    warnings: list[str]
    base: str
    new: str
    excluded: dict[str, list[str]] = field(default_factory=dict)  # side -> steps left out
    outliers: dict[str, list[str]] = field(default_factory=dict)  # side -> flagged, kept
    base_runs: int = 1  # runs in the base; >= 2: floors from their spread (baseruns)
    run_factors: list[float] = field(default_factory=list)  # each base run's machine factor

    @property
    def regressions(self) -> pl.DataFrame:
        return self.rows.filter(pl.col("verdict") == "regression")


def machine_factor(base: Samples, new: Samples) -> tuple[float, int]:
    """The machine-wide speed factor between two runs, and how many nodes it rests on.

    The median new/base time ratio over nodes with real time in both runs; then again
    without the nodes whose ratio is more than FACTOR_OUTLIER away from that first
    estimate (they changed locally, e.g. the layer that regressed), so that a local change
    in a small model does not pass for machine noise. 1.0 when too few nodes qualify.
    """
    timed = pl.col("median_us") >= FACTOR_MIN_US
    both = (base.node_medians.filter(timed).select("name", "median_us")
            .join(new.node_medians.filter(timed).select("name", "median_us"), on="name",
                  suffix="_new")
            .with_columns(ratio=pl.col("median_us_new") / pl.col("median_us")))
    if both.height < FACTOR_MIN_NODES:
        return 1.0, both.height
    first = float(both["ratio"].median())  # type: ignore[arg-type]
    steady = both.filter((pl.col("ratio") / first).is_between(1 / FACTOR_OUTLIER,
                                                              FACTOR_OUTLIER))
    if steady.height < FACTOR_MIN_NODES:
        return first, both.height
    return float(steady["ratio"].median()), steady.height  # type: ignore[arg-type]


def floor_for(kind: str, share: float, name: str = STEP_TIME) -> float | None:
    """The effect-size floor of a metric, or None when it is too small to be called."""
    if kind == "step":
        return STEP_FLOORS.get(name, max(STEP_FLOORS.values()))
    for least, floor in OP_FLOORS if kind == "op" else SCOPE_FLOORS:
        if share >= least:
            return floor
    return None


def _matrix(s: Samples, kinds: list[str]) -> tuple[list[tuple[str, str]], np.ndarray,
                                                   list[str]]:
    wide = (s.samples.filter(pl.col("kind").is_in(kinds))
            .pivot(on="sample", index=["kind", "name"], values="value_us")
            .sort("kind", "name"))
    keys = list(zip(wide["kind"].to_list(), wide["name"].to_list(), strict=True))
    values = wide.drop("kind", "name")
    return keys, values.fill_null(0.0).to_numpy().astype(float), values.columns


def _align(base: Samples, new: Samples, kinds: list[str]):
    bk, bm, base_cols = _matrix(base, kinds)
    nk, nmx, _ = _matrix(new, kinds)
    keys = sorted(set(bk) | set(nk))
    bi, ni = {k: i for i, k in enumerate(bk)}, {k: i for i, k in enumerate(nk)}
    b = np.zeros((len(keys), bm.shape[1]))
    n = np.zeros((len(keys), nmx.shape[1]))
    present_b = np.array([k in bi for k in keys])
    present_n = np.array([k in ni for k in keys])
    for r, k in enumerate(keys):
        if k in bi:
            b[r] = bm[bi[k]]
        if k in ni:
            n[r] = nmx[ni[k]]
    runs = pl.DataFrame({"sample": base_cols}, schema={"sample": pl.String}).select(
        run_index(pl.col("sample")))
    return keys, b, n, present_b, present_n, runs.to_series().to_numpy()


def _outliers(base: Samples, new: Samples, keep: bool) -> tuple[Samples, Samples, dict,
                                                                  dict]:
    """Leave out each side's warm-up and outlier steps (analyzer.analysis.warmup), unless `keep`."""
    excluded: dict[str, list[str]] = {}
    outliers: dict[str, list[str]] = {}
    out = []
    for side, s in (("base", base), ("new", new)):
        flags = warmup_steps(s)
        gone = flags.filter("left_out")["sample"].to_list()
        flagged = flags.filter(pl.col("warmup") | pl.col("outlier"))["sample"].to_list()
        dropped = gone if gone and not keep else []
        if dropped:
            excluded[side] = [step_label(s, x) for x in dropped]
        kept = [step_label(s, x) for x in flagged if x not in dropped]
        if kept:
            outliers[side] = kept
        if dropped:
            s = drop_samples(s, dropped)
        out.append(s)
    return out[0], out[1], excluded, outliers


def compare(base: Samples, new: Samples, threshold_pct: float = 0.0, alpha: float = 0.01,
            by: str = "all", normalize: bool = True, keep_outliers: bool = False
            ) -> Comparison:
    """Compare per-step samples; one row per metric with medians, effect, p and verdict.

    The decision (docs/ci.md): step time and op time are tested on their own (exact
    one-sided Mann-Whitney, Bonferroni over the two; step time, the wall span, decides only
    with normalize off: WALL_GATES_SHARED); scopes and op types of at least
    NOISE_FLOOR of the step are one family under Benjamini-Hochberg (q < alpha). Either
    way the lower end of the 95% interval of the normalized Hodges-Lehmann change must
    reach the metric's effect-size floor (and `threshold_pct`). Warm-up and outlier steps
    are left out unless `keep_outliers`. Verdicts: regression, improvement, unchanged,
    new, vanished, below-floor.
    """
    warnings: list[str] = []
    caps = {side: s.meta.get("spike_cap") for side, s in (("base", base), ("new", new))}
    if caps["base"] != caps["new"]:
        warnings.append(f"contention spikes capped differently (base {caps['base']}, new "
                        f"{caps['new']}): re-save the baseline with this version")
    base, new, excluded, outliers = _outliers(base, new, keep_outliers)
    k_runs = n_runs(base)
    if n_runs(new) >= 2:  # several new runs are pooled as they are
        new = Samples(new.source, new.samples, pooled_node_medians(new), new.scope_depth,
                      new.meta)
    run_factors: list[float] = []
    if k_runs >= 2 and normalize:
        base, run_factors = normalize_runs(base)
    for side, steps in excluded.items():
        warnings.append(f"{side}: left out {len(steps)} warm-up/outlier step(s) "
                        f"({', '.join(steps)}); --keep-outliers keeps them")
    factor, factor_nodes = machine_factor(base, new) if normalize else (1.0, 0)
    if normalize and factor_nodes < FACTOR_MIN_NODES:
        warnings.append(f"only {factor_nodes} nodes with >= {FACTOR_MIN_US:.0f}us in both "
                        "runs: no machine-wide normalization")
    kinds = {"all": ["step", "op", "scope"], "step": ["step"], "op": ["op"],
             "scope": ["scope"]}[by]
    keys, b, n_raw, present_b, present_n, b_runs = _align(base, new,
                                                          sorted(set(kinds) | {"step"}))
    metric_factor, peers = np.ones(len(keys)), np.ones(len(keys))
    if normalize:
        metric_factor, peers = metric_factors(keys, base.node_medians, new.node_medians,
                                              factor)
    n = n_raw / metric_factor[:, None]
    nb, nn = b.shape[1], n.shape[1]
    is_step = np.array([k[0] == "step" for k in keys])
    wall = [i for i, k in enumerate(keys) if k == ("step", STEP_TIME)]
    step_median = float(np.median(b[wall[0]])) if wall and nb else 0.0
    base_med = np.median(b, axis=1) if nb else np.full(len(keys), np.nan)
    new_med = np.median(n_raw, axis=1) if nn else np.full(len(keys), np.nan)
    norm_med = np.median(n, axis=1) if nn else np.full(len(keys), np.nan)
    share = np.maximum(base_med, norm_med) / step_median if step_median > 0 \
        else np.zeros(len(keys))
    size_us = np.maximum(base_med, norm_med)
    floors = [floor_for(m[0], float(sh), m[1]) if m[0] == "step" or us >= NOISE_FLOOR_US
              else None for m, sh, us in zip(keys, share, size_us, strict=True)]
    lone = [f is not None and m[0] == "scope" and f < SCOPE_FLOOR_NO_PEERS
            and pe < PEERS_ENOUGH for f, m, pe in zip(floors, keys, peers, strict=True)]
    floors = [SCOPE_FLOOR_NO_PEERS if lo else f for f, lo in zip(floors, lone, strict=True)]
    floor_from = "size class"
    spread = np.full(len(keys), np.nan)
    if k_runs >= 2 and nb:
        # Several base runs: each metric's floor from the spread of the runs' own medians
        # (analyzer.gate.baseruns), wherever the size class lets the metric be called at all.
        spread = run_spread(b, b_runs)
        by_class = np.array([np.nan if f is None else f for f in floors])
        by_runs = run_floors([m[0] for m in keys], spread, by_class, share)
        floors = [None if f is None else float(r) for f, r in zip(floors, by_runs,
                                                                   strict=True)]
        floor_from = f"{k_runs} base runs"
    testable = min(nb, nn) >= MIN_STEPS
    if testable:
        p_up, test = mann_whitney_greater(n, b)
        p_down, _ = mann_whitney_greater(b, n)
        # Effect: Hodges-Lehmann shift of log(time + 1us): a ratio with its exact 95% CI.
        shift, low, high = hodges_lehmann(np.log(n + 1.0), np.log(b + 1.0))
        ratio, r_low, r_high = np.exp(shift), np.exp(low), np.exp(high)
    else:
        test = "no test"
        p_up = p_down = np.full(len(keys), np.nan)
        ratio = (norm_med + 1.0) / (base_med + 1.0)
        r_low = r_high = np.full(len(keys), np.nan)
        warnings.append(f"fewer than {MIN_STEPS} steps on a side ({nb} base, {nn} new): "
                        "no significance test, the effect-size floors alone decide")
    family = np.array([not s and f is not None for s, f in zip(is_step, floors, strict=True)])
    family &= present_b & present_n
    q_up, q_down = p_up.copy(), p_down.copy()
    sig_up = np.ones(len(keys), bool)
    sig_down = np.ones(len(keys), bool)
    method = "no test (fewer than 3 steps a side: the effect-size floors alone decide)"
    if testable:
        method = (f"{test} (one-sided; step time and op time Bonferroni, scopes and op "
                  "types Benjamini-Hochberg)")
        p_min = smallest_p(nn, nb)
        tied = p_min * (1 + 1e-9)
        # Step level: step time and op time, each at alpha / 2 (Bonferroni over the two).
        step_alpha = alpha / max(1, int(is_step.sum()))
        q_up[is_step] = np.minimum(1.0, p_up[is_step] * is_step.sum())
        q_down[is_step] = np.minimum(1.0, p_down[is_step] * is_step.sum())
        sig_up, sig_down = q_up < alpha, q_down < alpha
        if family.any():
            q_up[family] = benjamini_hochberg(p_up[family])
            q_down[family] = benjamini_hochberg(p_down[family])
            sig_up[family], sig_down[family] = q_up[family] < alpha, q_down[family] < alpha
        # Sample sizes that cannot reach alpha: say so, and call only complete separation
        # (every new step slower than every base step) above the floor.
        if family.any() and p_min > alpha / family.sum():
            method = (f"{test} (one-sided; step time and op time Bonferroni; scopes and op "
                      "types: complete separation, too few steps for Benjamini-Hochberg)")
            warnings.append(
                f"with {nb} base and {nn} new steps the smallest exact p is {p_min:.2g}, "
                f"above the {alpha / family.sum():.2g} Benjamini-Hochberg needs over "
                f"{int(family.sum())} scopes and op types: a scope or op type is called "
                "only when every new step is slower than every base step (and the floor "
                "holds); trace 10 or more steps a side for a real test")
            sig_up[family], sig_down[family] = p_up[family] <= tied, p_down[family] <= tied
        if is_step.any() and p_min >= step_alpha:
            warnings.append(f"with {nb} base and {nn} new steps the smallest exact p is "
                            f"{p_min:.2g}, not below {step_alpha:.2g}: step time and op "
                            "time are called only on complete separation; trace more steps")
            sig_up[is_step], sig_down[is_step] = p_up[is_step] <= tied, p_down[is_step] <= tied
    threshold = threshold_pct / 100.0
    floor = np.array([np.nan if f is None else max(f, threshold) for f in floors])
    # The change must reach the floor with 95% confidence: the interval's near end, not
    # only the estimate (no interval without a test: the estimate).
    up = r_low if testable else ratio
    down = r_high if testable else ratio
    with np.errstate(invalid="ignore", divide="ignore"):
        regressed = sig_up & (up - 1 >= floor)
        improved = sig_down & (1 / down - 1 >= floor)
    wall_decided_by_op_time = np.array(
        [normalize and not WALL_GATES_SHARED and k == ("step", STEP_TIME) for k in keys],
        dtype=bool)
    verdicts = np.select(
        [~present_b, ~present_n, np.isnan(floor), wall_decided_by_op_time, regressed,
         improved],
        ["new", "vanished", "below-floor", "unchanged", "regression", "improvement"],
        default="unchanged").tolist()
    pct = lambda a, c: np.where(c > 0, (a - c) / np.where(c > 0, c, 1) * 100, np.nan)  # noqa: E731
    rows = pl.DataFrame({
        "kind": [k[0] for k in keys], "name": [k[1] for k in keys],
        "base_median_us": base_med, "new_median_us": new_med,
        "base_p90_us": np.quantile(b, 0.9, axis=1, method="nearest") if nb else np.nan,
        "new_p90_us": np.quantile(n_raw, 0.9, axis=1, method="nearest") if nn else np.nan,
        "norm_median_us": norm_med,
        "change_pct": pct(new_med, base_med), "norm_change_pct": pct(norm_med, base_med),
        "effect_pct": (ratio - 1) * 100, "effect_low_pct": (r_low - 1) * 100,
        "effect_high_pct": (r_high - 1) * 100,
        "p_greater": p_up, "p_less": p_down, "p_greater_adj": q_up, "p_less_adj": q_down,
        "floor_pct": [None if f is None else f * 100 for f in floors],
        "floor_from": [None if f is None else floor_from + (", no peer nodes" if lo and
                                                            k_runs < 2 else "")
                       for f, lo in zip(floors, lone, strict=True)],
        "run_spread_pct": (spread - 1) * 100,
        "share_pct": share * 100, "n_base": [nb] * len(keys), "n_new": [nn] * len(keys),
        "verdict": verdicts,
    }, strict=False).with_columns(
        pl.col(c).fill_nan(None) for c in ("run_spread_pct", "change_pct", "norm_change_pct",
                                           "effect_pct", "effect_low_pct", "effect_high_pct",
                                           "p_greater", "p_less", "p_greater_adj",
                                           "p_less_adj"))
    rows = rows.with_columns(
        delta_us=pl.col("norm_median_us").fill_null(0) - pl.col("base_median_us").fill_null(0))
    if by != "all" and "step" not in kinds:
        rows = rows.filter(pl.col("kind") != "step")
    order = {"regression": 0, "improvement": 1, "new": 2, "vanished": 3, "unchanged": 4,
             "below-floor": 5}
    kind_order = {"scope": 0, "step": 1, "op": 2}  # the specific scope first (docs/ci.md)
    rows = _mark_explained(rows)
    rows = (
        rows.with_columns(v_rank=pl.col("verdict").replace_strict(order, return_dtype=pl.Int32),
                          k_rank=pl.col("kind").replace_strict(kind_order,
                                                               return_dtype=pl.Int32),
                          size=pl.col("delta_us").abs())
        .sort(["v_rank", "k_rank", "explained", "size", "name"],
              descending=[False, False, False, True, False])
        .drop("v_rank", "k_rank", "size")
    )
    return Comparison(rows, factor, factor_nodes, method, threshold_pct, alpha, warnings,
                      base.source, new.source, excluded, outliers, k_runs, run_factors)


def _mark_explained(rows: pl.DataFrame) -> pl.DataFrame:
    """`explained`: a scope whose change is mostly (>= half) one moved scope below it, so
    the report names the specific scope first ("dense2" before its parent "train")."""
    moved = rows.filter(pl.col("kind") == "scope").select("name", "verdict", "delta_us")
    pairs = moved.join(moved, how="cross", suffix="_below").filter(
        pl.col("name_below").str.starts_with(pl.col("name") + "/")
        & (pl.col("verdict") == pl.col("verdict_below"))
        & (pl.col("delta_us_below").abs() >= 0.5 * pl.col("delta_us").abs()))
    explained = pairs.select("name").unique().with_columns(explained=pl.lit(True))
    return rows.join(explained, on="name", how="left").with_columns(
        explained=pl.col("explained").fill_null(False) & (pl.col("kind") == "scope"))
