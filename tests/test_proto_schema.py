"""Schema tests for analyzer/proto, runlens' TensorFlow-free protobuf subset.

* the committed *_pb2 modules are what regenerate.py would produce;
* every message/field/enum value we declare matches TensorFlow's descriptors;
* importing our modules does not import TensorFlow;
* real TensorFlow-produced RunMetadata / GraphDef / OpLogProto round-trip
  through our classes without losing anything (tests/proto_roundtrip.py).

TensorFlow-dependent tests are skipped when TensorFlow is not installed.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor, FileDescriptor

from tests.proto_roundtrip import assert_round_trip

REPO_ROOT = Path(__file__).resolve().parents[1]
PROTO_DIR = REPO_ROOT / "analyzer" / "proto"

OUR_PACKAGE = "runlens.tf"
TF_PACKAGE = "tensorflow"

# Our generated module -> TensorFlow's generated module for the same .proto.
OUR_TO_TF = {
    "allocation_description_pb2": "tensorflow.core.framework.allocation_description_pb2",
    "attr_value_pb2": "tensorflow.core.framework.attr_value_pb2",
    "config_pb2": "tensorflow.core.protobuf.config_pb2",
    "cost_graph_pb2": "tensorflow.core.framework.cost_graph_pb2",
    "event_pb2": "tensorflow.core.util.event_pb2",
    "graph_pb2": "tensorflow.core.framework.graph_pb2",
    "node_def_pb2": "tensorflow.core.framework.node_def_pb2",
    "resource_handle_pb2": "tensorflow.core.framework.resource_handle_pb2",
    "step_stats_pb2": "tensorflow.core.framework.step_stats_pb2",
    "tensor_description_pb2": "tensorflow.core.framework.tensor_description_pb2",
    "tensor_pb2": "tensorflow.core.framework.tensor_pb2",
    "tensor_shape_pb2": "tensorflow.core.framework.tensor_shape_pb2",
    "tfprof_log_pb2": "tensorflow.core.profiler.tfprof_log_pb2",
    "types_pb2": "tensorflow.core.framework.types_pb2",
    "versions_pb2": "tensorflow.core.framework.versions_pb2",
    # XSpace profiles (TF2/JAX) and the HLO metadata of JAX's: TF ships XLA's and TSL's.
    "xplane_pb2": "tensorflow.tsl.profiler.protobuf.xplane_pb2",
    "hlo_pb2": "tensorflow.compiler.xla.service.hlo_pb2",
    "xla_data_pb2": "tensorflow.compiler.xla.xla_data_pb2",
}

# Our generated modules of formats that are not TensorFlow's (pprof's profile.proto).
NOT_TF = {"profile_pb2"}

# Full names of our messages/enums that deliberately have no TF counterpart.
RUNLENS_ONLY: set[str] = set()

# TF fields we deliberately do not declare (see the .proto headers). Real data
# may carry them; they must survive a round trip as unknown fields.
OMITTED_TF_FIELDS = {
    "tensorflow.GraphDef.library",
    "tensorflow.GraphDef.debug_info",
    "tensorflow.NodeDef.experimental_type",
}


def _tf_name(full_name: str) -> str:
    """runlens.tf.X -> tensorflow.X (runlens.tf.tfprof.X -> tensorflow.tfprof.X); XLA's
    package is `xla` (runlens.tf.xla.X -> xla.X)."""
    if full_name == OUR_PACKAGE + ".xla" or full_name.startswith(OUR_PACKAGE + ".xla."):
        return full_name[len(OUR_PACKAGE) + 1 :]
    if full_name == OUR_PACKAGE or full_name.startswith(OUR_PACKAGE + "."):
        return TF_PACKAGE + full_name[len(OUR_PACKAGE) :]
    return full_name


def _ours(module: str) -> ModuleType:
    return importlib.import_module(f"runlens.analyzer.proto.{module}")


def _tf_module(module: str) -> ModuleType:
    pytest.importorskip("tensorflow", reason="tensorflow (dev extra) not installed")
    return importlib.import_module(OUR_TO_TF[module])


def test_every_proto_has_a_tf_mapping() -> None:
    modules = {p.stem + "_pb2" for p in PROTO_DIR.glob("*.proto")} - NOT_TF
    assert modules == set(OUR_TO_TF)
    for module in sorted(modules):
        package = _ours(module).DESCRIPTOR.package
        assert package == OUR_PACKAGE or package.startswith(OUR_PACKAGE + "."), module


# --------------------------------------------------------------------------
# a) freshness of the committed generated modules


def test_generated_modules_are_fresh() -> None:
    pytest.importorskip(
        "grpc_tools",
        reason="grpcio-tools (dev extra) not installed: cannot regenerate to compare",
    )
    from runlens.analyzer.proto import regenerate

    problems = regenerate.check()
    assert not problems, (
        "generated modules are stale; run `python -m runlens.analyzer.proto.regenerate`:\n"
        + "\n".join(problems)
    )


# --------------------------------------------------------------------------
# b) descriptor compatibility with TensorFlow


_TYPE_NAMES = {
    getattr(FieldDescriptor, a): a[len("TYPE_") :].lower()
    for a in dir(FieldDescriptor)
    if a.startswith("TYPE_")
}


def _label(fd: FieldDescriptor) -> str:
    if fd.is_repeated:
        return "repeated"
    return "required" if fd.is_required else "optional"


def _type_names(fd: FieldDescriptor) -> tuple[str, str] | None:
    """(short name, full name) of a message/enum field's type, else None."""
    t = fd.message_type or fd.enum_type
    return (t.name, t.full_name) if t is not None else None


