"""The CI gate between two runs: per-step samples in, one verdict per metric out.

`compare` runs named stages over the runs' Samples (analyzer.gate.samples): prepare
(warm-up and outlier steps left out, several runs pooled or divided by their own
factors), normalize (the new run divided by machine factors per node-duration class,
analyzer.gate.machinefactor: a uniformly slower machine, or one whose tiny ops run
slower, is not a regression), floors (analyzer.gate.floors), significance (exact
Mann-Whitney, Bonferroni for the step level, Benjamini-Hochberg for scopes and op types,
analyzer.gate.significance), verdicts and rows. The decision is documented, with its
measured false-alarm and detection rates, in docs/ci.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from ..errors import InputFileError, RunDirError
from ..model import Run
from ..sources import detect
from .baseline import BASELINE_KIND, BASELINE_SCHEMA, load_baseline, save_baseline
from .baseruns import n_runs, normalize_runs, pooled_node_medians, run_index, step_label
from .floors import (
    NOISE_FLOOR,
    NOISE_FLOOR_US,
    OP_FLOORS,
    PEERS_ENOUGH,
    SCOPE_FLOOR_NO_PEERS,
    SCOPE_FLOORS,
    STEP_FLOORS,
    WALL_GATES_SHARED,
    Floors,
    floor_for,
    metric_floors,
)
from .machinefactor import (
    FACTOR_MIN_NODES,
    FACTOR_MIN_US,
    FACTOR_OUTLIER,
    machine_factor,
    metric_factors,
)
from .samples import OP_TIME, STEP_TIME, Samples, drop_samples, reduce_run, warmup_steps
from .significance import MIN_STEPS, Tests, significance
from .verdicts import judge
from .workdiff import work_diff

__all__ = ["BASELINE_KIND", "BASELINE_SCHEMA", "FACTOR_MIN_NODES", "FACTOR_MIN_US",
           "FACTOR_OUTLIER", "MIN_STEPS", "NOISE_FLOOR", "NOISE_FLOOR_US", "OP_FLOORS",
           "OP_TIME", "PEERS_ENOUGH", "SCOPE_FLOORS", "SCOPE_FLOOR_NO_PEERS", "STEP_FLOORS",
           "STEP_TIME", "WALL_GATES_SHARED", "Comparison", "Samples", "compare",
           "drop_samples", "floor_for", "is_baseline_file", "load_baseline",
           "machine_factor", "samples_from_run", "save_baseline", "warmup_steps"]

# Contention spikes: on a busy machine a descheduled op runs 2-20x its usual time in one
# step, in no scope in particular (one same-config transformer run had op time 4.4-30 ms
# against 4.5-5.6 ms). Each node's time in a step is capped at SPIKE_CAP x its median
# over the run's steps (+ 5 us), before any sum. A regression makes a node slower in every
# step, which moves its median, so it is not capped (docs/ci.md).
SPIKE_CAP: float | None = 1.5
VERDICT_ORDER = {"regression": 0, "watch": 1, "improvement": 2, "new": 3, "vanished": 4,
                 "unchanged": 5, "below-floor": 6}
KIND_ORDER = {"scope": 0, "step": 1, "op": 2}  # the specific scope first (docs/ci.md)


def samples_from_run(run: Run, source: str, scope_depth: int = 3) -> Samples:
    """Reduce a run to per-step samples of step time, op type time and scope time, each
    node's time in a step capped at SPIKE_CAP x its median (analyzer.gate.samples)."""
    return reduce_run(run, source, scope_depth, SPIKE_CAP)


def is_baseline_file(path: Path) -> bool:
    """A .json file that no source reads as a profile (a tf.timeline trace is a .json
    too); InputFileError when the path cannot even be looked at."""
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
    new_runs: int = 1  # processes pooled on the new side

    @property
    def regressions(self) -> pl.DataFrame:
        return self.rows.filter(pl.col("verdict") == "regression")

    @property
    def watches(self) -> pl.DataFrame:
        """Lines flagged by the statistics whose work did not change, at one process a
        side: not failing the build, to be judged with more processes."""
        return self.rows.filter(pl.col("verdict") == "watch")


