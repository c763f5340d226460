"""The work of HLO instructions (analyzer/sources/hlo_work.py) on real GPU profiles
(JAX on an H200, ../shared/data/gpu-jax: a ResNet-style CNN, its SOURCES.md and
capture_jax.py): float ops and bytes per instruction against xprof's (its HLO cost
analysis), and against the model's own arithmetic; the work diff of `compare` from them
(issue 24 point 1: "XSpace: HLO instructions' shapes and op names")."""

from __future__ import annotations

from itertools import product
from math import prod
from pathlib import Path

import polars as pl
import pytest

from runlens.analyzer.gate.compare import compare, samples_from_run
from runlens.analyzer.gate.workdiff import work_note
from runlens.analyzer.load import load_run
from runlens.analyzer.proto import xplane_pb2
from runlens.analyzer.sources.xplane_hlo import read_programs
from tests.conftest import ROOT, run_cli

JAX = ROOT.parent / "shared" / "data" / "gpu-jax"
pytestmark = pytest.mark.skipif(not (JAX / "cnn_a").is_dir(),
                                reason="../shared/data/gpu-jax not present")


def _xplane(name: str) -> Path:
    return next((JAX / name).glob("plugins/profile/*/*.xplane.pb"))


def _module_work(name: str):  # type: ignore[no-untyped-def]
    space = xplane_pb2.XSpace.FromString(_xplane(name).read_bytes())
    meta = next(p for p in space.planes if p.name == "/host:metadata")
    programs = read_programs(meta)
    return next(w for w in programs.work.values() if "cudnn-conv.20" in w.by_name)


def _xla_miscount(inst) -> float:  # type: ignore[no-untyped-def]
    """What XLA's GpuHloCostAnalysis counts of a backward convolution, as a share of its
    forward's multiply-adds: it takes operand 0 as the input and the result as the output
    whatever the direction. Backward input (operand 0 the output gradient): the positions
    of a stride-s window over the gradient, 1/s^2 of them in 2-d. Backward filter (result
    the filter gradient, OHWI): output features read off the filter's input-feature
    dimension, in/out of them."""
    d = inst.convolution_dimension_numbers
    if inst.custom_call_target == "__cudnn$convBackwardInput":
        return 1 / prod(w.stride for w in inst.window.dimensions)
    if inst.custom_call_target == "__cudnn$convBackwardFilter":
        dims = inst.shape.tuple_shapes[0].dimensions
        return dims[d.kernel_input_feature_dimension] / dims[d.kernel_output_feature_dimension]
    return 1.0


def test_convolutions_and_their_bytes_are_xprofs():
    """Per cuDNN convolution (forward, backward input, backward filter): bytes read +
    written equal xprof's per kernel occurrence (XLA's HloCostAnalysis of the instruction;
    xprof adds it once per kernel, so a convolution that launched 3 kernels counts 3x
    there: runlens counts an instruction once per run), and so do float ops for all 31 of
    the 38 where XLA counts what the convolution computes. Where XLA does not (a strided
    backward input, a backward filter whose input and output features differ: 7 of 38,
    _xla_miscount) runlens counts the forward's multiply-adds, proved by the forward
    itself: `cudnn-conv.25` and `cudnn-conv-bw-input.13` are stage3's 1x1 stride-2 `down`
    convolution and its backward input, 2*128*8*8*256*128 flops each (xprof: 1/4 of that
    for the backward)."""
    xprof_oracle = pytest.importorskip("tests.xprof_oracle")
    pytest.importorskip("xprof")
    work = _module_work("cnn_a_nocb")
    xprof = xprof_oracle.hlo_op_work(_xplane("cnn_a_nocb")).filter(
        pl.col("hlo_op").str.starts_with("cudnn-conv"))
    assert xprof.height == 38  # every convolution of the step: 9 + 5 + 11 + 13
    exact = 0
    for name, occ, flops, accessed in xprof.iter_rows():
        ours, entry = work.named(name)
        assert ours is not None and entry
        assert ours.in_bytes + ours.out_bytes == pytest.approx(accessed / occ, rel=1e-6), name
        miscount = _xla_miscount(work.by_name[name][1])
        assert ours.float_ops * miscount == pytest.approx(flops / occ, rel=1e-12), name
        exact += miscount == 1.0
    assert exact == 31
    forward, backward = work.named("cudnn-conv.25")[0], work.named("cudnn-conv-bw-input.13")[0]
    assert backward.float_ops == forward.float_ops == 2 * 128 * 8 * 8 * 256 * 128


def test_a_triton_gemm_counts_its_dot():
    """The head's dense layer (x[128, 256] @ w[256, 10]) runs as a triton gemm fusion,
    split 8 ways along the contraction: its dot's 2*128*10*256 flops. xprof's count adds
    the fusion's elementwise ops (1 flop per element); runlens counts dots and
    convolutions only, so it is below xprof's there."""
    xprof_oracle = pytest.importorskip("tests.xprof_oracle")
    pytest.importorskip("xprof")
    work = _module_work("cnn_a_nocb")
    ours = work.named("gemm_fusion_dot.1")[0]
    assert ours.float_ops == 2 * 128 * 10 * 256
    xprof = xprof_oracle.hlo_op_work(_xplane("cnn_a_nocb")).filter(
        pl.col("hlo_op") == "gemm_fusion_dot.1").row(0, named=True)
    assert ours.float_ops < xprof["flops"] / xprof["occurrences"] < 1.2 * ours.float_ops


