"""`analyze summary` made of pieces: small per-host frames (steps with their flags, per
(worker, device) counts, node names and per-step device numbers, collective executions,
loops, work outside the steps, op types, attribution) that each host's task computes
where it reads the host (analyzer/engines), so that the driver holds no host's events,
only what the summary's statistics need (docs/fleet.md).

Each piece is per worker (a step's flags are decided per worker: analysis.warmup), so a
run's pieces are its hosts' pieces put together; what spans workers (a TF collective's
wait for the last worker) is computed here from every host's rows. There is one summary:
analysis.runsummary.summary is `summary_of([pieces(run)])` (tests/test_engines.py checks a
fleet's against the merged run's on the same path, byte for byte).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial
from typing import Any

import polars as pl

from ..model import Run
from . import collectives, outside
from .attribution import attribution_note, attribution_shares
from .devicesteps import device_steps
from .loops import loops
from .steps import step_times
from .stepselect import StepChoice, choose, left_out_rows, step_flags

Pieces = dict[str, pl.DataFrame]
DEVICE = ["worker", "device"]
_LOOPS = {"scope": pl.String, "trips": pl.Int64, "while_loops": pl.UInt32}


def pieces(run: Run) -> Pieces:
    """What the summary needs of `run` (one host, or any workers)."""
    flags = step_flags(run).select("worker", "step", "step_us", "left_out", "why")
    nodes = run.nodes_lazy().select(pl.col("worker", "device").cast(pl.String), "node_name",
                                    "op_type", "step")
    per_step = device_steps(run).select(
        pl.col("worker", "device").cast(pl.String), "step", "work", "device_step_ns",
        "busy_ns", "idle_share", "modules")
    return {
        "steps": step_times(run).join(flags, on=["worker", "step"], how="left"),
        "devices": nodes.group_by(DEVICE).agg(node_stats=pl.len(),
                                              names=pl.col("node_name").unique()).collect(),
        "device_steps": per_step,
        "collectives": collectives.own_executions(run),
        "loops": pl.DataFrame(loops(run), schema=_LOOPS),
        "outside": outside.by_step(run),
        "distinct": nodes.select(pl.struct("worker", "node_name").n_unique()
                                 .alias("distinct")).collect(),
        "op_types": nodes.select(pl.col("op_type").unique()).collect(),
        "workers": run.keys.select(pl.col("worker").unique()),
        "traced": nodes.select("worker", "step").unique().collect(),
        "attribution": run.attribution,
    }


def piece(hosts: Iterable[Pieces], name: str) -> pl.DataFrame:
    """The hosts' pieces named `name` as one frame (those that have it)."""
    return pl.concat([h[name] for h in hosts if name in h], how="vertical_relaxed")


def compact(hosts: list[Pieces]) -> Pieces:
    """Several hosts' pieces as one that gives the same summary, each device's node names
    kept once: what the driver holds while hosts come in is their union (the same few
    names on every host of one job), not every host's copy."""
    cat = partial(piece, hosts)
    names = pl.col("names").list.explode(keep_nulls=True, empty_as_null=False)
    return {
        "steps": cat("steps"),
        "devices": cat("devices").group_by(DEVICE).agg(
            node_stats=pl.col("node_stats").sum(), names=names.unique()),
        "device_steps": cat("device_steps"),
        "collectives": cat("collectives"),
        "loops": cat("loops").unique(),
        "outside": cat("outside"),
        "distinct": cat("distinct").select(pl.col("distinct").sum()),
        "op_types": cat("op_types").unique(),
        "workers": cat("workers").unique(),
        "traced": cat("traced").unique(),
        "attribution": cat("attribution"),
    }


def _stats(v: pl.Series) -> dict:
    def num(x: Any) -> float:
        return round(float(x or 0.0), 1)

    return {"count": len(v), "mean": num(v.mean()), "median": num(v.median()),
            "p90": num(v.quantile(0.9, "nearest")), "min": num(v.min()),
            "max": num(v.max()), "stdev": num(v.std())}


