"""Our view defaults that differ from tfprof (docs/views.md): kernels, zero rows hidden,
--max-depth from the first visible level, user code first; and --tfprof undoing them."""

from __future__ import annotations

import json

import polars as pl
import pytest

from runlens.analyzer.analysis.views import (
    ALL_METRICS,
    VIEWS,
    ViewOptions,
    code_view,
    op_view,
    scope_view,
)
from runlens.analyzer.load import load_run
from runlens.analyzer.units import fmt_bytes, fmt_count, fmt_number, fmt_us
from tests.conftest import FIXTURES, run_cli


def _all_zero(rows: pl.DataFrame) -> pl.DataFrame:
    return rows.filter(pl.all_horizontal([pl.col(m) == 0 for m in ALL_METRICS]))


@pytest.mark.parametrize("kind", ["ops", "scopes", "graph", "code"])
def test_rows_of_all_zeros_are_hidden_unless_asked(kind):
    run = load_run(FIXTURES / "mlp")
    shown = VIEWS[kind](run, ViewOptions()).rows
    everything = VIEWS[kind](run, ViewOptions(zero_rows=True)).rows
    assert shown.height and _all_zero(shown).height == 0
    if kind in ("ops", "graph", "scopes"):  # never-run Scaffold/save ops have nothing
        assert _all_zero(everything).height > 0
    assert VIEWS[kind](run, ViewOptions()).root == VIEWS[kind](
        run, ViewOptions(zero_rows=True)).root


def test_max_depth_counts_from_the_first_visible_level():
    run = load_run(FIXTURES / "cnn")
    top = scope_view(run, ViewOptions(max_depth=1)).rows
    assert top.height and (top["depth"] == 1).all() and top["parent"].is_null().all()
    assert scope_view(run, ViewOptions.tfprof(max_depth=1)).rows.height == 0  # tfprof
    assert scope_view(run, ViewOptions.tfprof(max_depth=2)).rows["name"].to_list() == \
        scope_view(run, ViewOptions(max_depth=1, zero_rows=True)).rows["name"].to_list()
    assert op_view(run, ViewOptions(max_depth=3)).rows.height == 3
    assert op_view(run, ViewOptions.tfprof(max_depth=3)).rows.height == 4  # tfprof: n + 1


def test_code_view_shows_user_frames_with_the_time_tfprof_gives_library_frames():
    run = load_run(FIXTURES / "fused_cnn")
    ours = code_view(run, ViewOptions()).rows
    theirs = code_view(run, ViewOptions(library_frames=True)).rows
    library = ("traceback_utils.py", "dispatch.py", "op_def_library.py", "ops.py")
    assert not ours.filter(pl.col("name").str.contains("|".join(library))).height
    assert theirs.filter(pl.col("name").str.contains("op_def_library.py")).height
    assert ours["name"].str.starts_with("generate.py:").all()
    # The same total; with library frames the user's lines hold none of it themselves.
    assert code_view(run, ViewOptions()).root == code_view(
        run, ViewOptions(library_frames=True)).root
    total = code_view(run, ViewOptions()).root["micros"]
    lib_self = theirs.filter(pl.col("name").str.starts_with("generate.py:"))["self_micros"]
    assert ours["self_micros"].sum() == total > 0 and lib_self.sum() == 0
    # Gradients sit under the forward line that created the op (" (gradient)").
    conv_line = "generate.py:199:gen_fused_cnn"  # h = tf.nn.conv2d(...)
    grad = ours.filter(pl.col("name") == f"{conv_line} (gradient)")
    assert grad.height == 1 and grad["self_micros"][0] > 0


def test_the_critical_path_and_the_graph_view_name_the_fused_kernel():
    doc = json.loads(run_cli(["graph", FIXTURES / "fused_cnn", "--critical-path",
                              "--format", "json"]).output)
    fused = [op for op in doc["ops"] if op["name"] == "conv1/Relu"]
    assert fused and fused[0]["kernel"] == "_FusedConv2D (Conv2D+BiasAdd+Relu)"
    assert fused[0]["op_type"] == "Relu"
    text = run_cli(["graph", FIXTURES / "fused_cnn"]).output
    assert "conv1/Relu [_FusedConv2D: Conv2D+BiasAdd+Relu]" in text
    tfprof = run_cli(["ops", FIXTURES / "fused_cnn", "--tfprof"]).output
    assert "\nRelu " in tfprof and "_FusedConv2D" not in tfprof


def test_text_numbers_are_in_human_units_never_scientific():
    assert [fmt_us(4352571), fmt_us(1849000.0), fmt_us(512)] == ["4.35s", "1.85s", "512us"]
    assert fmt_bytes(1310720) == "1.31MB" and fmt_count(2_500_000) == "2.50M"
    assert [fmt_number(x) for x in (0.0004, 12.345, 0.5823, 7.0)] == [
        "0.0004", "12.35", "0.5823", "7"]
    out = run_cli(["advise", FIXTURES / "gpu_kittibox"]).output
    assert "median step 4.35s" in out and "busy: 1.85s" in out  # a time key without its unit
    assert not any(ch.isdigit() and "e+" in line for line in out.splitlines() for ch in line)
