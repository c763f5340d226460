"""The views of some devices or workers only (`--device`, `--worker`): a Run cut to the
executions of the (worker, device) pairs that match, and the pairs a view covers.

A view's numbers are per graph node with tfprof's rules: a node belongs to the first
device it ran on, so the replicas of one XLA program (`jax.pmap` over 4 devices: the same
op on 4 lanes) show device 0's executions unless a view is cut to another device. The
pairs a view covers are said in its JSON rows (`worker`, `device`: the one, or "summed
over N ..."), so that no total is read as one device's or one worker's.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable

import polars as pl

from .. import products
from ..errors import RunlensError
from ..model import Run

# Frames with a device column: kept for the chosen devices only.
_BY_DEVICE = ("device_steps", "device_facts", "attribution")


def _matches(col: str, regexes: tuple[str, ...]) -> pl.Expr:
    if not regexes:
        return pl.lit(True)
    return pl.any_horizontal([pl.col(col).str.contains(f"^(?:{rx})$") for rx in regexes])


def only(run: Run, devices: tuple[str, ...] = (), workers: tuple[str, ...] = ()) -> Run:
    """`run` with the executions of the devices and workers matching `devices`/`workers`
    (full-match regexes; empty: all), memoised on `run`; the run itself when nothing is
    chosen. RunlensError when no execution matches."""
    if not devices and not workers:
        return run
    return products.memoised(run, ("devices", devices, workers),
                             lambda: _cut(run, devices, workers))


def _cut(run: Run, devices: tuple[str, ...], workers: tuple[str, ...]) -> Run:
    keys = run.keys.with_row_index("key_id").filter(
        _matches("device", devices) & _matches("worker", workers))
    if not keys.height:
        raise RunlensError(
            f"{', '.join(map(str, run.paths)) or 'run'}: no device matches "
            + " ".join([*(f"--device {d}" for d in devices), *(f"--worker {w}" for w in workers)])
            + f" (devices: {', '.join(run.devices)}; workers: {', '.join(run.workers)})")
    ids = keys.get_column("key_id").cast(pl.UInt32)
    chosen_workers = keys.get_column("worker").unique()
    chosen_devices = keys.get_column("device").unique()
    token = "devices:" + hashlib.blake2b(json.dumps([list(devices), list(workers)]).encode(),
                                         digest_size=16).hexdigest()

    def executions() -> pl.DataFrame:
        return run.executions.filter(pl.col("key_id").is_in(ids.implode()))

    def by_worker(name: str) -> pl.DataFrame:
        frame = getattr(run, name)
        if "worker" in frame.columns:
            frame = frame.filter(pl.col("worker").is_in(chosen_workers.implode()))
        if name in _BY_DEVICE and "device" in frame.columns:
            frame = frame.filter(
                pl.col("device").str.to_lowercase().is_in(chosen_devices.implode()))
        return frame

    frames: dict[str, Callable[[], pl.DataFrame]] = {
        name: functools.partial(by_worker, name) for name in run.FRAMES
        if name not in ("executions", "keys", "output_rows", "output_keys")}
    frames["executions"] = executions
    origin = run.origin.narrow(token) if run.origin is not None else None
    return run.with_frames(frames, origin=origin, whole=run.whole)


def covered(run: Run) -> dict[str, list[str]]:
    """The workers and devices whose executions `run` holds (sorted). A product: a warm
    view reads it from the cache, not the executions."""
    return covered_of(COVERED(run))


def covered_of(pairs: pl.DataFrame) -> dict[str, list[str]]:
    """`covered`'s lists of (worker, device) pairs (of one run, or many hosts' put
    together)."""
    return {"workers": sorted(pairs.get_column("worker").unique().to_list()),
            "devices": sorted(pairs.get_column("device").unique().to_list())}


def _covered(run: Run) -> pl.DataFrame:
    ids = run.executions.get_column("key_id").unique()
    present = pl.col("key_id").is_in(ids.cast(pl.UInt32).implode())
    return (run.keys.with_row_index("key_id").filter(present)
            .select(pl.col("worker").cast(pl.String), pl.col("device").cast(pl.String))
            .unique().sort("worker", "device"))


COVERED = products.register("covered", _covered)

