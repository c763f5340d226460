"""Device events of XLA programs (JAX on an H200, ../shared/data/gpu-jax; the public TPU
profile, ../shared/data/xplane) attributed to their HLO instruction and framework op,
checked against xprof's HLO op stats computed here from the same files.

With command buffers off every kernel's `hlo_op` names its instruction: per framework op
our device time equals xprof's. With them on (XLA's default) xprof leaves the kernels in
command buffers unattributed; ours are placed by kernel name and the module's schedule,
and each user scope's share must be within 15% of xprof's on the same program captured
with command buffers off (SOURCES.md: cnn_a/b/c ~ cnn_a_nocb, cnn_wide2 ~ cnn_wide2_nocb,
xf_input ~ xf_a_nocb)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from runlens.analyzer.analysis.attribution import attribution_shares
from runlens.analyzer.load import load_run
from runlens.analyzer.model import Run

pytest.importorskip("xprof", reason="xprof (dev extra) is the oracle")
from tests.xprof_oracle import hlo_op_stats, step_db  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
GPU_JAX = REPO.parent / "shared" / "data" / "gpu-jax"
TPU = REPO.parent / "shared" / "data" / "xplane" / "openxla__xprof__tpu_inference_2.xplane.pb"
pytestmark = pytest.mark.skipif(not GPU_JAX.is_dir(), reason="../shared/data/gpu-jax absent")

CB_OFF = ["cnn_a_nocb", "cnn_wide2_nocb", "xf_a_nocb"]
PAIRS = [("cnn_a", "cnn_a_nocb"), ("cnn_b", "cnn_a_nocb"), ("cnn_c", "cnn_a_nocb"),
         ("cnn_wide2", "cnn_wide2_nocb"), ("xf_input", "xf_a_nocb")]
# The user's scopes of the two programs (capture_jax.py's jax.named_scope names).
SCOPE = r"(?:^|[/(])(stem|stage[0-3]|head|loss|optimizer|embed|block[0-5])(?:[/)]|$)"


def xplane(name: str) -> Path:
    return next((GPU_JAX / name).glob("plugins/profile/*/*.xplane.pb"))


_RUNS: dict[str, Run] = {}


def run_of(name: str) -> Run:
    if name not in _RUNS:
        _RUNS[name] = load_run(GPU_JAX / name, use_cache=False)
    return _RUNS[name]


def device(run: Run) -> pl.DataFrame:
    return run.nodes.filter(pl.col("lane_kind") == "stream_all")


def scope(name: pl.Expr) -> pl.Expr:
    return name.str.extract(SCOPE, 1).fill_null("(none)")


def our_scopes(name: str) -> pl.DataFrame:
    return device(run_of(name)).group_by(scope=scope(pl.col("node_name"))).agg(
        ps=pl.col("op_end_rel_ns").sum() * 1000, n=pl.len())


def inferred_names(name: str) -> pl.DataFrame:
    """program_id, hlo_op -> the op name runlens infers for an instruction XLA made
    without one (sources/hlo_infer.py): the names the oracle's rows are matched by. The
    times and counts stay xprof's; only its rows' names follow the inference."""
    from runlens.analyzer.sources.xplane_hlo import read_programs
    from runlens.analyzer.sources.xplane_wire import read_planes

    plane = next(p for p in read_planes(xplane(name), False) if p.name == "/host:metadata")
    ops = read_programs(plane.meta).ops
    rows = [(p, i, op.op_name) for (p, i), op in ops.items()
            if op.op_name.endswith(" (inferred)")]
    return pl.DataFrame(rows, orient="row", schema={
        "program_id": pl.UInt64, "hlo_op": pl.String, "inferred": pl.String})


def xprof_ops(name: str) -> pl.DataFrame:
    """xprof's HLO op stats, an instruction without framework op under its inferred name."""
    return (hlo_op_stats(xplane(name)).join(inferred_names(name), on=["program_id", "hlo_op"],
                                            how="left")
            .with_columns(op_name=pl.coalesce("inferred", "op_name")).drop("inferred"))


