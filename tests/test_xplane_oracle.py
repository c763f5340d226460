"""Per op and per op type, host and device self time (and total time, occurrences) of
every xplane fixture equal xprof's framework op stats of the same file; so do the steps
(count and per-step duration) with xprof's step db."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.xplane_run import CAPTURED, GPU_XPLANE, fixture_file, xplane_run

pytest.importorskip("xprof", reason="xprof (dev extra) is the oracle")
from tests.xprof_oracle import framework_op_stats, step_db  # noqa: E402

NEEDS_GPU_FILE = pytest.mark.skipif(not GPU_XPLANE.is_file(),
                                    reason="../shared/data/xplane not present")
TF_FILES = [pytest.param(fixture_file(n), id=n) for n in CAPTURED if not n.startswith("jax")]
FILES = TF_FILES + [pytest.param(GPU_XPLANE, id="gpu_bert", marks=NEEDS_GPU_FILE)]
KEY = ["where", "name"]  # xprof keys its op metrics by name (one type per name)


def ours(path: Path) -> pl.DataFrame:
    """Our executions as xprof's rows: host = the canonical CPU lane, device = streams;
    a kernel counts for the op that launched it; tf.data stages are named with '::'."""
    n = xplane_run(path).nodes
    return (
        n.with_columns(
            where=pl.when(pl.col("lane_kind") == "device").then(pl.lit("Host"))
            .otherwise(pl.lit("Device")),
            name=pl.when(pl.col("op_type") == "Dataset")
            .then(pl.col("node_name").str.replace_all("/", "::"))
            .otherwise(pl.col("node_name")),
            type=pl.col("op_type"))
        .group_by(KEY)
        .agg(type=pl.col("type").unique().sort().str.join("|"), occurrences=pl.len(),
             time_ps=pl.col("all_end_rel_ns").sum() * 1000,
             self_time_ps=pl.col("op_end_rel_ns").sum() * 1000)
    )


def comparable(f: pl.DataFrame) -> pl.DataFrame:
    """Ops xprof can name: xprof's op-name rule rejects names that start with '_' (the
    partitioner's `_send_*` nodes, `_DeviceRetval`...); we keep those ops (they ran and
    took time) and test the difference on its own below. xprof reads no eager op
    (`EagerLocalExecute: Op`, our `eager/Op`): tests/test_host_eager.py checks those
    against the raw events."""
    return f.filter(~pl.col("name").str.starts_with("_")
                    & ~pl.col("name").str.starts_with("eager/"))


def oracle(path: Path) -> pl.DataFrame:
    o = framework_op_stats(path)
    # xprof also counts the tf_op named by MemoryAllocation events (no time, no type).
    return o.filter(~((pl.col("type") == "") & (pl.col("time_ps") == 0)))


@pytest.mark.parametrize("path", FILES)
def test_per_op_times_equal_xprof(path: Path) -> None:
    want, got = oracle(path), comparable(ours(path))
    both = want.join(got.filter(pl.col("where") == "Host"), on=KEY, how="full",
                     suffix="_ours", coalesce=True)
    only_xprof = both.filter(pl.col("time_ps_ours").is_null())
    only_ours = both.filter(pl.col("time_ps").is_null())
    assert only_xprof.height == 0, only_xprof.head(10)
    assert want.filter(pl.col("where") == "Device").height == 0  # see the GPU test below
    assert only_ours.height == 0, only_ours.head(10)
    matched = both.drop_nulls()
    assert matched.height >= 10
    # Names of one type in our run have xprof's type; a name that several functions use
    # for ops of different types (identity_RetVal: _Retval and _DeviceRetval) xprof files
    # under one of them.
    single = matched.filter(~pl.col("type_ours").str.contains("|", literal=True))
    assert single.filter(pl.col("type") != pl.col("type_ours")).height == 0
    for col in ("time_ps", "self_time_ps"):
        diff = matched.filter(pl.col(col) != pl.col(f"{col}_ours"))
        assert diff.height == 0, diff.select(*KEY, col, f"{col}_ours").head(10)
    # Occurrences: equal for ops that ran on the host only. xprof's host count of an op
    # that also ran on a GPU adds some of its device events (kernels, mostly; its time is
    # the host's alone): it lies between our host count and host + device count.
    device = got.filter(pl.col("where") == "Device").select(
        "name", device_occurrences="occurrences")
    counted = matched.join(device, on="name", how="left").with_columns(
        pl.col("device_occurrences").fill_null(0))
    host_only = counted.filter(pl.col("device_occurrences") == 0)
    diff = host_only.filter(pl.col("occurrences") != pl.col("occurrences_ours"))
    # ...but for the two ops a host-to-device memcpy names as its source
    # (`OptionalHasValue_5/_8:_Recv#from=OptionalHasValue_5`), which xprof counts once more.
    assert set(diff["name"]) <= {"OptionalHasValue_5", "OptionalHasValue_7"}, diff.head(10)
    assert (diff["occurrences"] == diff["occurrences_ours"] + 1).all()
    both_sides = counted.filter(pl.col("device_occurrences") > 0)
    diff = both_sides.filter(~pl.col("occurrences").is_between(
        pl.col("occurrences_ours"), pl.col("occurrences_ours") + pl.col("device_occurrences")))
    assert diff.height == 0, diff.select(*KEY, "occurrences", "occurrences_ours").head(10)


ALL_FILES = FILES + [pytest.param(fixture_file("jax_train"), id="jax_train")]


@pytest.mark.parametrize("path", ALL_FILES)
def test_steps_equal_xprofs_step_db(path: Path) -> None:
    """Step count and each step's duration (and start) equal xprof's step db: `train`
    marker spans on the CPU fixtures, the device span of the one step (group 0) on the GPU
    profile. Ours are in ns, xprof's in ps: equal to the ns (we truncate)."""
    from runlens.analyzer.analysis.steps import step_times

    want = step_db(path)
    assert want.height > 0, "xprof found no step"
    assert want["core"].n_unique() == 1  # one row per step (one core)
    got = step_times(xplane_run(path)).sort("start_ns")
    assert got.height == want.height
    assert (got["duration_ns"] == want["duration_ps"] // 1000).all(), (got, want)
    # Same clock: the file's (xprof's begin_ps is the absolute start on the GPU profile,
    # relative to the profile's start on the CPU fixtures, as ours).
    assert (got["start_ns"] == want["begin_ps"] // 1000).all(), (got, want)
    # Marker steps are numbered by their marker's step_num (xprof names them "train N").
    named = want.filter(pl.col("name") != "")
    assert named["name"].to_list() == [f"train {s}" for s in got["step"]][: named.height]


@NEEDS_GPU_FILE
def test_gpu_steps_are_the_device_groups_not_host_calls() -> None:
    """Why the GPU profile has one step where its group_ids number seven: the profiler
    groups each traced host call (groups 1-6: about 1 ms of host work at most, no device
    event); a step is a group that ran device work. Its span is the device
    work's, on the GPU where that is longest (xprof's 21.31 ms; GPU:4's is 19.87 ms), not
    the span of every execution (953 ms: host work long before the device ran)."""
    from runlens.analyzer.analysis.steps import step_times

    run = xplane_run(GPU_XPLANE)
    assert run.nodes.filter(pl.col("step") != 0).height == 0
    got = step_times(run)
    assert got["duration_ns"][0] == step_db(GPU_XPLANE)["duration_ps"][0] // 1000
    every = run.nodes.select(
        (pl.col("start_ns") + pl.col("all_end_rel_ns")).max() - pl.col("start_ns").min())
    assert every.item() > 40 * got["duration_ns"][0]


@pytest.mark.parametrize("path", FILES)
def test_per_op_type_self_time_equals_xprof(path: Path) -> None:
    def by_type(f: pl.DataFrame) -> pl.DataFrame:
        return f.filter(pl.col("where") == "Host").group_by("type").agg(
            pl.col("self_time_ps").sum().alias("self"))

    got = comparable(ours(path))
    mixed = got.filter(pl.col("type").str.contains("|", literal=True))["name"]
    got = got.filter(~pl.col("name").is_in(mixed.implode()))  # see the test above
    want = oracle(path).filter(~pl.col("name").is_in(mixed.implode()))
    joined = by_type(want).join(by_type(got), on="type", how="full", suffix="_ours")
    assert joined.filter(pl.col("self") != pl.col("self_ours")).height == 0
    assert joined.filter(pl.col("self").is_null() | pl.col("self_ours").is_null()).height == 0


@NEEDS_GPU_FILE
def test_ops_xprof_drops_are_the_underscore_named() -> None:
    """Where we and xprof differ on the GPU profile: ops whose node name starts with '_'
    (326 `_Send`s, 0.18 ms of 63.7 ms host op time) that xprof's
    name rule drops; every other host op is equal (above)."""
    want, got = oracle(GPU_XPLANE), ours(GPU_XPLANE).filter(pl.col("where") == "Host")
    extra = got.join(want, on=KEY, how="anti")
    assert extra.height > 0
    assert extra["name"].str.starts_with("_").all()
    assert set(extra["type"]) <= {"_Send", "_Recv", "_HostSend", "_HostRecv"}
    total = want["self_time_ps"].sum() + extra["self_time_ps"].sum()
    assert got["self_time_ps"].sum() == total


def test_xprof_counts_no_jax_cpu_op() -> None:
    """Why the JAX fixture is checked against the HLO metadata below, not xprof: xprof's
    framework op stats of a JAX CPU profile hold no op at all (its host ops are TF ops)."""
    assert oracle(fixture_file("jax_train")).height == 0
    assert ours(fixture_file("jax_train")).height > 10


@NEEDS_GPU_FILE
def test_gpu_kernels_equal_the_profilers_tensorflow_ops_line() -> None:
    """xprof 2.24 reports no device op for this 2020 GPU profile; the profiler plugin that
    preprocessed it wrote a "TensorFlow Ops" line per GPU (each kernel under the TF op
    that launched it): our kernel time per (device, op) equals that line's."""
    from runlens.analyzer.proto import xplane_pb2

    space = xplane_pb2.XSpace.FromString(GPU_XPLANE.read_bytes())
    rows = [(p.name.lower(), p.event_metadata[e.metadata_id].name.split(":")[0],
             e.duration_ps)
            for p in space.planes if p.name.startswith("/device:")
            for line in p.lines if line.name == "TensorFlow Ops" for e in line.events]
    want = pl.DataFrame(rows, orient="row", schema=["device", "node", "ps"]).group_by(
        "device", "node").agg(n=pl.len(), ps=pl.col("ps").sum())
    assert want.height > 1000
    kernels = xplane_run(GPU_XPLANE).nodes.filter(pl.col("lane_kind") == "stream_all")
    got = kernels.group_by("device", node="node_name").agg(
        n=pl.len(), ps=pl.col("op_end_rel_ns").sum() * 1000)
    joined = want.join(got, on=["device", "node"], how="left", suffix="_ours")
    assert joined.filter(pl.col("ps_ours").is_null()).height == 0
    assert joined.filter((pl.col("n") != pl.col("n_ours"))
                         | (pl.col("ps") != pl.col("ps_ours"))).height == 0
    # What the line leaves out are memcpys (it draws compute kernels only).
    extra = got.join(want, on=["device", "node"], how="anti")
    stat_names = kernels.join(extra, left_on=["device", "node_name"],
                              right_on=["device", "node"]).get_column("stat_name")
    assert stat_names.str.contains(":Memcpy(H2D|D2H|D2D|P2P)$").all()


def _inferred_names(proto: bytes) -> dict[str, str]:
    """instruction -> its inferred op name (runlens's rule, on the vendored HLO subset)."""
    from runlens.analyzer.proto import hlo_pb2 as ours
    from runlens.analyzer.sources.hlo_infer import fused_opcode, inferred_metadata, inferred_name

    module = ours.HloProto.FromString(proto).hlo_module
    comps = {c.id: c for c in module.computations}
    insts = {i.name: i for c in module.computations for i in c.instructions}
    return {name: inferred_name(meta, fused_opcode(insts[name], comps))
            for name, meta in inferred_metadata(module).items()}


def test_jax_ops_equal_the_hlo_metadata() -> None:
    """Each XLA thunk's time goes to the framework op (named-scope path) of its HLO
    instruction: checked with XLA's own full HloProto schema (TensorFlow's copy), not our
    vendored subset."""
    hlo_pb2 = pytest.importorskip("tensorflow.compiler.xla.service.hlo_pb2")
    xplane_pb2 = pytest.importorskip("tensorflow.tsl.profiler.protobuf.xplane_pb2")
    path = fixture_file("jax_train")
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    op_names: dict[tuple[int, str], str] = {}
    for plane in space.planes:
        if plane.name != "/host:metadata":
            continue
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for meta in plane.event_metadata.values():
            st = {names[s.metadata_id]: s for s in meta.stats}
            if "Hlo Proto" not in st:
                continue
            module = hlo_pb2.HloProto.FromString(st["Hlo Proto"].bytes_value).hlo_module
            program = st["program_id"].int64_value or st["program_id"].uint64_value
            # An instruction XLA made without an op name is named by the scope it takes
            # from its neighbours (sources/hlo_infer.py, tests/test_jax_forms.py).
            inferred = _inferred_names(st["Hlo Proto"].bytes_value)
            for comp in module.computations:
                for inst in comp.instructions:
                    op_names[(program, inst.name)] = inferred.get(
                        inst.name, inst.metadata.op_name or inst.name)
    rows = []
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            for e in line.events:
                st = {names[s.metadata_id]: s for s in e.stats}
                if "hlo_op" in st:
                    inst = names[st["hlo_op"].ref_value]
                    program = st["program_id"].int64_value or st["program_id"].uint64_value
                    rows.append((op_names[(program, inst)], e.duration_ps))
    want = pl.DataFrame(rows, orient="row", schema=["name", "ps"]).group_by("name").agg(
        n=pl.len(), ps=pl.col("ps").sum())
    got = xplane_run(path).nodes.group_by(name="node_name").agg(
        n=pl.len(), ps=pl.col("all_end_rel_ns").sum() * 1000)
    joined = want.join(got, on="name", how="full", suffix="_ours")
    assert joined.filter((pl.col("n") != pl.col("n_ours"))
                         | (pl.col("ps") != pl.col("ps_ours"))
                         | pl.col("n").is_null() | pl.col("n_ours").is_null()).height == 0
    scopes = " ".join(want["name"].to_list())
    for scope in ("dense1", "dense2", "loss", "sgd"):
        assert f"/{scope}/" in scopes or f"({scope})/" in scopes