def _walk(container: FileDescriptor | Descriptor) -> Iterator[Descriptor | EnumDescriptor]:
    if isinstance(container, FileDescriptor):
        messages = list(container.message_types_by_name.values())
        enums = list(container.enum_types_by_name.values())
    else:
        messages, enums = list(container.nested_types), list(container.enum_types)
    yield from enums
    for m in messages:
        yield m
        yield from _walk(m)


def _counterpart(
    tf_file: FileDescriptor, ours: Descriptor | EnumDescriptor
) -> Descriptor | EnumDescriptor | None:
    """TF's message/enum with the same path inside the corresponding TF file."""
    parts = ours.full_name[len(ours.file.package) + 1 :].split(".")
    node: Any = tf_file
    for i, part in enumerate(parts):
        if i == len(parts) - 1 and isinstance(ours, EnumDescriptor):
            table = node.enum_types_by_name
        elif isinstance(node, FileDescriptor):
            table = node.message_types_by_name
        else:
            table = node.nested_types_by_name
        node = table.get(part)
        if node is None:
            return None
    return node


def _field_problems(ours: Descriptor, theirs: Descriptor) -> list[str]:
    problems = []
    for f in ours.fields:
        where = f"{ours.full_name}.{f.name} (#{f.number})"
        t = theirs.fields_by_number.get(f.number)
        if t is None:
            problems.append(f"{where}: TF has no field #{f.number}")
            continue
        ours_type, tf_type = _type_names(f), _type_names(t)
        checks = {
            "name": (f.name, t.name),
            "label": (_label(f), _label(t)),
            "type": (_TYPE_NAMES[f.type], _TYPE_NAMES[t.type]),
            "type name": (ours_type and ours_type[0], tf_type and tf_type[0]),
            "type full name": (ours_type and _tf_name(ours_type[1]), tf_type and tf_type[1]),
            "oneof": (
                f.containing_oneof.name if f.containing_oneof else None,
                t.containing_oneof.name if t.containing_oneof else None,
            ),
            "packed": (f.is_packed, t.is_packed),
            "presence": (f.has_presence, t.has_presence),
        }
        for what, (mine, tf) in checks.items():
            if mine != tf:
                problems.append(f"{where}: {what} is {mine!r}, TF has {tf!r}")
    if ours.GetOptions().map_entry != theirs.GetOptions().map_entry:
        problems.append(f"{ours.full_name}: map_entry differs from TF")
    return problems


def _enum_problems(ours: EnumDescriptor, theirs: EnumDescriptor) -> list[str]:
    problems = []
    for v in ours.values:
        t = theirs.values_by_number.get(v.number)
        if t is None or t.name != v.name:
            problems.append(
                f"{ours.full_name}.{v.name} = {v.number}: TF has "
                f"{t.name if t is not None else 'no value'} for {v.number}"
            )
    return problems


@pytest.mark.parametrize("module", sorted(OUR_TO_TF))
def test_descriptors_match_tensorflow(module: str) -> None:
    tf_file = _tf_module(module).DESCRIPTOR
    ours_file = _ours(module).DESCRIPTOR
    assert tf_file.package == _tf_name(ours_file.package)

    problems: list[str] = []
    checked = 0
    for ours in _walk(ours_file):
        theirs = _counterpart(tf_file, ours)
        if theirs is None:
            if ours.full_name not in RUNLENS_ONLY:
                problems.append(f"{ours.full_name}: no counterpart in {tf_file.name}")
            continue
        assert theirs.full_name == _tf_name(ours.full_name)
        if isinstance(ours, EnumDescriptor):
            problems += _enum_problems(ours, theirs)
        else:
            problems += _field_problems(ours, theirs)
        checked += 1
    assert checked, f"no messages/enums in {module}"
    assert not problems, "\n".join(problems)