@dataclass
class Prepared:
    """Both sides after the prepare stage, with what it left out and found."""

    base: Samples
    new: Samples
    excluded: dict[str, list[str]]
    outliers: dict[str, list[str]]
    k_runs: int
    run_factors: list[float]
    new_runs: int


@dataclass
class Aligned:
    """The normalize stage's output: every metric of either side (`keys`, sorted), its
    base samples `b`, new samples raw (`n_raw`) and divided by its factor (`n`),
    metrics x steps, and the medians and sizes every later stage reads."""

    keys: list[tuple[str, str]]
    b: np.ndarray
    n_raw: np.ndarray
    n: np.ndarray
    present_b: np.ndarray
    present_n: np.ndarray
    b_runs: np.ndarray  # the base run of each column of b
    metric_factor: np.ndarray
    peers: np.ndarray  # share of a scope's time divided by its peers' speed
    factor_own: np.ndarray  # the metric's own nodes its size classes divided (0: none)
    factor_peers: np.ndarray  # peer nodes that set the speed of a scope's nodes

    def __post_init__(self) -> None:
        nb, nn, k = self.b.shape[1], self.n.shape[1], len(self.keys)
        self.is_step = np.array([m[0] == "step" for m in self.keys], dtype=bool)
        wall = [i for i, m in enumerate(self.keys) if m == ("step", STEP_TIME)]
        step_median = float(np.median(self.b[wall[0]])) if wall and nb else 0.0
        self.base_med = np.median(self.b, axis=1) if nb else np.full(k, np.nan)
        self.new_med = np.median(self.n_raw, axis=1) if nn else np.full(k, np.nan)
        self.norm_med = np.median(self.n, axis=1) if nn else np.full(k, np.nan)
        self.size_us = np.maximum(self.base_med, self.norm_med)
        self.share = self.size_us / step_median if step_median > 0 else np.zeros(k)


def _matrix(s: Samples, kinds: list[str]) -> tuple[list[tuple[str, str]], np.ndarray,
                                                   list[str]]:
    wide = (s.samples.filter(pl.col("kind").is_in(kinds))
            .pivot(on="sample", index=["kind", "name"], values="value_us")
            .sort("kind", "name"))
    keys = list(zip(wide["kind"].to_list(), wide["name"].to_list(), strict=True))
    values = wide.drop("kind", "name")
    return keys, values.fill_null(0.0).to_numpy().astype(float), values.columns


def _outliers(base: Samples, new: Samples, keep: bool) -> tuple[Samples, Samples, dict,
                                                                  dict]:
    """Leave out each side's warm-up and outlier steps (analyzer.analysis.warmup), unless
    `keep`."""
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


def prepare(base: Samples, new: Samples, keep_outliers: bool, normalize: bool,
            warnings: list[str]) -> Prepared:
    """Warm-up and outlier steps left out; several new runs pooled as they are; several
    base runs each divided by its own machine factor (analyzer.gate.baseruns)."""
    caps = {side: s.meta.get("spike_cap") for side, s in (("base", base), ("new", new))}
    if caps["base"] != caps["new"]:
        warnings.append(f"contention spikes capped differently (base {caps['base']}, new "
                        f"{caps['new']}): re-save the baseline with this version")
    for side, s in (("base", base), ("new", new)):
        if s.work is None or not s.work.height:
            warnings.append(f"{side}: the nodes' work is not recorded (a baseline saved "
                            "before runlens kept it, or a profile whose kernels are not "
                            "attributed to ops): no line can be judged by a change in work")
    base, new, excluded, outliers = _outliers(base, new, keep_outliers)
    k_runs, new_runs = n_runs(base), n_runs(new)
    if new_runs >= 2:  # several new runs are pooled as they are
        new = Samples(new.source, new.samples, pooled_node_medians(new), new.scope_depth,
                      new.meta, new.work)
    run_factors: list[float] = []
    if k_runs >= 2 and normalize:
        base, run_factors = normalize_runs(base)
    for side, steps in excluded.items():
        warnings.append(f"{side}: left out {len(steps)} warm-up/outlier step(s) "
                        f"({', '.join(steps)}); --include-warmup keeps them")
    return Prepared(base, new, excluded, outliers, k_runs, run_factors, new_runs)


