"""The two spans of an accelerator profile's steps (docs/xplane.md "Steps").

A step marker (`train`) spans the host's part: dispatch, input, waiting. Its device work
may start late and end after it; xprof's step db on a GPU counts the device side: from
the step's first device event to its last. Both are kept in `step_spans` (schema.py):
`start_ns`/`end_ns` the step's own span, `device_start_ns`/`device_end_ns` its device
work's, so that a reader names which one it shows (analysis.steps.step_times).
"""

from __future__ import annotations

import polars as pl

from .. import schema


def step_spans(spans: list[tuple[int, int, int]], kind: str, device_steps: pl.DataFrame
               ) -> pl.DataFrame:
    """(step, start_ns, end_ns) of `spans` (of `kind`: "marker" or "device") with each
    step's device span beside it: that of the accelerator (GPU, TPU) whose work in the step
    spans longest (`device_steps`, xplane_devsteps: each device's own span; devices are
    not pooled: two GPUs 650 ms apart are two 20 ms steps, not one of 670 ms); a step with
    device work and no span of its own gets a row with its device span only."""
    own = pl.DataFrame({"step": [x[0] for x in spans],
                        "start_ns": [x[1] // 1000 for x in spans],
                        "end_ns": [x[2] // 1000 for x in spans],
                        "kind": [kind] * len(spans)},
                       schema={"step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64,
                               "kind": pl.String})
    device = (
        device_steps.filter(pl.col("step").is_not_null()
                            & ~pl.col("device").str.starts_with("/device:cpu:"))
        .sort("step", pl.col("end_ns") - pl.col("start_ns"), "device",
              descending=[False, True, False])
        .group_by("step", maintain_order=True)
        .agg(device_start_ns=pl.col("start_ns").first(),
             device_end_ns=pl.col("end_ns").first())
    )
    return (own.join(device, on="step", how="full", coalesce=True)
            .sort("step").select(list(schema.STEP_SPAN_SCHEMA)))


def attribution(rows: list[tuple[str, str, int]]) -> pl.DataFrame:
    """Device time per (device, how it was placed), summed over the file's lines."""
    frame = pl.DataFrame(rows, orient="row", schema=list(schema.ATTRIBUTION_SCHEMA))
    return frame.group_by("device", "how", maintain_order=True).agg(
        pl.col("device_ps").sum()).cast(schema.ATTRIBUTION_SCHEMA)  # type: ignore[arg-type]
