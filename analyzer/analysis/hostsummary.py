"""`analyze summary` of many hosts from their pieces: small per-host frames (steps with
their flags, per-device counts and node names, op types, attribution) that each host's
task computes where it reads the host (analyzer/engines), so that the driver holds no
host's events, only what the summary's statistics need (docs/fleet.md).

Each piece is per worker (a step's flags are decided per worker: analysis.warmup), so a
run's pieces are its hosts' pieces put together, and `summary_of` gives what
analysis.runsummary.summary gives on the merged run, byte for byte
(tests/test_engines.py checks it on the same path).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

import polars as pl

from ..model import Run
from .attribution import attribution_note, attribution_shares
from .steps import step_times
from .stepselect import StepChoice, choose, left_out_rows, step_flags

Pieces = dict[str, pl.DataFrame]


def pieces(run: Run) -> Pieces:
    """What the summary needs of `run` (one host, or any workers)."""
    flags = step_flags(run).select("worker", "step", "step_us", "left_out", "why")
    nodes = run.nodes_lazy().select("worker", "device", "node_name", "op_type")
    return {
        "steps": step_times(run).join(flags, on=["worker", "step"], how="left"),
        "devices": nodes.group_by("device").agg(node_stats=pl.len(),
                                                names=pl.col("node_name").unique()).collect(),
        "distinct": nodes.select(pl.struct("worker", "node_name").n_unique()
                                 .alias("distinct")).collect(),
        "op_types": nodes.select(pl.col("op_type").unique()).collect(),
        "workers": run.keys.select(pl.col("worker").unique()),
        "traced": run.executions.select(pl.col("step").unique()),
        "attribution": run.attribution,
    }


def compact(hosts: list[Pieces]) -> Pieces:
    """Several hosts' pieces as one that gives the same summary, each device's node names
    kept once: what the driver holds while hosts come in is their union (the same few
    names on every host of one job), not every host's copy."""

    def cat(name: str) -> pl.DataFrame:
        return pl.concat([h[name] for h in hosts], how="vertical_relaxed")

    names = pl.col("names").list.explode(keep_nulls=True, empty_as_null=False)
    return {
        "steps": cat("steps"),
        "devices": cat("devices").group_by("device").agg(
            node_stats=pl.col("node_stats").sum(), names=names.unique()),
        "distinct": cat("distinct").select(pl.col("distinct").sum()),
        "op_types": cat("op_types").unique(),
        "workers": cat("workers").unique(),
        "traced": cat("traced").unique(),
        "attribution": cat("attribution"),
    }


class _Attribution:
    """The one frame attribution_shares and attribution_note read of a Run."""

    def __init__(self, frame: pl.DataFrame) -> None:
        self.attribution = frame


def summary_of(hosts: Iterable[Pieces], choice: StepChoice | None, *, paths: list[str],
               warnings: list[str], lacks: Mapping[str, str]) -> dict:
    """analysis.runsummary.summary of the run whose hosts gave `hosts` (in the run's
    order of parts), its `paths`, `warnings` and `lacks` as loading gives them."""
    choice = choice or StepChoice()
    given = list(hosts)

    def cat(name: str) -> pl.DataFrame:
        return pl.concat([h[name] for h in given], how="vertical_relaxed")

    steps = cat("steps").sort("worker", "step")
    flags = choose(steps.select("worker", "step", "step_us", "left_out", "why"), choice)
    times = steps.drop("step_us", "left_out", "why").join(
        flags.select("worker", "step", "analysed", "why"), on=["worker", "step"], how="left")
    analysed = times.filter(pl.col("analysed"))
    d = analysed.get_column("duration_ns") / 1000.0
    dev = analysed.get_column("device_ns").drop_nulls() / 1000.0

    def num(x: Any) -> float:
        return round(float(x or 0.0), 1)

    def stats(v: pl.Series) -> dict:
        return {"count": len(v), "mean": num(v.mean()), "median": num(v.median()),
                "p90": num(v.quantile(0.9, "nearest")), "min": num(v.min()),
                "max": num(v.max()), "stdev": num(v.std())}

    kinds = analysed.get_column("kind").unique().to_list()
    extra: dict[str, Any] = {"step_time_kind": kinds[0] if len(kinds) == 1 else "mixed"}
    if len(dev):
        extra["device_step_time_us"] = stats(dev)
    attributed = cast(Run, _Attribution(cat("attribution")))
    if attributed.attribution.height:
        extra["attribution"] = attribution_shares(attributed)
        extra["attribution_note"] = attribution_note(attributed)
    devices = cat("devices")
    per_device = (
        devices.group_by("device")
        .agg(node_stats=pl.col("node_stats").sum(),
             nodes=pl.col("names").list.explode(keep_nulls=True, empty_as_null=False)
             .n_unique())
        .sort("device")
    )
    return {
        "paths": paths,
        "workers": cat("workers").get_column("worker").unique().sort().to_list(),
        "steps": cat("traced").get_column("step").unique().sort().to_list(),
        "node_stats": int(devices.get_column("node_stats").sum()),
        "distinct_nodes": int(cat("distinct").get_column("distinct").sum()),
        "op_types": cat("op_types").get_column("op_type").n_unique(),
        "devices": per_device.to_dicts(),
        "step_time_us": stats(d),
        **extra,
        "left_out": left_out_rows(flags),
        "per_step": times.select(
            "worker", "step", (pl.col("duration_ns") / 1000).round(1).alias("duration_us"),
            (pl.col("device_ns") / 1000).round(1).alias("device_us"), "node_stats",
            "analysed",
        ).to_dicts(),
        "warnings": warnings,
        "lacks": dict(lacks),
    }
