"""tfprof (tf.compat.v1.profiler.Profiler) run on a run dir: the live oracle for parity tests.

The graph is re-imported from graph.pb and the saved op log is passed in, exactly as a user
would run tfprof offline on our capture. Needs TensorFlow (dev extra).
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

_current: dict[Path, Any] = {}


def profiler(run_dir: Path) -> Any:
    """The Profiler of `run_dir`. tfprof allows one live Profiler per process (a second one
    aborts in add_step), so only the last one is kept."""
    if run_dir in _current:
        return _current[run_dir]
    _current.clear()
    gc.collect()
    _current[run_dir] = _build(run_dir)
    return _current[run_dir]


def _build(run_dir: Path) -> Any:
    import tensorflow as tf
    from tensorflow.core.profiler import tfprof_log_pb2
    from tensorflow.core.protobuf import config_pb2

    graph = tf.Graph()
    with graph.as_default():
        graph_def = tf.compat.v1.GraphDef.FromString((run_dir / "graph.pb").read_bytes())
        tf.import_graph_def(graph_def, name="")
    op_log = tfprof_log_pb2.OpLogProto.FromString((run_dir / "op_log.pb").read_bytes())
    prof = tf.compat.v1.profiler.Profiler(graph=graph, op_log=op_log)
    for path in sorted((run_dir / "steps").glob("step-*.pb")):
        step = int(path.stem.split("-")[1])
        prof.add_step(step, config_pb2.RunMetadata.FromString(path.read_bytes()))
    return prof


def options(**overrides: Any) -> dict[str, Any]:
    """tfprof options that show everything (no thresholds), step -1, no printed output."""
    import tensorflow as tf

    opts = (
        tf.compat.v1.profiler.ProfileOptionBuilder(
            tf.compat.v1.profiler.ProfileOptionBuilder.time_and_memory(min_micros=0)
        )
        .select(["micros", "bytes", "params", "float_ops", "occurrence", "peak_bytes",
                 "residual_bytes", "output_bytes", "accelerator_micros", "cpu_micros"])
        .with_empty_output()
        .build()
    )
    opts.update(
        min_bytes=0, min_peak_bytes=0, min_residual_bytes=0, min_output_bytes=0, min_micros=0,
        min_accelerator_micros=0, min_cpu_micros=0, min_params=0, min_float_ops=0,
        min_occurrence=0, step=-1, max_depth=10_000, account_displayed_op_only=False,
        order_by="name",
    )
    opts.update(overrides)
    return opts


def op_view(run_dir: Path, **overrides: Any) -> dict[str, Any]:
    """tfprof's op view as {op type: MultiGraphNodeProto child}."""
    result = profiler(run_dir).profile_operations(options(**overrides))
    return {c.name: c for c in result.children}


def scope_view(run_dir: Path, **overrides: Any) -> Any:
    """tfprof's scope view: the root GraphNodeProto."""
    return profiler(run_dir).profile_name_scope(options(**overrides))


def graph_view(run_dir: Path, **overrides: Any) -> Any:
    return profiler(run_dir).profile_graph(options(**overrides))


def code_view(run_dir: Path, **overrides: Any) -> Any:
    return profiler(run_dir).profile_python(options(**overrides))
