"""Each device's own part of each step (the `device_steps` frame, schema.DEVICE_STEP_SCHEMA;
docs/xplane.md "Devices").

A job's devices do not run one step together: on the public BERT profile two of eight GPUs
compute, 650 ms apart, and a third only copies outside any step. Per (device, step): the
span of the device's work in the step (first to last event), its busy time (the union of
its events' intervals: streams and nested ops counted once), its events and how they were
placed in the step (the wait of its collectives for peers is the collectives category's,
from the `peer-wait` rows xplane_collectives makes of `Rendezvous` events): "group" (the
profiler's `group_id`), "launch" (the host work that launched them: xplane_links),
"window" (the step marker open when they started). On a profile the plugin grouped, events
of no group are outside every step: a row with a null step. A device plane without events
(six of the BERT profile's eight GPUs) is a row with a null step and no events: the device
is shown, with no work in any step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl

from .. import schema
from .xplane_collectives import WAIT_TYPE


def device_of(lane: str) -> str:
    """The device of a lane, as analyzer/model.py derives it (lowercase, no stream)."""
    return lane.lower().split("/stream:")[0].split("/memcpy")[0]


_HOW = np.array(["window", "launch", "group"], dtype=object)


def device_steps(lanes: list[str], lane: np.ndarray, step: np.ndarray, start: np.ndarray,
                 dur: np.ndarray, in_step: np.ndarray, how: np.ndarray) -> pl.DataFrame:
    """One row per (device, step) with work, sorted by both (null steps last); `in_step`
    False: the event is in no step (null step); `how` per event: 0 window, 1 launch, 2
    group. In numpy on the events sorted once (polars' sort and windows took 4x longer)."""
    n = len(lane)
    if not n:
        return pl.DataFrame(schema=schema.DEVICE_STEP_SCHEMA)
    devices = sorted({device_of(x) for x in lanes})
    rank = {d: i for i, d in enumerate(devices)}
    null = ~in_step.astype(bool)
    dev = np.array([rank[device_of(x)] for x in lanes], np.int64)[lane]
    step = np.where(null, 0, step.astype(np.int64))
    order = np.lexsort((start, step, null, dev))
    dev, null, step = dev[order], null[order], step[order]
    start = start.astype(np.int64)[order]
    end = start + dur.astype(np.int64)[order]
    first = np.ones(n, bool)  # a (device, step)'s first event
    first[1:] = (dev[1:] != dev[:-1]) | (null[1:] != null[:-1]) | (step[1:] != step[:-1])
    reach = _reach(first, start, end)
    block = first.copy()  # a run of overlapping events (busy without double counting)
    block[1:] |= start[1:] > reach[:-1]
    firsts, blocks = np.flatnonzero(first), np.flatnonzero(block)
    per_block = reach[np.append(blocks[1:], n) - 1] - start[blocks]
    return pl.DataFrame({
        "device": pl.Series([devices[i] for i in dev[firsts].tolist()], dtype=pl.String),
        "step": pl.Series(step[firsts]).set(pl.Series(null[firsts]), None),
        "start_ns": start[firsts] // 1000,
        "end_ns": np.maximum.reduceat(end, firsts) // 1000,
        "busy_ns": np.add.reduceat(per_block, np.searchsorted(blocks, firsts)) // 1000,
        "events": np.diff(np.append(firsts, n)),
        "how": _HOW[np.maximum.reduceat(how.astype(np.int64)[order], firsts)].tolist(),
        "modules": pl.Series([None] * len(firsts), dtype=pl.Int64),
    }).cast(schema.DEVICE_STEP_SCHEMA)  # type: ignore[arg-type]


def _reach(first: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The latest end so far within each group (groups start where `first`; events by
    start): one cumulative max over all, each group shifted above the ones before."""
    group = np.cumsum(first) - 1
    low = start[first][group]
    span = int((end - low).max()) + 1
    if int(group[-1] + 1) * span < 2**62:
        shift = group * span
        return np.maximum.accumulate(end - low + shift) - shift + low
    bounds = np.append(np.flatnonzero(first), len(first))
    return np.concatenate([np.maximum.accumulate(end[a:b])
                           for a, b in zip(bounds[:-1], bounds[1:], strict=True)])


def of_events(ops: Any, extra: Any, lane: np.ndarray, step: np.ndarray,
              start: np.ndarray, dur: np.ndarray, group: np.ndarray,
              on_device: np.ndarray, launched: np.ndarray,
              step_at: Callable[[np.ndarray], np.ndarray]) -> pl.DataFrame:
    """The device_steps frame of a file's events: on a profile whose device events
    carry group_ids, the events of the groups that ran device work; else every event, in
    the step of its launch or of its start. Counted once: an event, not the rows made of
    it (a shared collective's later shares, the peer-wait rows of its Rendezvous)."""
    names = np.array([t != WAIT_TYPE for _, t in ops.names] or [True], bool)
    own = (np.concatenate(ops.piece) == 0) & names[np.concatenate(ops.name)] if ops.name \
        else np.zeros(0, bool)
    lane, step, start, dur, group, on_device, launched = (
        a[own] for a in (lane, step, start, dur, group, on_device, launched))
    device_groups = np.unique(group[on_device & (group >= 0)])
    grouped = bool(len(device_groups))
    in_step = np.isin(group, device_groups) if grouped else np.ones(len(step), bool)
    how = np.full(len(step), 2) if grouped else (launched >= 0).astype(np.int64)
    found = _with_modules(device_steps(ops.lanes, lane, step, start, dur, in_step, how),
                          extra.modules, step_at)
    idle = pl.DataFrame({"device": [device_of(d) for d in extra.idle_devices]},
                        schema={"device": pl.String})
    return pl.concat([found, idle.with_columns(events=pl.lit(0, pl.Int64),
                                               busy_ns=pl.lit(0, pl.Int64))],
                     how="diagonal").select(list(schema.DEVICE_STEP_SCHEMA))


def _with_modules(found: pl.DataFrame, modules: list[tuple[str, np.ndarray]],
                  step_at: Callable[[np.ndarray], np.ndarray]) -> pl.DataFrame:
    """`found` with the program runs of each TPU (device, step): its "XLA Modules"
    events, each in the step `step_at` its start."""
    if not modules:
        return found
    runs = pl.concat([pl.DataFrame({"device": device_of(d), "step": step_at(t)},
                                   schema={"device": pl.String, "step": pl.Int64})
                      for d, t in modules])
    counts = runs.group_by("device", "step").agg(runs=pl.len().cast(pl.Int64))
    return (found.join(counts, on=["device", "step"], how="left")
            .with_columns(modules=pl.col("runs")).drop("runs")
            .sort("device", "step", nulls_last=True))
