"""Regression statistics between two runs: per-step samples, a machine-wide factor, tests.

A run is reduced to `Samples`: for each traced step (per worker), the step time and the
time of each op type and each name scope (tfprof's micros per execution, summed). A
baseline file is exactly these samples as JSON, so CI can keep a small file.

A difference is a regression only when it is statistically significant (one-sided
Mann-Whitney U over steps, Holm-corrected across all compared metrics, `alpha`) and
larger than `threshold` percent, after dividing the new run by the machine-wide factor:
the median, over nodes that take real time in both runs, of their new/base time ratio.
A machine that is uniformly 20% slower moves every node, so the factor absorbs it; a
regression local to one scope moves few nodes, so it barely moves the factor and stays
visible. With fewer than MIN_STEPS steps a side the threshold alone decides, with a
warning.
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from analyzer.errors import InputFileError
from analyzer.model import Run
from analyzer.stats import holm, mann_whitney
from analyzer.steps import step_times

BASELINE_KIND = "runlens-baseline"
BASELINE_SCHEMA = 1
MIN_STEPS = 5
FACTOR_MIN_NODES = 5
FACTOR_MIN_US = 5.0
FACTOR_OUTLIER = 1.5  # nodes whose ratio is this far from the first estimate changed locally
NOISE_FLOOR = 0.01  # a metric must be at least this share of the median step to be called


@dataclass
class Samples:
    """Per-step samples of a run: long frame (kind, name, sample, value_us) + node medians."""

    source: str
    samples: pl.DataFrame  # kind ("step"|"op"|"scope"), name, sample ("worker/step"), value_us
    node_medians: pl.DataFrame  # name, median_us (nodes with real time, for the factor)
    scope_depth: int = 3
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def n_samples(self) -> int:
        return self.samples.filter(pl.col("kind") == "step").height


def _exec_us() -> pl.Expr:
    return pl.when(pl.col("op_end_rel_us") == 0).then(1).otherwise(pl.col("op_end_rel_us"))


def samples_from_run(run: Run, source: str, scope_depth: int = 3) -> Samples:
    """Reduce a run to per-step samples of step time, op type time and scope time."""
    n = run.nodes.filter((pl.col("all_start_us") > 0)
                         & pl.col("lane_kind").is_in(["device", "stream_all"]))
    n = n.with_columns(us=_exec_us().cast(pl.Float64),
                       sample=pl.format("{}/{}", pl.col("worker"), pl.col("step")))
    steps = step_times(run).select(
        kind=pl.lit("step"), name=pl.lit("step time"),
        sample=pl.format("{}/{}", pl.col("worker"), pl.col("step")),
        value_us=pl.col("duration_ns") / 1000.0)
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
    per_node = n.group_by("node_name", "sample").agg(us=pl.col("us").sum())
    node_medians = (per_node.group_by("node_name").agg(median_us=pl.col("us").median())
                    .filter(pl.col("median_us") >= FACTOR_MIN_US)
                    .rename({"node_name": "name"}).sort("name"))
    long = _fill_missing(pl.concat([steps, ops, scopes]))
    return Samples(source, long, node_medians, scope_depth,
                   {"steps": len(run.steps), "workers": run.workers})


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


# ----------------------------------------------------------------------------- baseline


def save_baseline(samples: Samples, path: Path) -> None:
    from analyzer.rundir import atomic_write

    wide = samples.samples.group_by("kind", "name").agg(
        pl.col("value_us").sort_by("sample").round(3))
    doc = {
        "format": BASELINE_KIND,
        "schema": BASELINE_SCHEMA,
        "source": samples.source,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "scope_depth": samples.scope_depth,
        "meta": samples.meta,
        "samples": samples.samples.select("sample").unique().sort("sample")["sample"].to_list(),
        "metrics": [{"kind": k, "name": nm, "values_us": v}
                    for k, nm, v in wide.sort("kind", "name").iter_rows()],
        "node_medians_us": dict(samples.node_medians.select(
            "name", pl.col("median_us").round(3)).iter_rows()),
    }
    atomic_write(path, (json.dumps(doc, indent=0) + "\n").encode())


def is_baseline_file(path: Path) -> bool:
    return path.is_file() and path.suffix == ".json"


def load_baseline(path: Path) -> Samples:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise InputFileError(f"{path}: not a readable baseline file ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != BASELINE_KIND:
        raise InputFileError(f"{path}: not a runlens baseline (save one with "
                             "`analyze baseline save RUN -o FILE`)")
    if doc.get("schema", 0) > BASELINE_SCHEMA:
        raise InputFileError(f"{path}: baseline schema {doc.get('schema')} is newer than "
                             "this runlens reads; upgrade runlens")
    try:
        ids = doc["samples"]
        rows = [(m["kind"], m["name"], ids[i], float(v))
                for m in doc["metrics"] for i, v in enumerate(m["values_us"])]
        medians = list(doc.get("node_medians_us", {}).items())
    except (KeyError, TypeError, IndexError, ValueError) as e:
        raise InputFileError(f"{path}: malformed baseline ({type(e).__name__}: {e})") from None
    long = pl.DataFrame(rows, schema={"kind": pl.String, "name": pl.String,
                                      "sample": pl.String, "value_us": pl.Float64},
                        orient="row")
    nm = pl.DataFrame(medians, schema={"name": pl.String, "median_us": pl.Float64},
                      orient="row")
    return Samples(str(path), long, nm, int(doc.get("scope_depth", 3)), doc.get("meta", {}))


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
    both = base.node_medians.join(new.node_medians, on="name", suffix="_new").with_columns(
        ratio=pl.col("median_us_new") / pl.col("median_us"))
    if both.height < FACTOR_MIN_NODES:
        return 1.0, both.height
    first = float(both["ratio"].median())  # type: ignore[arg-type]
    steady = both.filter((pl.col("ratio") / first).is_between(1 / FACTOR_OUTLIER,
                                                              FACTOR_OUTLIER))
    if steady.height < FACTOR_MIN_NODES:
        return first, both.height
    return float(steady["ratio"].median()), steady.height  # type: ignore[arg-type]


def compare(base: Samples, new: Samples, threshold_pct: float = 5.0, alpha: float = 0.01,
            by: str = "all", normalize: bool = True) -> Comparison:
    """Compare per-step samples; one row per metric with medians, change and verdict.

    Verdicts: regression, improvement, unchanged, new (absent from base), vanished
    (absent from new), below-floor (too small a share of the step to call).
    """
    warnings: list[str] = []
    factor, factor_nodes = machine_factor(base, new) if normalize else (1.0, 0)
    if normalize and factor_nodes < FACTOR_MIN_NODES:
        warnings.append(f"only {factor_nodes} nodes with >= {FACTOR_MIN_US:.0f}us in both "
                        "runs: no machine-wide normalization")
    kinds = {"all": ["step", "op", "scope"], "step": ["step"], "op": ["op"],
             "scope": ["scope"]}[by]
    b = base.samples.filter(pl.col("kind").is_in(kinds))
    n = new.samples.filter(pl.col("kind").is_in(kinds)).with_columns(
        norm_us=pl.col("value_us") / factor)
    metric = pl.concat_str("kind", "name", separator="\x1f")
    long = pl.concat([
        b.select(metric=metric, side=pl.lit("base"), value=pl.col("value_us")),
        n.select(metric=metric, side=pl.lit("new"), value=pl.col("norm_us")),
    ])
    tests = mann_whitney(long)
    summary = (
        b.group_by("kind", "name").agg(
            base_median_us=pl.col("value_us").median(),
            base_p90_us=pl.col("value_us").quantile(0.9, "nearest"),
            base_present=(pl.col("value_us") > 0).any())
        .join(n.group_by("kind", "name").agg(
            new_median_us=pl.col("value_us").median(),
            new_p90_us=pl.col("value_us").quantile(0.9, "nearest"),
            norm_median_us=pl.col("norm_us").median(),
            new_present=(pl.col("value_us") > 0).any()),
            on=["kind", "name"], how="full", coalesce=True)
        .with_columns(metric=metric)
        .join(tests, on="metric", how="left")
    )
    step_median = float(b.filter(pl.col("kind") == "step")["value_us"].median() or 0.0)  # type: ignore[arg-type]
    enough = min(base.n_samples, new.n_samples) >= MIN_STEPS
    method = "Mann-Whitney U (one-sided, Holm-corrected)" if enough else "threshold only"
    if not enough:
        warnings.append(f"fewer than {MIN_STEPS} steps on a side ({base.n_samples} base, "
                        f"{new.n_samples} new): no significance test, the threshold alone "
                        "decides")
    rows = summary.with_columns(
        change_pct=_pct(pl.col("new_median_us"), pl.col("base_median_us")),
        norm_change_pct=_pct(pl.col("norm_median_us"), pl.col("base_median_us")),
        p_greater_adj=holm(pl.col("p_greater").fill_null(1.0)),
        p_less_adj=holm(pl.col("p_less").fill_null(1.0)),
        delta_us=pl.col("norm_median_us").fill_null(0) - pl.col("base_median_us").fill_null(0),
    )
    big = pl.max_horizontal(pl.col("base_median_us").fill_null(0),
                            pl.col("norm_median_us").fill_null(0)) >= NOISE_FLOOR * step_median
    significant_up = (pl.col("p_greater_adj") < alpha) if enough else pl.lit(True)
    significant_down = (pl.col("p_less_adj") < alpha) if enough else pl.lit(True)
    verdict = (
        pl.when(~pl.col("base_present").fill_null(False)).then(pl.lit("new"))
        .when(~pl.col("new_present").fill_null(False)).then(pl.lit("vanished"))
        .when(~big & (pl.col("kind") != "step")).then(pl.lit("below-floor"))
        .when(significant_up & (pl.col("norm_change_pct") >= threshold_pct))
        .then(pl.lit("regression"))
        .when(significant_down & (pl.col("norm_change_pct") <= -threshold_pct))
        .then(pl.lit("improvement"))
        .otherwise(pl.lit("unchanged"))
    )
    order = {"regression": 0, "improvement": 1, "new": 2, "vanished": 3, "unchanged": 4,
             "below-floor": 5}
    kind_order = {"step": 0, "scope": 1, "op": 2}
    rows = _mark_explained(rows.with_columns(verdict=verdict))
    rows = (
        rows.with_columns(v_rank=pl.col("verdict").replace_strict(order, return_dtype=pl.Int32),
                          k_rank=pl.col("kind").replace_strict(kind_order,
                                                               return_dtype=pl.Int32),
                          size=pl.col("delta_us").abs())
        .sort(["v_rank", "k_rank", "explained", "size", "name"],
              descending=[False, False, False, True, False])
        .drop("v_rank", "k_rank", "size", "metric")
    )
    return Comparison(rows, factor, factor_nodes, method, threshold_pct, alpha, warnings,
                      base.source, new.source)


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


def _pct(new: pl.Expr, base: pl.Expr) -> pl.Expr:
    return pl.when(base > 0).then((new - base) / base * 100.0).otherwise(None)
