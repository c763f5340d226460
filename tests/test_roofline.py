"""RL115 roofline on real GPU profiles (JAX on an H200, ../shared/data/gpu-jax; its
SOURCES.md): the device's peaks as xprof computes them, each op's achieved rates as xprof's
roofline tool measures them where both count the same work, a finding on the CNN and none
where the profile gives no HLO work (a CPU run, a TF2 GPU profile)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import polars as pl
import pytest

from runlens.analyzer.analysis.stepselect import StepChoice
from runlens.analyzer.load import load_run
from runlens.checkers import run_checks
from runlens.checkers.base import Analysis
from runlens.checkers.roofline import op_work, peaks
from tests.conftest import ROOT

JAX = ROOT.parent / "shared" / "data" / "gpu-jax"
TF2_GPU = ROOT.parent / "shared" / "data" / "xplane" / \
    "tensorflow__profiler__GPU-multi-worker__34.83.195.179_6003.xplane.pb"
pytestmark = pytest.mark.skipif(not (JAX / "cnn_a").is_dir(),
                                reason="../shared/data/gpu-jax not present")


def _roofline_tool(name: str) -> tuple[dict, pl.DataFrame]:
    """xprof's roofline_model tool on a copy of the profile: its device peaks and the
    per-HLO-op rows of its "Total" step."""
    from xprof.convert import raw_to_tool_data

    path = next((JAX / name).glob("plugins/profile/*/*.xplane.pb"))
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        shutil.copy(path, copy)
        out = raw_to_tool_data.xspace_to_tool_data([str(copy)], "roofline_model", {})
    table = json.loads(out[0] if isinstance(out, tuple) else out)[0]
    cols = [c["id"] for c in table["cols"]]
    rows = [{k: (c or {}).get("v") for k, c in zip(cols, r["c"], strict=True)}
            for r in table["rows"]]
    frame = pl.DataFrame(rows, infer_schema_length=None).filter(pl.col("step") == "Total")
    return table["p"], frame.unique("operation")


def test_peaks_are_xprofs():
    """Peak FLOP/s: SMs x clock x xprof's float ops per SM per cycle for compute
    capability 9.0 (16-bit tensor cores, its largest rate); bandwidth as the plane says;
    both equal xprof's roofline tool's (its bandwidth in GiB/s)."""
    pytest.importorskip("xprof")
    run = load_run(JAX / "cnn_a_nocb")
    f = run.device_facts.row(0, named=True)
    assert (f["name"], f["clock_khz"], f["cores"], f["compute_cap_major"]) == \
        ("NVIDIA H200", 1980000, 132, 9)
    peak, tf32, fp32, entry = peaks(9, 0, f["clock_khz"], f["cores"])
    assert (peak, tf32, fp32, entry) == (4096 * 1.98e9 * 132, 2048 * 1.98e9 * 132,
                                         256 * 1.98e9 * 132, "9.0")
    p, _ = _roofline_tool("cnn_a_nocb")
    assert peak / 1e9 == pytest.approx(float(p["peak_flop_rate"]), rel=1e-5)
    assert f["memory_bandwidth"] / 2**30 == pytest.approx(float(p["peak_hbm_bw"]), rel=1e-5)
    assert peaks(10, 0, 1, 1) is None  # xprof: "too old to support" above its table


def test_rates_are_xprofs_where_both_count_the_same_work():
    """Framework ops run as one HLO instruction of one kernel per run (elementwise and
    reduction fusions: xprof counts their work once per run too): runlens's bytes/s
    equal xprof's roofline "Memory BW" within 1% (over all steps; xprof's GiB/s)."""
    pytest.importorskip("xprof")
    from tests.xprof_oracle import hlo_op_stats

    path = next((JAX / "cnn_a_nocb").glob("plugins/profile/*/*.xplane.pb"))
    stats = hlo_op_stats(path)
    single = (stats.group_by("op_name").agg(n=pl.len(), hlo_op=pl.col("hlo_op").first(),
                                          occurrences=pl.col("occurrences").first())
              .filter((pl.col("n") == 1) & (pl.col("occurrences") == 8)))
    run = load_run(JAX / "cnn_a_nocb")
    ours = op_work(Analysis(run, StepChoice(include_warmup=True)),
                   fold=False)
    _, xprof = _roofline_tool("cnn_a_nocb")
    both = (ours.join(single, left_on="node_name", right_on="op_name")
            .join(xprof, left_on="hlo_op", right_on="operation")
            .filter(pl.col("category").str.contains("fusion") & (pl.col("ns") > 20_000)))
    assert both.height >= 10
    rate = both["bytes"] / (both["ns"] / 1e9) / 2**30
    assert ((rate / both["measured_memory_bw"]) - 1).abs().max() < 0.01


def test_fires_on_the_cnn_naming_memory_bound_ops():
    finding = run_checks(load_run(JAX / "cnn_a"), select=["RL115"])[0]
    ops = pl.DataFrame(finding.evidence["ops"])
    first = ops.row(0, named=True)
    assert first["op"] == "stage0/block/select_n (backward)"
    assert first["kind"] == "memory-bound" and first["bandwidth_share"] > 0.5
    assert (ops["kind"] == "far below both roofs").any()
    assert 0.10 <= finding.impact < 0.25 and "memory roof" in finding.message


def test_silent_without_hlo_work():
    """A JAX CPU run (no GPU plane) and a TF2 GPU profile (no HLO): no finding."""
    cpu = load_run(ROOT / "fixtures" / "xplane" / "jax_train")
    assert not cpu.device_facts.height
    assert not run_checks(cpu, select=["RL115"])
    if TF2_GPU.is_file():
        tf2 = load_run(TF2_GPU)
        assert tf2.device_facts.height and not tf2.hlo_work.height
        assert not run_checks(tf2, select=["RL115"])


def test_matmul_flop_rates_are_xprofs():
    """The transformer's matrix products: framework ops whose HLO ops are cuBLAS-LT
    matmuls of one kernel per run (their float ops equal xprof's, tests/test_hlo_work.py):
    runlens's FLOP/s and bytes/s equal those of xprof's roofline rows ("Normalized FLOP
    Rate", "Memory BW" x time, summed over the op's matmuls) within 1%."""
    pytest.importorskip("xprof")
    from tests.xprof_oracle import hlo_op_stats

    path = next((JAX / "xf_a_nocb").glob("plugins/profile/*/*.xplane.pb"))
    _, xprof = _roofline_tool("xf_a_nocb")
    rows = (hlo_op_stats(path).join(xprof, left_on="hlo_op", right_on="operation")
            .with_columns(us=pl.col("total_time"), matmul=pl.col("category") == "custom-call"))
    ops = (rows.group_by("op_name").agg(
        all_matmuls=(pl.col("matmul") & (pl.col("occurrences_right") == 8)).all(),
        us=pl.col("us").sum(), gflop=(pl.col("measured_flop_rate") * pl.col("us")).sum() / 1e6,
        gib=(pl.col("measured_memory_bw") * pl.col("us")).sum() / 1e6)
        .filter(pl.col("all_matmuls")))
    run = load_run(JAX / "xf_a_nocb")
    ours = op_work(Analysis(run, StepChoice(include_warmup=True)), fold=False)
    both = ours.join(ops, left_on="node_name", right_on="op_name")
    assert both.height >= 10
    seconds = both["ns"] / 1e9
    xprof_s = both["us"] / 1e6
    assert ((both["flops"] / seconds) / (both["gflop"] * 1e9 / xprof_s) - 1).abs().max() < 0.01
    assert ((both["bytes"] / seconds) / (both["gib"] * 2**30 / xprof_s) - 1).abs().max() < 0.01
