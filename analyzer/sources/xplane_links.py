"""Which host work launched each device event, and on which device an XLA CPU thunk ran
(docs/xplane.md "Steps" and "Devices").

xprof's EventForest (openxla/xla xla/tsl/profiler/utils/group_events.cc) links a step
marker down to the kernels it launched: events nested in it on its thread, producer ->
consumer contexts (`_p`/`_pt` -> `_c`/`_ct`), an XLA run's `run_id` and a kernel launch's
`correlation_id` (host launch -> device kernel). A raw TF2/JAX capture carries no
`group_id`; runlens takes the part of that rule that decides a step: the event that
launched the work. An XLA thunk's run (`run_id`) starts with its `Execute` on the host,
inside the step's marker; a GPU event's `correlation_id` names its launch on the host.
The step of a device event is then the step of its launch, not of its own start (async
dispatch runs a step's work while the next step's marker is open). Where no host event
launched an event (a single-device jit on XLA CPU records no `Execute` producer), its
step is the marker open when it started (a time window: the last resort, said by
`how` = "window"). Column operations: the first start of each run or correlation id,
looked up by a sorted search.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .xplane_wire import ABSENT, OTHER

HOST_STATS = ("device_ordinal", "run_id", "correlation_id", "_p")


def launches_on(plane: Any) -> bool:
    """Whether a host plane's events may launch device work (it has their stats)."""
    return "run_id" in plane.stat_ids or "correlation_id" in plane.stat_ids


def int_stat(plane: Any, line: Any, name: str, index: np.ndarray) -> np.ndarray:
    """An integer stat of the events at `index`, ABSENT where they have none."""
    stat = plane.stat_ids.get(name)
    if stat is None:
        return np.full(len(index), ABSENT, np.int64)
    v = line.stats[stat][index]
    return np.where(v == OTHER, ABSENT, v)


def collect(plane: Any, line: Any, extra: Any) -> None:
    """The launches of a batch of host lines' events, with their starts. An XLA run is
    launched by the host event that produces it (its `_p` is the run's `run_id`: PjRt's
    `Execute`, EventForest's producer); the thunks of the run carry its run_id too, but
    they are its work, not its launch. A kernel launch carries the kernel's
    `correlation_id`."""
    everything = np.arange(len(line.mid))
    runs = int_stat(plane, line, "run_id", everything)
    produced = (runs != ABSENT) & (int_stat(plane, line, "_p", everything) == runs)
    corr = int_stat(plane, line, "correlation_id", everything)
    for ids, has, into in ((runs, produced, extra.runs),
                           (corr, corr != ABSENT, extra.launches)):
        if has.any():
            into.append((ids[has], line.start_ps[has]))


def replica_lanes(plane: Any, line: Any, index: np.ndarray, ops: Any, host_lane: int
                  ) -> np.ndarray:
    """The lane of each host op: `/device:CPU:N` for an XLA CPU thunk of replica N
    (`device_ordinal`, N > 0), the host lane for everything else (replica 0 runs there)."""
    ordinal = int_stat(plane, line, "device_ordinal", index)
    lanes = np.full(len(index), host_lane, np.int64)
    for n in np.unique(ordinal[ordinal > 0]).tolist():
        lanes[ordinal == n] = ops.lane_id(f"/device:CPU:{n}")
    return lanes


def _first_start(pairs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """(sorted ids, the earliest start of each)."""
    if not pairs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    ids = np.concatenate([p[0] for p in pairs]).astype(np.int64, copy=False)
    start = np.concatenate([p[1] for p in pairs]).astype(np.int64, copy=False)
    uniq, inverse = np.unique(ids, return_inverse=True)
    first = np.full(len(uniq), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first, inverse.ravel(), start)
    return uniq, first


def _lookup(keys: np.ndarray, ids: np.ndarray, first: np.ndarray) -> np.ndarray:
    if not len(ids):
        return np.full(len(keys), -1, np.int64)
    pos = np.clip(np.searchsorted(ids, keys), 0, len(ids) - 1)
    return np.where((keys != ABSENT) & (ids[pos] == keys), first[pos], -1)


def launch_times(run: np.ndarray, corr: np.ndarray, on_device: np.ndarray, extra: Any
                 ) -> np.ndarray:
    """The start (ps) of the host work that launched each event: the first host event of
    its XLA run, else (a device event) its correlation id's host launch; -1 unknown."""
    by_run = _lookup(run, *_first_start(extra.runs))
    by_corr = np.where(on_device, _lookup(corr, *_first_start(extra.launches)), -1)
    return np.where(by_run >= 0, by_run, by_corr)