def _stage2_flops(width: int, cin: int = 64) -> int:
    """stage2's float ops per step, by capture_jax.py's model: a 1x1 stride-2 `down`
    convolution cin -> width on 16x16 outputs and two 3x3 SAME convolutions width ->
    width (46 of 48 kernel-output pairs per dimension read input, not padding), batch
    128; forward, backward input and backward filter each do the forward's."""
    down = 2 * 128 * 16 * 16 * width * cin
    conv = 2 * 128 * width * width * 46 * 46
    return 3 * (down + 2 * conv)


@pytest.fixture(scope="module")
def wide():
    base = samples_from_run(load_run(JAX / "cnn_a", use_cache=False), "cnn_a")
    new = samples_from_run(load_run(JAX / "cnn_wide2", use_cache=False), "cnn_wide2")
    return compare(base, new)


def test_the_wider_stage_does_its_models_work(wide):
    """stage2 128 -> 256 channels: its float ops per step x3.9 (the 3x3 convolutions x4,
    the `down` x2), its outputs x2; the work diff of compare says so."""
    row = wide.rows.filter((pl.col("kind") == "scope") & (pl.col("name") == "stage2")
                           ).row(0, named=True)
    assert row["float_ops_base"] == _stage2_flops(128)
    assert row["float_ops_new"] == _stage2_flops(256)
    assert row["verdict"] == "regression" and row["work_changed"]
    assert row["resized_ratio"] == pytest.approx(2.0)
    note = work_note(row)
    # 9 named nodes, and 3 that XLA made without an op name, whose scope is inferred
    # from their neighbours (sources/hlo_infer.py): `block/transpose (inferred)` and
    # `down/transpose (inferred)` (layout transposes of stage2's weights and activations,
    # x4 and x2 as the widths) and `block/broadcast (inferred)` (x2).
    assert "float ops x3.9" in note and "12 node(s)' outputs x2" in note, note
    out = run_cli(["compare", JAX / "cnn_a", JAX / "cnn_wide2", "--no-cache"],
                  expect_exit=1).stdout
    assert "float ops x3.9 (54,861,496,320 -> 216,224,759,808)" in out


@pytest.mark.parametrize("new", ["cnn_b", "cnn_c"])
def test_same_config_processes_do_the_same_work(new):
    out = run_cli(["compare", JAX / "cnn_a", JAX / new, "--no-cache"]).stdout
    assert "work of the step: work unchanged" in out and "float ops" in out
    assert "result: OK" in out


def test_work_per_step_is_per_run_not_per_kernel():
    """The stem's forward convolution launches 3 kernels per run: its float ops per step
    are one run's, 2*128*32*3*62*62*... as XLA counts (each of 8 steps)."""
    run = load_run(JAX / "cnn_a", use_cache=False)
    w = run.hlo_work.filter(pl.col("name") == "jit(train_step)/jvp(stem)/conv_general_dilated")
    assert w["execs"][0] == 3 * 8
    per_run = 2 * 128 * 32 * 3 * (3 * 64 - 2) ** 2
    assert w["float_ops"][0] == 8 * per_run


def test_cublas_matmuls_are_xprofs():
    """The transformer's matrix products run as cuBLAS-LT custom calls (dimension numbers in
    their backend config): float ops and bytes of all 69 equal xprof's per occurrence.
    XLA's triton gemm fusions: runlens counts their dot, xprof adds their elementwise ops
    (up to 3% more on these)."""
    xprof_oracle = pytest.importorskip("tests.xprof_oracle")
    pytest.importorskip("xprof")
    space = xplane_pb2.XSpace.FromString(_xplane("xf_a_nocb").read_bytes())
    meta = next(p for p in space.planes if p.name == "/host:metadata")
    work = max(read_programs(meta).work.values(), key=lambda w: len(w.by_name))
    xprof = xprof_oracle.hlo_op_work(_xplane("xf_a_nocb")).filter(pl.col("flops") > 0)
    matmuls = fusions = 0
    for name, occ, flops, accessed in xprof.iter_rows():
        ours = work.named(name)[0]
        inst = work.by_name[name][1]
        if inst.custom_call_target == "__cublas$lt$matmul":
            matmuls += 1
            assert ours.float_ops == flops / occ, name
            assert ours.in_bytes + ours.out_bytes == pytest.approx(accessed / occ, rel=1e-9)
        elif name.startswith("gemm_fusion"):
            fusions += 1
            assert 0.97 * flops / occ <= ours.float_ops <= flops / occ, name
    assert matmuls == 69 and fusions > 0


def test_valid_positions_are_xlas_loop():
    """The closed form of the (kernel, output) pairs that read input equals XLA's loop
    (HloCostAnalysis::GetConvolutionFlops) over strides, paddings and dilations."""
    from runlens.analyzer.proto import xla_data_pb2
    from runlens.analyzer.sources.hlo_work import _valid_positions

    def xla(w, kernel: int, output: int, base: int) -> int:  # type: ignore[no-untyped-def]
        count = 0
        for k in range(kernel):
            for o in range(output):
                undilated = o * w.stride - w.padding_low + k * w.window_dilation
                at = undilated // w.base_dilation
                if undilated == at * w.base_dilation and 0 <= at < base:
                    count += 1
        return count

    for stride, pad, wdil, bdil in product((1, 2, 3), (-1, 0, 1, 2), (1, 2), (1, 2)):
        w = xla_data_pb2.WindowDimension(stride=stride, padding_low=pad,
                                         window_dilation=wdil, base_dilation=bdil)
        for kernel, output, base in ((1, 8, 16), (3, 16, 16), (3, 7, 5), (5, 3, 9)):
            assert _valid_positions(w, kernel, output, base) == xla(w, kernel, output, base)