def test_required_messages_present() -> None:
    from runlens.analyzer.proto import (
        config_pb2,
        cost_graph_pb2,
        graph_pb2,
        step_stats_pb2,
        tfprof_log_pb2,
    )

    assert config_pb2.RunMetadata.FunctionGraphs.DESCRIPTOR.name == "FunctionGraphs"
    for name in (
        "StepStats",
        "DeviceStepStats",
        "NodeExecStats",
        "AllocatorMemoryUsed",
        "AllocationRecord",
        "NodeOutput",
        "MemoryStats",
    ):
        assert hasattr(step_stats_pb2, name), name
    assert graph_pb2.GraphDef.DESCRIPTOR.full_name == "runlens.tf.GraphDef"
    assert cost_graph_pb2.CostGraphDef.DESCRIPTOR.full_name == "runlens.tf.CostGraphDef"
    assert tfprof_log_pb2.OpLogProto.DESCRIPTOR.full_name == "runlens.tf.tfprof.OpLogProto"
    assert tfprof_log_pb2.CodeDef.Trace.DESCRIPTOR.full_name == "runlens.tf.tfprof.CodeDef.Trace"
    nanos = {f.name for f in step_stats_pb2.NodeExecStats.DESCRIPTOR.fields if "nanos" in f.name}
    assert nanos == {
        "all_start_nanos",
        "op_start_rel_nanos",
        "op_end_rel_nanos",
        "all_end_rel_nanos",
        "scheduled_nanos",
    }


# --------------------------------------------------------------------------
# c) importing our modules must not import TensorFlow


def test_importing_protos_does_not_import_tensorflow() -> None:
    modules = ", ".join(f"runlens.analyzer.proto.{m}" for m in sorted(OUR_TO_TF))
    code = (
        f"import runlens.analyzer.proto.config_pb2, {modules}, sys; "
        "bad = sorted(m for m in sys.modules if m.startswith('tensorflow')); "
        "assert not bad, bad"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr


# --------------------------------------------------------------------------
# round-trip helper: self-test without TensorFlow


def _fake_allocation_record(alloc_bytes_type: int | None) -> type:
    """An AllocationRecord clone in a private pool; field 2 retyped or dropped."""
    fdp = descriptor_pb2.FileDescriptorProto(
        name="runlens_test/fake.proto", package="runlens_test", syntax="proto3"
    )
    msg = fdp.message_type.add(name="AllocationRecord")
    optional = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    msg.field.add(name="alloc_micros", number=1, type=FieldDescriptor.TYPE_INT64, label=optional)
    if alloc_bytes_type is not None:
        msg.field.add(name="alloc_bytes", number=2, type=alloc_bytes_type, label=optional)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("runlens_test.AllocationRecord")
    )


def test_round_trip_helper_detects_loss_and_reports_unknown_fields() -> None:
    from runlens.analyzer.proto import step_stats_pb2

    ref = step_stats_pb2.AllocationRecord
    raw = ref(alloc_micros=5, alloc_bytes=-42).SerializeToString()

    assert assert_round_trip(raw, ref, ref) == []

    # Field 2 not declared: kept as unknown, reported, not an error.
    missing = _fake_allocation_record(None)
    assert assert_round_trip(raw, missing, ref) == ["runlens.tf.AllocationRecord.alloc_bytes"]

    # Field 2 declared with an incompatible wire type: our parse loses it.
    wrong = _fake_allocation_record(FieldDescriptor.TYPE_STRING)
    with pytest.raises(AssertionError, match=r"alloc_bytes \(#2\) is set in TF's parse"):
        assert_round_trip(raw, wrong, ref)

    # Same wire type, different value interpretation (sint64 zigzag vs int64).
    zigzag = _fake_allocation_record(FieldDescriptor.TYPE_SINT64)
    with pytest.raises(AssertionError, match=r"alloc_bytes: ours"):
        assert_round_trip(raw, zigzag, ref)


# --------------------------------------------------------------------------
# round trips of real TensorFlow output


