"""Every frame's columns and types, named once.

The ingest walk, the C decoder's output (checked against this by
tests/test_schema.py: `_stepstats.COLUMNS`), the sources, the Run and the cache all take
their column lists from here, so that adding a column is one edit plus the code that
fills it.

Executions and outputs are kept as numbers plus the number of their key: the strings of
an execution (its lane, node name and timeline label) repeat every step, so they are kept
once per distinct key (KEY_SCHEMA); model.py derives device, op type etc. per key.
"""

from __future__ import annotations

from typing import Any

import polars as pl

Schema = dict[str, Any]  # column name -> polars dtype

KEY_SCHEMA: Schema = {"lane": pl.String, "node_name": pl.String, "timeline_label": pl.String}
NODE_SCHEMA: Schema = {
    "step": pl.Int64,
    "exec_idx": pl.UInt32,
    "key_id": pl.UInt32,
    "all_start_us": pl.Int64,
    "op_start_rel_us": pl.Int64,
    "op_end_rel_us": pl.Int64,
    "all_end_rel_us": pl.Int64,
    "scheduled_us": pl.Int64,
    "start_ns": pl.Int64,
    "op_start_rel_ns": pl.Int64,
    "op_end_rel_ns": pl.Int64,
    "all_end_rel_ns": pl.Int64,
    "scheduled_ns": pl.Int64,
    "thread_id": pl.UInt32,
    "mem_total_bytes": pl.Int64,
    "mem_peak_bytes": pl.Int64,
    "mem_live_bytes": pl.Int64,
    "allocator_bytes_in_use": pl.Int64,
    "temp_bytes": pl.Int64,
    "persistent_bytes": pl.Int64,
    "output_bytes": pl.Int64,
}
# Outputs likewise: numbers, and the number of their (dtype, shape, allocator) key.
OUTPUT_KEY_SCHEMA: Schema = {"dtype": pl.String, "shape": pl.List(pl.Int64),
                             "allocator_name": pl.String}
OUTPUT_SCHEMA: Schema = {
    "step": pl.Int64,
    "exec_idx": pl.UInt32,
    "slot": pl.Int32,
    "out_key": pl.UInt32,
    "requested_bytes": pl.Int64,
    "allocated_bytes": pl.Int64,
    "allocation_id": pl.Int64,
    "ptr": pl.UInt64,
}
MEMORY_SCHEMA: Schema = {
    "step": pl.Int64,
    "exec_idx": pl.UInt32,
    "allocator_name": pl.String,
    "total_bytes": pl.Int64,
    "peak_bytes": pl.Int64,
    "live_bytes": pl.Int64,
    "allocator_bytes_in_use": pl.Int64,
}
ALLOCATION_SCHEMA: Schema = {
    "step": pl.Int64,
    "exec_idx": pl.UInt32,
    "allocator_name": pl.String,
    "alloc_us": pl.Int64,
    "alloc_bytes": pl.Int64,
}
THREAD_SCHEMA: Schema = {
    "step": pl.Int64, "lane": pl.String, "thread_id": pl.UInt32, "name": pl.String,
}
GRAPH_NODE_SCHEMA: Schema = {
    "name": pl.String,
    "op": pl.String,
    "device": pl.String,
    "inputs": pl.List(pl.String),
    "data_format": pl.String,
    "dtype": pl.String,
    "shape": pl.List(pl.Int64),
    "output_shapes": pl.List(pl.List(pl.Int64)),
    "tensor_name": pl.String,
    "send_device": pl.String,
    "recv_device": pl.String,
    "fused_ops": pl.List(pl.String),  # a fused kernel's `fused_ops` attr (Grappler remapper)
    "source": pl.String,
    # HLO ops: the while loop the op runs in ("<program>:<while>") and its trips per run of
    # the module (sources/hlo_loops.py; 0: not known); null outside loops and for graphs
    "loop": pl.String,
    "loop_trips": pl.Int64,
}
OP_LOG_SCHEMA: Schema = {"name": pl.String, "float_ops": pl.Int64, "types": pl.List(pl.String)}
CODE_SCHEMA: Schema = {
    "name": pl.String,
    "depth": pl.Int32,
    "file": pl.String,
    "lineno": pl.Int32,
    "function": pl.String,
    "line": pl.String,
    "func_start_line": pl.Int32,
}
LACKS_SCHEMA: Schema = {"what": pl.String, "why": pl.String}
# The span of a step where the input says it (an xplane step marker, the device span of a
# step's group): analyzer.analysis.steps takes it over the span of the step's executions.
# Accelerator profiles give two spans, both kept: `start_ns`/`end_ns` the step's own (`kind`
# "marker": the host's step marker; "device": the device work of a preprocessed GPU step),
# `device_*` the span of the step's device work (xprof's device-side step time); null where
# there is none.
STEP_SPAN_SCHEMA: Schema = {"step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64,
                            "kind": pl.String, "device_start_ns": pl.Int64,
                            "device_end_ns": pl.Int64}