def normalize_stage(base: Samples, new: Samples, kinds: list[str], normalize: bool,
                    factor: float) -> Aligned:
    """Both sides' samples as matrices over the union of their metrics, the new side
    divided by each metric's machine factor (per node-duration class and peers)."""
    bk, bm, base_cols = _matrix(base, kinds)
    nk, nmx, _ = _matrix(new, kinds)
    keys = sorted(set(bk) | set(nk))
    bi, ni = {k: i for i, k in enumerate(bk)}, {k: i for i, k in enumerate(nk)}
    b = np.zeros((len(keys), bm.shape[1]))
    n = np.zeros((len(keys), nmx.shape[1]))
    for r, k in enumerate(keys):
        if k in bi:
            b[r] = bm[bi[k]]
        if k in ni:
            n[r] = nmx[ni[k]]
    runs = pl.DataFrame({"sample": base_cols}, schema={"sample": pl.String}).select(
        run_index(pl.col("sample")))
    ones, zeros = np.ones(len(keys)), np.zeros(len(keys))
    metric_factor, peers, own, peer_nodes = ones, ones, zeros, zeros
    if normalize:
        metric_factor, peers, own, peer_nodes = metric_factors(
            keys, base.node_medians, new.node_medians, factor, detail=True)
    return Aligned(keys, b, n, n / metric_factor[:, None], np.array([k in bi for k in keys]),
                   np.array([k in ni for k in keys]), runs.to_series().to_numpy(),
                   metric_factor, peers, own, peer_nodes)


def verdict_stage(a: Aligned, fl: Floors, t: Tests, threshold_pct: float,
                  normalize: bool) -> list[str]:
    """regression / improvement: significant and the interval's near end beyond the floor
    (and `threshold_pct`); new / vanished: on one side only; below-floor: too small to
    be called; the wall step time is shown but decided by op time on a shared machine."""
    threshold = threshold_pct / 100.0
    floor = np.array([np.nan if f is None else max(f, threshold) for f in fl.floors])
    # The change must reach the floor with 95% confidence: the interval's near end, not
    # only the estimate (no interval without a test: the estimate).
    up = t.r_low if t.testable else t.ratio
    down = t.r_high if t.testable else t.ratio
    with np.errstate(invalid="ignore", divide="ignore"):
        regressed = t.sig_up & (up - 1 >= floor)
        improved = t.sig_down & (1 / down - 1 >= floor)
    wall_decided_by_op_time = np.array(
        [normalize and not WALL_GATES_SHARED and k == ("step", STEP_TIME) for k in a.keys],
        dtype=bool)
    return np.select(
        [~a.present_b, ~a.present_n, np.isnan(floor), wall_decided_by_op_time, regressed,
         improved],
        ["new", "vanished", "below-floor", "unchanged", "regression", "improvement"],
        default="unchanged").tolist()


def _pct(a: np.ndarray, c: np.ndarray) -> np.ndarray:
    return np.where(c > 0, (a - c) / np.where(c > 0, c, 1) * 100, np.nan)


def _factor_labels(a: Aligned, factor_nodes: int, normalize: bool) -> list[str]:
    """Where each metric's machine factor came from, as the report says it."""
    if not normalize:
        return ["not normalized (--no-normalize)"] * len(a.keys)
    wide = f"machine-wide, median over {factor_nodes} nodes"
    return [f"{int(pn)} peer nodes (same op type and size, outside it; {pe:.0%} of its time)"
            if k[0] == "scope" and pe >= PEERS_ENOUGH and pn > 0
            else f"size classes of its {int(own)} node(s)" if own > 0 and k[0] != "step"
            else f"size classes of all {int(own)} nodes" if own > 0 else wide
            for k, pe, pn, own in zip(a.keys, a.peers, a.factor_peers, a.factor_own,
                                      strict=True)]