def device_table(devices: pl.DataFrame, per_step: pl.DataFrame, coll: pl.DataFrame,
                 analysed: pl.DataFrame) -> pl.DataFrame:
    """One row per (worker, device): node_stats, nodes, and medians over the `analysed`
    (worker, step) in which the device worked: device_step_us (span of its work in the
    step), busy_us (union of its op intervals), idle_share (of its own span),
    collective_us, collective_wait_us (`coll`: collectives.per_device_step_of), modules
    (TPU: program runs per step; null elsewhere); steps_with_work of the analysed steps
    (0: "no work in this step": the numbers are null, not an idle share)."""
    counts = devices.group_by(DEVICE).agg(
        node_stats=pl.col("node_stats").sum(),
        nodes=pl.col("names").list.explode(keep_nulls=True, empty_as_null=False).n_unique())
    # a device with no collective in a step spent 0 in them (per_device_step lists the
    # (worker, device, step) that ran one)
    steps = (per_step.join(analysed, on=["worker", "step"])
             .join(coll, on=[*DEVICE, "step"], how="left")
             .with_columns(pl.col("collective_us", "collective_wait_us").fill_null(0.0)))
    worked = pl.col("work")
    medians = steps.group_by(DEVICE).agg(
        steps=pl.len(), steps_with_work=worked.sum(),
        device_step_us=(pl.col("device_step_ns").filter(worked) / 1000).median().round(1),
        busy_us=(pl.col("busy_ns").filter(worked) / 1000).median().round(1),
        idle_share=pl.col("idle_share").filter(worked).median().round(4),
        collective_us=pl.col("collective_us").filter(worked).median().round(1),
        collective_wait_us=pl.col("collective_wait_us").filter(worked).median().round(1),
        modules=pl.col("modules").filter(worked).median())
    return (medians.join(counts, on=DEVICE, how="left")
            .with_columns(pl.col("steps", "steps_with_work", "node_stats", "nodes")
                          .fill_null(0))
            .select(*DEVICE, "node_stats", "nodes", "device_step_us", "busy_us", "idle_share",
                    "collective_us", "collective_wait_us", "steps_with_work", "steps",
                    "modules")
            .sort(DEVICE))


def _extra(cat: Any, analysed: pl.DataFrame) -> dict[str, Any]:
    """The summary's parts past the step times: collectives, loops, outside work,
    attribution (each only where the run has it)."""
    extra: dict[str, Any] = {}
    rows = collectives.arrived(cat("collectives")).join(
        analysed, on=["worker", "step"], how="semi")
    traced = cat("traced").join(analysed, on=["worker", "step"], how="semi")
    if comm := collectives.summary_of(rows, traced.get_column("step").n_unique()):
        extra["collectives"] = comm  # medians per step over the analysed steps
    found = cat("loops")
    if found.height:  # XLA while loops: the user's scope and the trip count
        extra["loops"] = (found.group_by("scope").agg(pl.col("trips", "while_loops").max())
                          .sort("scope").to_dicts())
    away = cat("outside").join(analysed, on=["worker", "step"], how="semi")
    if note := outside.note_of(away):
        extra["outside_steps"] = note  # its own row, in no step (analysis.outside)
    attribution = cat("attribution")
    if attribution.height:
        extra["attribution"] = attribution_shares(attribution)
        extra["attribution_note"] = attribution_note(attribution)
    return extra


def summary_of(hosts: Iterable[Pieces], choice: StepChoice | None, *, paths: list[str],
               warnings: list[str], lacks: Mapping[str, str]) -> dict:
    """What `analyze summary` prints of the run whose hosts gave `hosts` (in the run's
    order of parts): shape of the run and step-time statistics over the steps `choice`
    keeps (default: warm-up and outlier steps left out), the steps left out and why,
    every step's time, and what the input lacks (`paths`, `warnings`, `lacks` as loading
    gives them)."""
    choice = choice or StepChoice()
    cat = partial(piece, list(hosts))

    steps = cat("steps").sort("worker", "step")
    flags = choose(steps.select("worker", "step", "step_us", "left_out", "why"), choice)
    times = steps.drop("step_us", "left_out", "why").join(
        flags.select("worker", "step", "analysed", "why"), on=["worker", "step"], how="left")
    analysed = times.filter(pl.col("analysed"))
    dev = analysed.get_column("device_ns").drop_nulls() / 1000.0
    kinds = analysed.get_column("kind").unique().to_list()
    extra: dict[str, Any] = {"step_time_kind": kinds[0] if len(kinds) == 1 else "mixed"}
    if len(dev):  # accelerator profiles: the device side of each step, named apart
        extra["device_step_time_us"] = _stats(dev)
    pairs = analysed.select("worker", "step")
    extra |= _extra(cat, pairs)
    devices = cat("devices")
    coll = collectives.per_device_step_of(collectives.arrived(cat("collectives")))
    return {
        "paths": paths,
        "workers": cat("workers").get_column("worker").unique().sort().to_list(),
        "steps": cat("traced").get_column("step").unique().sort().to_list(),
        "node_stats": int(devices.get_column("node_stats").sum()),
        "distinct_nodes": int(cat("distinct").get_column("distinct").sum()),
        "op_types": cat("op_types").get_column("op_type").n_unique(),
        "devices": device_table(devices, cat("device_steps"), coll, pairs).to_dicts(),
        "step_time_us": _stats(analysed.get_column("duration_ns") / 1000.0),
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
