"""Protos -> polars frames. With the sources, the only package that walks protobuf messages.

Step files become `StepFrames` (polars frames), so that the rest of the engine works on
columns. Each NodeExecStats is read once, keeping micros (what tfprof computes with) and
nanos (what the timeline draws with). Two readers give the same frames:

- the C decoder (analyzer/_stepstats.c): reads the StepStats wire format straight into
  columns, ~20x faster than protobuf's Python objects, without the GIL (so threads
  decode files in parallel);
- `stepwalk._walk_step_stats`: protobuf's parse and a walk over its messages; the reference, used
  for any file the C decoder does not accept and where the decoder is not built.

Partition graphs repeat in every step file; they are split off the RunMetadata bytes
without parsing and parsed once per distinct content, while the step file that carries
them is read: a file whose partition graph is unreadable is skipped like any other bad
file, naming it. Whatever a file's bytes make the readers raise is that file's problem
(`INPUT_ERRORS`): it is skipped with one message, and the other files are read.

Its modules, by job: `wire` (splitting RunMetadata without parsing; input errors),
`stepwalk` (StepStats -> frames, both readers), `stepfiles` (step files in batches),
`graphs` (GraphDefs and op logs). The frames' columns are named in analyzer/schema.py
(re-exported here for the code that reads them as `ingest.NODE_SCHEMA`).
"""

from ..schema import (
    ALLOCATION_SCHEMA,
    CODE_SCHEMA,
    GRAPH_NODE_SCHEMA,
    KEY_SCHEMA,
    MEMORY_SCHEMA,
    NODE_SCHEMA,
    OP_LOG_SCHEMA,
    OUTPUT_KEY_SCHEMA,
    OUTPUT_SCHEMA,
    THREAD_SCHEMA,
    Schema,
)
from .graphs import (
    DTYPE_NAMES,
    empty_op_log,
    ingest_graph_defs,
    ingest_graph_file,
    ingest_op_log_file,
    op_log_frames,
)
from .stepfiles import (
    PartitionGraphs,
    StepBatch,
    StepItem,
    concat_step_frames,
    ingest_step_files,
    native_decoder_available,
)
from .stepwalk import StepFrames, decoded_frames, walk_step_bytes
from .wire import (
    INPUT_ERRORS,
    MAX_MESSAGE_BYTES,
    PARSE_ERRORS,
    Buffer,
    _stepstats,
    reason,
    split_fields,
    split_run_metadata,
    varint,
)

__all__ = [
    "ALLOCATION_SCHEMA", "CODE_SCHEMA", "DTYPE_NAMES", "GRAPH_NODE_SCHEMA", "INPUT_ERRORS",
    "KEY_SCHEMA", "MAX_MESSAGE_BYTES", "MEMORY_SCHEMA", "NODE_SCHEMA", "OP_LOG_SCHEMA",
    "OUTPUT_KEY_SCHEMA", "OUTPUT_SCHEMA", "PARSE_ERRORS", "THREAD_SCHEMA", "Buffer",
    "PartitionGraphs", "Schema", "StepBatch", "StepFrames", "StepItem", "_stepstats",
    "concat_step_frames", "decoded_frames", "empty_op_log", "ingest_graph_defs",
    "ingest_graph_file", "ingest_op_log_file", "ingest_step_files", "native_decoder_available",
    "op_log_frames", "reason", "split_fields", "split_run_metadata", "varint", "walk_step_bytes",
]