def rows_stage(a: Aligned, fl: Floors, t: Tests, verdicts: list[str], k_runs: int,
               factor_labels: list[str]) -> pl.DataFrame:
    """One row per metric: medians, changes, the factor its new side was divided by and
    where it came from, effect with interval, p-values, floor and the statistical verdict
    (the columns the renderers and docs/ci.md name)."""
    nb, nn = a.b.shape[1], a.n.shape[1]
    rows = pl.DataFrame({
        "kind": [k[0] for k in a.keys], "name": [k[1] for k in a.keys],
        "base_median_us": a.base_med, "new_median_us": a.new_med,
        "base_p90_us": np.quantile(a.b, 0.9, axis=1, method="nearest") if nb else np.nan,
        "new_p90_us": np.quantile(a.n_raw, 0.9, axis=1, method="nearest") if nn else np.nan,
        "norm_median_us": a.norm_med, "factor": a.metric_factor,
        "factor_from": factor_labels,
        "change_pct": _pct(a.new_med, a.base_med),
        "norm_change_pct": _pct(a.norm_med, a.base_med),
        "effect_pct": (t.ratio - 1) * 100, "effect_low_pct": (t.r_low - 1) * 100,
        "effect_high_pct": (t.r_high - 1) * 100,
        "p_greater": t.p_up, "p_less": t.p_down, "p_greater_adj": t.q_up,
        "p_less_adj": t.q_down,
        "floor_pct": [None if f is None else f * 100 for f in fl.floors],
        "floor_from": fl.labels(k_runs),
        "run_spread_pct": (fl.spread - 1) * 100,
        "share_pct": a.share * 100, "n_base": [nb] * len(a.keys),
        "n_new": [nn] * len(a.keys), "significant": t.sig_up, "verdict": verdicts,
    }, strict=False).with_columns(
        pl.col(c).fill_nan(None) for c in ("run_spread_pct", "change_pct", "norm_change_pct",
                                           "effect_pct", "effect_low_pct", "effect_high_pct",
                                           "p_greater", "p_less", "p_greater_adj",
                                           "p_less_adj"))
    return rows.with_columns(
        delta_us=pl.col("norm_median_us").fill_null(0) - pl.col("base_median_us").fill_null(0))


def order_rows(rows: pl.DataFrame) -> pl.DataFrame:
    """Regressions first, scopes before step-level rows and op types, a scope explained by
    a moved scope below it after that one, then by size of the change."""
    return (
        _mark_explained(rows)
        .with_columns(v_rank=pl.col("verdict").replace_strict(VERDICT_ORDER, return_dtype=pl.Int32),
                      k_rank=pl.col("kind").replace_strict(KIND_ORDER, return_dtype=pl.Int32),
                      size=pl.col("delta_us").abs())
        .sort(["v_rank", "k_rank", "explained", "size", "name"],
              descending=[False, False, False, True, False])
        .drop("v_rank", "k_rank", "size")
    )


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
    p = prepare(base, new, keep_outliers, normalize, warnings)
    factor, factor_nodes = machine_factor(p.base, p.new) if normalize else (1.0, 0)
    if normalize and factor_nodes < FACTOR_MIN_NODES:
        warnings.append(f"only {factor_nodes} nodes with >= {FACTOR_MIN_US:.0f}us in both "
                        "runs: no machine-wide normalization")
    kinds = {"all": ["step", "op", "scope"], "step": ["step"], "op": ["op"],
             "scope": ["scope"]}[by]
    a = normalize_stage(p.base, p.new, sorted(set(kinds) | {"step"}), normalize, factor)
    fl = metric_floors(a.keys, a.share, a.size_us, a.peers, a.b, a.b_runs, p.k_runs)
    family = np.array([not s and f is not None for s, f in zip(a.is_step, fl.floors,
                                                                strict=True)])
    family &= a.present_b & a.present_n
    t = significance(a.b, a.n, a.is_step, family, a.base_med, a.norm_med, alpha, warnings)
    rows = rows_stage(a, fl, t, verdict_stage(a, fl, t, threshold_pct, normalize), p.k_runs,
                      _factor_labels(a, factor_nodes, normalize))
    rows = judge(rows, work_diff(p.base.work, p.new.work, p.base.scope_depth),
                 min(p.k_runs, p.new_runs), threshold_pct, t.testable, normalize)
    if by != "all" and "step" not in kinds:
        rows = rows.filter(pl.col("kind") != "step")
    return Comparison(order_rows(rows), factor, factor_nodes, t.method, threshold_pct, alpha,
                      warnings, p.base.source, p.new.source, p.excluded, p.outliers,
                      p.k_runs, p.run_factors, p.new_runs)


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
