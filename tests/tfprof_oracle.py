"""tfprof (tf.compat.v1.profiler.Profiler) run on a run dir: the live oracle for parity tests.

The graph is re-imported from graph.pb and the saved op log is passed in, exactly as a user
would run tfprof offline on our capture. Needs TensorFlow (dev extra).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_current: dict[tuple[Path, bool], Any] = {}


def profiler(run_dir: Path, graph: bool = True) -> Any:
    """The Profiler of `run_dir`. tfprof allows one live Profiler per process (a second one
    aborts in add_step), so only the last one is kept. graph=False profiles against an
    empty graph (for run dirs without graph.pb, e.g. converted tf.timeline traces)."""
    key = (run_dir, graph)
    if key in _current:
        return _current[key]
    _current.clear()
    gc.collect()
    _current[key] = _build(run_dir, graph)
    return _current[key]


@contextlib.contextmanager
def _saved_code_traces() -> Iterator[None]:
    """tfprof's code view crashes (IndexError map::at) on a re-imported graph with a saved
    op log: merge_default_with_oplog rebuilds the string table from the new graph but keeps
    the saved traces' ids. While the Profiler is built, keep the saved table, as tfprof
    would on the original graph; restore TensorFlow's function afterwards."""
    from tensorflow.python.profiler import model_analyzer, tfprof_logger

    original = tfprof_logger.merge_default_with_oplog

    def merge(graph, op_log=None, run_meta=None, add_trace=True, add_trainable_var=True):
        merged = original(graph, op_log, run_meta, add_trace=False,
                          add_trainable_var=add_trainable_var)
        if op_log is not None:
            for key, value in op_log.id_to_string.items():
                merged.id_to_string[key] = value
        return merged

    model_analyzer.tfprof_logger.merge_default_with_oplog = merge
    try:
        yield
    finally:
        model_analyzer.tfprof_logger.merge_default_with_oplog = original


def _build(run_dir: Path, with_graph: bool = True) -> Any:
    import tensorflow as tf
    from tensorflow.core.profiler import tfprof_log_pb2
    from tensorflow.core.protobuf import config_pb2

    graph = tf.Graph()
    op_log = None
    if with_graph:
        with graph.as_default():
            graph_def = tf.compat.v1.GraphDef.FromString((run_dir / "graph.pb").read_bytes())
            tf.import_graph_def(graph_def, name="")
        op_log = tfprof_log_pb2.OpLogProto.FromString((run_dir / "op_log.pb").read_bytes())
    with _saved_code_traces():
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


def time_rows(root: Any) -> list[dict[str, Any]]:
    """Every node of a tfprof tree view (below its root) as name, t_micros, t_cpu_micros,
    t_accelerator_micros and t_occurrence: tfprof's times per node."""
    rows = []

    def walk(n: Any) -> None:
        if n.name != "_TFProfRoot":
            rows.append({"name": n.name, "t_micros": n.exec_micros,
                         "t_cpu_micros": n.cpu_exec_micros,
                         "t_accelerator_micros": n.accelerator_exec_micros,
                         "t_occurrence": n.run_count})
        for c in n.children:
            walk(c)

    walk(root)
    return rows