@pytest.fixture(scope="module")
def tf_outputs() -> dict[str, Any]:
    """Real protos produced by TensorFlow: a tiny tf.compat.v1 graph run with
    FULL_TRACE + partition graphs + cost model, its GraphDef, its tfprof
    OpLogProto, and an eager RunMetadata with function_graphs."""
    tf = pytest.importorskip("tensorflow", reason="tensorflow (dev extra) not installed")
    from tensorflow.python.eager import context
    from tensorflow.python.profiler import tfprof_logger

    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [2, 3], name="x")
        w = tf.Variable(tf.ones([3, 4]), name="w")
        y = tf.matmul(x, w, name="y")
        z = tf.reduce_sum(tf.nn.relu(y), name="z")
        init = v1.global_variables_initializer()

    config = v1.ConfigProto(graph_options=v1.GraphOptions(build_cost_model=1))
    run_metadata = v1.RunMetadata()
    with v1.Session(graph=graph, config=config) as sess:
        sess.run(init)
        sess.run(
            z,
            feed_dict={x: [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]},
            options=v1.RunOptions(
                trace_level=v1.RunOptions.FULL_TRACE, output_partition_graphs=True
            ),
            run_metadata=run_metadata,
        )

    op_log = tfprof_logger.merge_default_with_oplog(graph, add_trace=True)

    @tf.function
    def fn(a: Any) -> Any:
        return tf.reduce_sum(tf.nn.relu(tf.matmul(a, a)))

    context.enable_run_metadata()
    try:
        fn(tf.ones([3, 3]))
        eager_run_metadata = context.export_run_metadata()
    finally:
        context.disable_run_metadata()

    return {
        "run_metadata": run_metadata,
        "graph_def": graph.as_graph_def(),
        "op_log": op_log,
        "eager_run_metadata": eager_run_metadata,
    }


def test_round_trip_session_run_metadata(tf_outputs: dict[str, Any]) -> None:
    from runlens.analyzer.proto import config_pb2

    md = tf_outputs["run_metadata"]
    # Make sure the capture exercises what we care about.
    assert md.step_stats.dev_stats and md.cost_graph.node and md.partition_graphs
    stats = [ns for dev in md.step_stats.dev_stats for ns in dev.node_stats]
    assert any(ns.all_start_nanos and ns.op_end_rel_nanos for ns in stats)
    assert any(
        out.tensor_description.HasField("allocation_description")
        for ns in stats
        for out in ns.output
    )

    undeclared = assert_round_trip(md.SerializeToString(), config_pb2.RunMetadata, type(md))
    assert set(undeclared) <= OMITTED_TF_FIELDS, undeclared


def test_round_trip_eager_run_metadata_with_function_graphs(
    tf_outputs: dict[str, Any],
) -> None:
    from runlens.analyzer.proto import config_pb2

    md = tf_outputs["eager_run_metadata"]
    assert md.function_graphs
    undeclared = assert_round_trip(md.SerializeToString(), config_pb2.RunMetadata, type(md))
    # Function graphs carry GraphDef.library, which we omit on purpose: it must
    # survive the round trip as an unknown field (checked inside the helper).
    assert "tensorflow.GraphDef.library" in undeclared
    assert set(undeclared) <= OMITTED_TF_FIELDS, undeclared


def test_round_trip_graph_def(tf_outputs: dict[str, Any]) -> None:
    from runlens.analyzer.proto import graph_pb2

    gd = tf_outputs["graph_def"]
    assert any(n.attr["value"].HasField("tensor") for n in gd.node if n.op == "Const")
    undeclared = assert_round_trip(gd.SerializeToString(), graph_pb2.GraphDef, type(gd))
    assert set(undeclared) <= OMITTED_TF_FIELDS, undeclared


def test_round_trip_op_log(tf_outputs: dict[str, Any]) -> None:
    from runlens.analyzer.proto import tfprof_log_pb2

    op_log = tf_outputs["op_log"]
    assert op_log.log_entries and op_log.id_to_string
    assert any(e.code_def.traces for e in op_log.log_entries)
    undeclared = assert_round_trip(
        op_log.SerializeToString(), tfprof_log_pb2.OpLogProto, type(op_log)
    )
    assert not undeclared, undeclared


# ----------------------------------------------------------------------------- fixtures


def test_every_fixture_file_round_trips_through_our_schema(fixture_dir):
    """Step files, graph.pb and op_log.pb of every committed fixture: nothing is lost."""
    pytest.importorskip("tensorflow")
    from tensorflow.core.framework import graph_pb2 as tf_graph_pb2
    from tensorflow.core.profiler import tfprof_log_pb2 as tf_tfprof_log_pb2
    from tensorflow.core.protobuf import config_pb2 as tf_config_pb2

    from runlens.analyzer.proto import config_pb2, graph_pb2, tfprof_log_pb2

    files = [(p, config_pb2.RunMetadata, tf_config_pb2.RunMetadata)
             for p in sorted((fixture_dir / "steps").glob("step-*.pb"))]
    files.append((fixture_dir / "graph.pb", graph_pb2.GraphDef, tf_graph_pb2.GraphDef))
    files.append((fixture_dir / "op_log.pb", tfprof_log_pb2.OpLogProto,
                  tf_tfprof_log_pb2.OpLogProto))
    files = [f for f in files if f[0].is_file()]  # converted GPU traces have steps only
    for path, ours, theirs in files:
        assert_round_trip(path.read_bytes(), ours, theirs)