# Accelerator profiles: device time by how its events were tied to ops ("op stat",
# "kernel name", "schedule", "unattributed": analyzer/sources/xla_attribution.py), per device.
ATTRIBUTION_SCHEMA: Schema = {"device": pl.String, "how": pl.String, "device_ps": pl.Int64}
# The rules an input's op times follow, where they are not tfprof's (whole microseconds per
# execution, 0 counted as 1): "xprof" (XSpace: nanoseconds summed exactly). No row: tfprof.
TIMING_SCHEMA: Schema = {"rules": pl.String}
# XSpace with HLO: the work of each framework op's HLO instructions, totals over the
# profile's events attributed to them (`execs`; analyzer/sources/hlo_work.py): one
# execution's work is the total over `execs`.
HLO_WORK_SCHEMA: Schema = {"name": pl.String, "execs": pl.Int64, "out_bytes": pl.Float64,
                           "in_bytes": pl.Float64, "float_ops": pl.Float64}
# GPU planes' device facts (analyzer/sources/xplane_gpu.py): what the roofline needs.
DEVICE_SCHEMA: Schema = {"device": pl.String, "name": pl.String, "clock_khz": pl.Int64,
                         "cores": pl.Int64, "memory_bandwidth": pl.Float64,
                         "compute_cap_major": pl.Int64, "compute_cap_minor": pl.Int64}
# Each device's part of each step (analyzer/sources/xplane_devsteps.py): the span of its
# work in the step, its busy time (union of its events), events (the wait of its
# collectives for peers is the collectives category's: analysis/collectives.py), how its
# events were placed ("group": group_id,
# "launch": the host work that launched them, "window": the step marker open at their
# start), `modules` the XLA program runs that started in the step (TPU planes' "XLA
# Modules" line; null elsewhere). A null step: work outside every step (events of no group
# on a grouped profile).
# Only XSpace profiles give it; analysis.devicesteps derives it from executions otherwise.
DEVICE_STEP_SCHEMA: Schema = {"device": pl.String, "step": pl.Int64, "start_ns": pl.Int64,
                              "end_ns": pl.Int64, "busy_ns": pl.Int64, "events": pl.Int64,
                              "how": pl.String, "modules": pl.Int64}

# The frames a source gives that are kept as they are, each with a `worker` column added
# (sources.raw_frames); executions/keys and output_rows/output_keys are split by key.
PLAIN_FRAMES: dict[str, Schema] = {
    "memory": MEMORY_SCHEMA, "allocations": ALLOCATION_SCHEMA, "threads": THREAD_SCHEMA,
    "graph_nodes": GRAPH_NODE_SCHEMA, "op_log": OP_LOG_SCHEMA, "code": CODE_SCHEMA,
    "step_spans": STEP_SPAN_SCHEMA, "attribution": ATTRIBUTION_SCHEMA, "timing": TIMING_SCHEMA,
    "hlo_work": HLO_WORK_SCHEMA, "device_facts": DEVICE_SCHEMA,
    "device_steps": DEVICE_STEP_SCHEMA,
}

# A Run's frames (analyzer.model.Run).
RUN_FRAMES = ("executions", "keys", "output_rows", "output_keys", "memory", "allocations",
              "threads", "graph_nodes", "op_log", "code", "step_spans", "attribution",
              "timing", "hlo_work", "device_facts", "device_steps")
# What the cache keeps of a part: the Run's frames and what the input lacks. What is
# derived from them (per-node numbers, trees...) is kept beside, by analyzer.products.
CACHED_FRAMES = (*RUN_FRAMES, "lacks")

# The executions frame as a Run shows it (`Run.nodes`): numbers, then the key's columns
# (the raw key's, `stat_name` the lane's node name as recorded, and what model.py derives).
KEY_COLUMNS = ["worker", "lane", "stat_name", "timeline_label", "node_name", "device",
               "lane_kind", "op_type", "op_type_source", "kernel", "fused_ops"]
_NODE_NUMBERS = [c for c in NODE_SCHEMA if c != "key_id"]
NODE_COLUMNS = [
    *_NODE_NUMBERS[:2], "lane", "stat_name", "timeline_label", *_NODE_NUMBERS[2:],
    "worker", "node_name", "device", "lane_kind", "op_type", "op_type_source", "kernel",
    "fused_ops",
]
# The outputs frame as a Run shows it (`Run.outputs`).
OUTPUT_KEY_COLUMNS = ["worker", *OUTPUT_KEY_SCHEMA]
_OUTPUT_NUMBERS = [c for c in OUTPUT_SCHEMA if c != "out_key"]
OUTPUT_COLUMNS = [*_OUTPUT_NUMBERS[:3], "dtype", "shape", *_OUTPUT_NUMBERS[3:6],
                  "allocator_name", *_OUTPUT_NUMBERS[6:], "worker"]