def xprof_scopes(name: str) -> pl.DataFrame:
    return xprof_ops(name).group_by(scope=scope(pl.col("op_name"))).agg(
        ps=pl.col("self_time_ps").sum(), n=pl.col("occurrences").sum())


def shares(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(share=pl.col("ps") / pl.col("ps").sum())


@pytest.mark.parametrize("name", CB_OFF)
def test_command_buffers_off_per_op_equals_xprof(name: str) -> None:
    """Every kernel names its instruction: per framework op, occurrences and device time
    equal xprof's HLO op stats (ours truncated to the ns per event), nothing unattributed."""
    want = xprof_ops(name).group_by(
        # An instruction without framework op (no OpMetadata) goes by its own name.
        op_name=pl.when(pl.col("op_name") != "").then("op_name").otherwise("hlo_op")
    ).agg(pl.col("occurrences").sum(), ps=pl.col("self_time_ps").sum())
    got = device(run_of(name)).group_by(op_name=pl.col("node_name")).agg(
        occurrences=pl.len(), ps=pl.col("op_end_rel_ns").sum() * 1000)
    joined = want.join(got, on="op_name", how="full", suffix="_ours", coalesce=True)
    assert joined.filter(pl.col("occurrences") != pl.col("occurrences_ours")).height == 0
    off = joined.filter(((pl.col("ps") - pl.col("ps_ours")).abs()
                         > 1000 * pl.col("occurrences")) | pl.col("ps_ours").is_null())
    assert off.height == 0, off
    how = attribution_shares(run_of(name).attribution)
    assert how["op stat"] == 1.0 and how["schedule"] == how["unattributed"] == 0.0
    # The views count every kernel as a run (xprof's occurrences), not 0 as a host lane
    # rule would.
    from runlens.analyzer.analysis.nodestats import node_stats

    run = run_of(name)
    assert node_stats(run, 1)["occurrence"].sum() == run.nodes.filter(
        pl.col("step") == 1).height
    # Hence each scope's share within 5% of xprof's (it is equal to the ns).
    both = shares(our_scopes(name)).join(shares(xprof_scopes(name)), on="scope",
                                         suffix="_x")
    assert ((both["share"] - both["share_x"]).abs() <= 0.05 * both["share_x"]).all()


@pytest.mark.parametrize(("name", "base"), PAIRS)
def test_command_buffers_on_scopes_as_xprof_reads_them_off(name: str, base: str) -> None:
    """XLA's defaults: >= 95% of device time attributed (100% of the kernels in command
    buffers), the same number of kernels per scope per run as xprof counts with command
    buffers off (the attribution, independent of timing), and each scope's share within
    15% of xprof's there. Scopes under 5% of device time may differ by up to 1.5 points
    instead: their kernels run measurably faster inside CUDA graphs (xf_input's optimizer:
    the same 336 kernels, same names, 25% less time each), which no attribution changes."""
    run = run_of(name)
    how = attribution_shares(run.attribution)
    assert 1.0 - how.get("unattributed", 0.0) >= 0.95, how
    assert how.get("schedule", 0.0) > 0  # library kernels / reused kernel names placed
    xprof_cb = hlo_op_stats(xplane(name))["self_time_ps"].sum()
    assert xprof_cb < 0.95 * device(run)["op_end_rel_ns"].sum() * 1000  # xprof's hole
    ours, want = shares(our_scopes(name)), shares(xprof_scopes(base))
    both = want.join(ours, on="scope", how="left", suffix="_ours")
    assert both.filter(pl.col("n") != pl.col("n_ours")).height == 0, both
    ok = ((both["share_ours"] - both["share"]).abs() <= 0.15 * both["share"]) | (
        (both["share"] < 0.05) & ((both["share_ours"] - both["share"]).abs() <= 0.015))
    assert ok.all(), both
    # >= 95% of device time lands in a user scope, as with command buffers off.
    in_scope = ours.filter(pl.col("scope") != "(none)")["share"].sum()
    assert in_scope >= min(0.95, want.filter(pl.col("scope") != "(none)")["share"].sum()
                           - 0.01)


@pytest.mark.parametrize("name", ["cnn_a_nocb", "cnn_a", "cnn_wide2", "xf_a_nocb"])
def test_device_step_spans_equal_xprofs_step_db(name: str) -> None:
    """The device side of each step (first to last device event of the step marker's
    work) equals xprof's step db (which keeps steps 1..n-2 of more than 5); the host
    marker's span is kept beside it, longer (the GPU waits for the host's dispatch).
    Not xf_input: there xprof's steps run from the first kernel to the end of the next
    step's input copies (the H2D memcpys of `jax.device_put`), docs/xplane.md."""
    spans = run_of(name).step_spans
    want = step_db(xplane(name))
    got = spans.join(want.with_columns(step=pl.col("step_num")), on="step")
    assert got.height == want.height > 0
    assert (got["device_start_ns"] == got["begin_ps"] // 1000).all()
    assert (got["device_end_ns"] - got["device_start_ns"]
            == got["duration_ps"] // 1000).all()
    assert ((got["end_ns"] - got["start_ns"]) > got["duration_ps"] // 1000).all()


@pytest.mark.skipif(not TPU.is_file(), reason="../shared/data/xplane absent")
def test_tpu_ops_equal_xprofs_hlo_stats() -> None:
    """The `XLA Ops` lines of the 4 TPU cores: per HLO op, occurrences, time and self time
    equal xprof's hlo_stats (its device_duration_ps; ours to the ns per event)."""
    want = hlo_op_stats(TPU)
    got = (load_run(TPU, use_cache=False).nodes
           .filter(pl.col("lane_kind") == "stream_all")
           .group_by(hlo_op=pl.col("stat_name").str.split(":").list.last())
           .agg(n=pl.len(), ps=pl.col("all_end_rel_ns").sum() * 1000,
                self_ps=pl.col("op_end_rel_ns").sum() * 1000,
                ours_name=pl.col("node_name").first()))
    joined = want.join(got, on="hlo_op", how="full", coalesce=True)
    assert joined.height == 17
    assert (joined["occurrences"] == joined["n"]).all()
    tol = 1000 * joined["occurrences"]
    assert ((joined["time_ps"] - joined["ps"]).abs() <= tol).all()
    assert ((joined["self_time_ps"] - joined["self_ps"]).abs() <= tol).all()
    # Framework op as xprof names it; an op without one (copy-start/done) by its own name.
    expected = pl.when(pl.col("op_name") != "").then("op_name").otherwise("hlo_op")
    assert joined.filter(pl.col("ours_name") != expected).height == 0


def _rewritten(name: str, tmp: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    from runlens.analyzer.proto import xplane_pb2

    space = xplane_pb2.XSpace.FromString(xplane(name).read_bytes())
    edit(space)
    out = tmp / "vm.xplane.pb"
    out.write_bytes(space.SerializeToString())
    return out


def _no_metadata(space) -> None:  # type: ignore[no-untyped-def]
    keep = [p for p in space.planes if p.name != "/host:metadata"]
    del space.planes[:]
    space.planes.extend(keep)


def _no_train_step_hlo(space) -> None:  # type: ignore[no-untyped-def]
    for plane in space.planes:
        if plane.name == "/host:metadata":
            for meta in plane.event_metadata.values():
                if meta.name.startswith("jit_train_step"):
                    del meta.stats[:]


def _renamed_kernels(space) -> None:  # type: ignore[no-untyped-def]
    for plane in space.planes:
        if plane.name.startswith("/device:GPU"):
            for meta in plane.event_metadata.values():
                if meta.name.startswith("loop_"):
                    meta.name = "mystery_" + meta.name  # names no instruction


@pytest.mark.parametrize("edit", [_no_metadata, _no_train_step_hlo, _renamed_kernels])
def test_partial_hlo_is_analysed_with_the_unattributed_share_said(tmp_path: Path,
                                                                  edit) -> None:  # type: ignore[no-untyped-def]
    """No metadata plane, a module without its HLO, kernels whose names match nothing:
    read, every event kept (as unattributed:<kernel> where nothing places it), and the
    share said by `summary` and every view; exit 0."""
    from tests.conftest import run_cli

    path = _rewritten("xf_input", tmp_path, edit)
    run = load_run(path, use_cache=False)
    assert device(run).height == device(run_of("xf_input")).height
    how = attribution_shares(run.attribution)
    if edit is _renamed_kernels:  # the schedule still places them (by position)
        assert 0 < how["schedule"] and how["unattributed"] < 0.05
    else:
        assert how["unattributed"] == 1.0
        assert device(run)["node_name"].str.starts_with("unattributed").all()
    out = run_cli(["summary", path, "--no-cache"]).output
    assert f"unattributed {how['unattributed'] * 100:.1f}%" in out
    view = run_cli(["scopes", path, "--no-cache"])
    assert "device time attributed to ops" in view.stderr


def test_sub_microsecond_ops_are_not_rounded() -> None:
    """TF2 CPU profiles (XSpace): per op type the ops view's time per step equals xprof's
    framework op stats (self time) within 2% or 2 us, to the ns: no execution rounded to
    a whole microsecond (and none of 0 counted as 1 us, tfprof's rule for RunMetadata).
    The text shows a sub-10 us time with its decimal."""
    from runlens.analyzer.analysis.nodestats import node_stats
    from runlens.analyzer.analysis.outside import outside_ops
    from runlens.analyzer.units import fmt_us
    from tests.xplane_run import fixture_file, xplane_run
    from tests.xprof_oracle import framework_op_stats

    for name in ("tf_function", "keras_fit"):
        path = fixture_file(name)
        run = xplane_run(path)
        ours = pl.concat([node_stats(run, s).filter(pl.col("executed")) for s in run.steps])
        # Work outside the steps (analysis.outside) is in no step: its own row, which
        # xprof's totals hold too.
        away = outside_ops(run).select("op_type", cpu_micros=pl.col("ns") / 1000)
        got = pl.concat([ours.select("op_type", "cpu_micros"), away]).group_by(
            "op_type").agg(us=pl.col("cpu_micros").sum())
        want = framework_op_stats(path).filter(pl.col("where") == "Host").group_by(
            op_type="type").agg(us=pl.col("self_time_ps").sum() / 1e6)
        both = want.join(got, on="op_type", suffix="_ours")
        assert both.height >= 8
        diff = (both["us"] - both["us_ours"]).abs()
        assert ((diff <= 0.02 * both["us"]) | (diff <= 2.0)).all(), both
        assert (diff <= 0.001 * both["us"] + 0.01).all()  # in fact equal to the ns
        small = both.filter(pl.col("us") < 10)["us_ours"]
        assert len(small) and any("." in fmt_us(v) for v in small.to_list())


# The scanned LM's layer components, by their name in an op's path (xprof's or ours,
# not folded): capture_flax.py's Block has ln1, attn, ln2, up, down.
COMPONENT = r"(?:^|/)layers/(attn|up|down|ln1|ln2)(?:/|$)"


def test_scanned_lm_in_command_buffers_as_xprof_reads_it_off() -> None:
    """flx_scan: nn.scan(nn.remat(Block)) with XLA's defaults. Each iteration of the scan's
    while loop launches the body's command buffer (27 kernels forward, 91 backward: cuBLAS
    gemms with their workspace memsets, CUDA's memcpy128/memcpy32_post copies of the
    dynamic slices): all of it is placed (xprof's hlo_stats places none), and each layer
    component's share of device time is within 15% of xprof's on flx_scan_nocb."""
    run = run_of("flx_scan")
    how = attribution_shares(run.attribution)
    assert 1.0 - how.get("unattributed", 0.0) >= 0.99, how
    assert hlo_op_stats(xplane("flx_scan"))["self_time_ps"].sum() == 0  # xprof: nothing

    def comp(name: pl.Expr) -> pl.Expr:
        return name.str.extract(COMPONENT, 1).fill_null("(other)")

    want = shares(hlo_op_stats(xplane("flx_scan_nocb")).group_by(
        scope=comp(pl.col("op_name"))).agg(ps=pl.col("self_time_ps").sum()))
    ours = shares(device(run).group_by(scope=comp(pl.col("node_name"))).agg(
        ps=pl.col("op_end_rel_ns").sum() * 1000))
    both = want.join(ours, on="scope", suffix="_ours").filter(pl.col("scope") != "(other)")
    assert both.height == 5
    assert ((both["share_ours"] - both["share"]).abs() <= 0.15 * both["share"]).all(), both


def test_a_whole_loop_in_one_command_buffer_is_placed_per_iteration() -> None:
    """XLA can run a while loop inside one command buffer (its while command: the body's
    kernels trip-count times in one launch); no capture here has one. Made from real
    events: flx_scan_nocb's kernels of one step's backward scan body (6 iterations, each
    kernel's `hlo_op` naming its instruction: the oracle) given to the attribution as one
    buffer launch (one correlation id, `hlo_op` the buffer). The body's span repeated per
    trip places 99% of them, 97.6% of their time on the instruction that ran it (the span
    once: 85% placed, 60% right)."""
    import numpy as np

    from runlens.analyzer.proto import xplane_pb2
    from runlens.analyzer.sources.xla_attribution import Events, attribute
    from runlens.analyzer.sources.xplane_hlo import read_programs
    from runlens.analyzer.sources.xplane_wire import read_planes

    path = xplane("flx_scan_nocb")
    meta = next(p for p in read_planes(path, False) if p.name == "/host:metadata")
    module = next(m for m in read_programs(meta.meta).modules.values() if "train" in m.name)
    launches = module.launches
    body = next(s for s, n in launches.trips.items() if n == 6 and s[1] - s[0] > 100)
    rows = []
    for plane in xplane_pb2.XSpace.FromString(path.read_bytes()).planes:
        if not plane.name.startswith("/device:GPU"):
            continue
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            for e in line.events:
                md = plane.event_metadata[e.metadata_id]
                inst = next((names.get(s.ref_value) for s in [*md.stats, *e.stats]
                             if names.get(s.metadata_id) == "hlo_op"), None)
                if inst in module.position and body[0] <= module.position[inst] < body[1]:
                    rows.append((line.timestamp_ns * 1000 + e.offset_ps, md.name, inst,
                                 e.duration_ps))
    rows.sort()
    step = rows[:len(rows) // 8]  # the first of 8 steps: 6 iterations of the body
    kernels = sorted({r[1] for r in step})
    n = len(step)
    ev = Events(kernel=np.array([kernels.index(r[1]) for r in step]), kernels=kernels,
                hlo_op=np.zeros(n, np.int64), hlo_ops=["command_buffer_0"],
                program=np.full(n, module.program), corr=np.full(n, 1),
                start=np.array([r[0] for r in step]))
    target, _, targets = attribute(ev, {module.program: module})
    right = np.array([t >= 0 and targets[t][1] == r[2] for t, r in zip(target, step,
                                                                         strict=True)])
    ps = np.array([r[3] for r in step])
    assert n > 500 and (target >= 0).mean() >= 0.99
    assert ps[right].sum() / ps.sum() >= 0.95
