"""The tfprof ProfileProto source against tfprof itself.

1. The committed profile (fixtures/gen_sources.py: a Profiler fed 4 steps, serialized, and
   its op, scope and code views printed at the same time into tfprof_views.json): our
   views of the file equal tfprof's, without TensorFlow.
2. Live (needs TensorFlow): for each captured fixture, tfprof's Profiler of the run dir
   (tests/tfprof_oracle.py) is serialized; our views of that file equal the Profiler's
   own op, scope and code views, with the option sets of tests/test_parity.py.
"""

from __future__ import annotations

import importlib.util
import json
import shutil

import polars as pl
import pytest

from runlens.analyzer.analysis.views import ViewOptions, code_view, op_view, scope_view
from runlens.analyzer.load import load_run
from runlens.analyzer.sources import detect
from tests.conftest import CAPTURED, FIXTURES, ROOT, run_cli

PROFILE = ROOT / "fixtures" / "sources" / "tfprof"
METRICS = {
    "micros": "exec_micros", "cpu_micros": "cpu_exec_micros",
    "accelerator_micros": "accelerator_exec_micros", "requested_bytes": "requested_bytes",
    "peak_bytes": "peak_bytes", "residual_bytes": "residual_bytes",
    "output_bytes": "output_bytes", "float_ops": "float_ops", "params": "parameters",
}


def _ours(rows: pl.DataFrame, name: str = "name") -> dict[str, dict[str, int]]:
    return {r[name]: {theirs: r[ours] for ours, theirs in METRICS.items()}
            for r in rows.iter_rows(named=True)}


def _theirs(view: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {name: {k: v[k] for k in METRICS.values()} for name, v in view.items()}


def test_committed_profile_views_equal_tfprofs_printed_at_capture():
    assert detect(PROFILE).kind == "tfprof"
    assert detect(PROFILE / "profile_4").kind == "tfprof"
    expected = json.loads((PROFILE / "tfprof_views.json").read_text())
    run = load_run(PROFILE, use_cache=False)
    assert run.steps == [1, 2, 3, 4]
    assert _ours(op_view(run, ViewOptions.tfprof()).rows) == _theirs(expected["op"])
    assert _ours(scope_view(run, ViewOptions.tfprof()).rows) == _theirs(expected["scope"])
    # tfprof's code view is a tree keyed by frame; ours names rows by frame too.
    code = code_view(run, ViewOptions.tfprof()).rows
    assert _ours(code) == _theirs(expected["code"])
    assert code.height > 10
    assert "code" not in run.lacks and "memory" in run.lacks


def test_cli_on_a_profile_and_bad_profiles(tmp_path):
    for kind in ("ops", "scopes", "code", "graph"):
        expect = {"ops": "MatMul", "code": "gen_sources.py"}.get(kind, "dense1")
        assert expect in run_cli([kind, PROFILE, "--no-cache"]).output
    advice = run_cli(["advise", PROFILE, "--no-cache"]).output
    assert "skipped RL110 memory-peak" in advice
    bad = tmp_path / "profile_9"
    bad.write_bytes(b"\x0a\x03abc")
    result = run_cli(["summary", "--source", "tfprof", bad, "--no-cache"], expect_exit=2)
    assert result.output.count("\n") == 1
    assert "profile_9: not a tfprof ProfileProto" in result.output
    folder = tmp_path / "dumps"
    folder.mkdir()
    shutil.copy(PROFILE / "profile_4", folder / "profile_2")
    shutil.copy(PROFILE / "profile_4", folder / "profile_4")
    (folder / "profile_4").write_bytes((PROFILE / "profile_4").read_bytes())
    assert "steps      4 (1-4)" in run_cli(["summary", folder, "--no-cache"]).output


# ----------------------------------------------------------------------------- live oracle

HAS_TF = importlib.util.find_spec("tensorflow") is not None


@pytest.mark.skipif(not HAS_TF, reason="the live oracle needs TensorFlow (dev extra)")
@pytest.mark.parametrize("name", CAPTURED)
def test_views_of_a_serialized_profile_equal_the_profilers_own(name, tmp_path):
    from tests import test_parity as parity
    from tests import tfprof_oracle as oracle

    run_dir = FIXTURES / name
    prof = oracle.profiler(run_dir)
    target = tmp_path / "profile_1"
    target.write_bytes(prof.serialize_to_string())
    run = load_run(target, use_cache=False)
    steps = run.steps
    for kw in [*parity.SCOPE_OPTION_SETS, {"step": steps[len(steps) // 2]}]:
        parity._check_scopes(run_dir, run, kw)
    for kw in [*parity.OP_OPTION_SETS, {"step": steps[-1]}]:
        parity._check_ops(run_dir, run, kw)
    for kw in parity.CODE_OPTION_SETS:
        parity._check_code(run_dir, run, kw)


@pytest.mark.skipif(not HAS_TF, reason="the live oracle needs TensorFlow (dev extra)")
@pytest.mark.parametrize("name", ["gpu_kittibox", "gpu_mnist"])
def test_gpu_profile_keeps_tfprofs_accelerator_and_cpu_time(name, tmp_path):
    """Real GPU traces: tfprof's profile keeps /stream:all (accelerator) and op-lane (cpu)
    times; per node they equal tfprof's scope view of the same Profiler."""
    from runlens.analyzer.analysis.nodestats import node_stats
    from tests import tfprof_oracle as oracle

    prof = oracle.profiler(FIXTURES / name, graph=False)
    target = tmp_path / "profile_5"
    target.write_bytes(prof.serialize_to_string())
    rows = oracle.time_rows(prof.profile_name_scope(oracle.options()))
    ours = node_stats(load_run(target, use_cache=False))
    assert ours["accelerator_micros"].sum() > 0
    joined = ours.join(pl.DataFrame(rows), on="name", how="inner")
    assert joined.height == ours.height
    for m in ("micros", "cpu_micros", "accelerator_micros", "occurrence"):
        assert (joined[m] == joined[f"t_{m}"]).all(), m
