"""How much of an accelerator profile's device time is tied to the user's ops, and how:
the figure every view and `summary` print (docs/xplane.md "Device events of XLA
programs"), from the run's `attribution` frame (the source's count of every device
event's time by how it was placed: analyzer/sources/xla_attribution.py).
"""

from __future__ import annotations

import polars as pl

# The source's words for how an event was placed, and what the note says of each.
_SAID = {"op stat": "by the events' own op stat", "kernel name": "by kernel name",
         "schedule": "by the module's schedule"}


def attribution_shares(frame: pl.DataFrame) -> dict[str, float]:
    """Share of device time (0..1) per way of placing it ("op stat", "kernel name",
    "schedule", "unattributed") in a run's `attribution` frame (of one host or many), over
    all workers and devices; empty when the run has no accelerator profile."""
    if not frame.height:
        return {}
    per = frame.group_by("how").agg(pl.col("device_ps").sum()).sort("how")  # stable order
    total = int(per["device_ps"].sum())
    if total <= 0:
        return {}
    return {how: ps / total for how, ps in per.iter_rows()}


def attribution_note(frame: pl.DataFrame) -> str | None:
    """One line of an `attribution` frame: the device time attributed to ops, by which
    way, and the unattributed share (`unattributed:<kernel>` rows); None without
    accelerator profile."""
    shares = attribution_shares(frame)
    if not shares:
        return None
    placed = 1.0 - shares.get("unattributed", 0.0)
    ways = ", ".join(f"{shares[k] * 100:.1f}% {said}" for k, said in _SAID.items()
                     if shares.get(k, 0.0) > 0)
    return (f"device time attributed to ops: {placed * 100:.1f}% ({ways}); unattributed "
            f"{shares.get('unattributed', 0.0) * 100:.1f}% (rows unattributed:<kernel>)")
