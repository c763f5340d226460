"""analyze compare / baseline save on real captures (fixtures/compare: two separate
captures of a small MLP and one with dense2 made 4x wider, 20 steps each; and a 6-block
transformer with 10 traced steps a side: two same-config captures minutes apart and one
with block3's MLP 8x wider)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import polars as pl
import pytest

from runlens.analyzer.gate.compare import (
    Samples,
    compare,
    load_baseline,
    samples_from_run,
    save_baseline,
)
from runlens.analyzer.load import load_run
from tests.conftest import COMPARE, run_cli


@pytest.fixture(scope="module")
def samples() -> dict[str, Samples]:
    return {name: samples_from_run(load_run(COMPARE / name, use_cache=False), name)
            for name in ("base_a", "base_b", "slow_dense2")}


def _subset(s: Samples, keep) -> Samples:
    ids = sorted(s.samples["sample"].unique().to_list(), key=lambda x: int(x.split("/")[1]))
    chosen = [i for k, i in enumerate(ids) if keep(k)]
    return Samples(s.source, s.samples.filter(pl.col("sample").is_in(chosen)),
                   s.node_medians, s.scope_depth)


def _scaled(s: Samples, factor: float) -> Samples:
    """The same run on a machine `factor` times slower: every time scales alike."""
    return Samples(s.source, s.samples.with_columns(pl.col("value_us") * factor),
                   s.node_medians.with_columns(pl.col("median_us") * factor), s.scope_depth)


def test_same_config_captures_never_alarm(samples):
    a, b = samples["base_a"], samples["base_b"]
    pairs = [
        (a, b), (b, a),  # two separate captures, both directions
        (_subset(a, lambda k: k < 10), _subset(a, lambda k: k >= 10)),  # halves of a run
        (_subset(b, lambda k: k < 10), _subset(b, lambda k: k >= 10)),
        (_subset(a, lambda k: k % 2 == 0), _subset(a, lambda k: k % 2 == 1)),  # even / odd
        (_subset(b, lambda k: k % 2 == 1), _subset(b, lambda k: k % 2 == 0)),
    ]
    for base, new in pairs:
        result = compare(base, new)
        assert result.regressions.height == 0, result.regressions.select(
            "kind", "name", "norm_change_pct", "p_greater_adj").rows()


def test_a_run_against_itself_shows_no_change(samples):
    result = compare(samples["base_a"], samples["base_a"])
    assert result.factor == 1.0
    assert set(result.rows["verdict"].to_list()) <= {"unchanged", "below-floor"}
    assert (result.rows["change_pct"].drop_nulls() == 0).all()


def test_a_slower_layer_is_a_regression_named_first(samples):
    result = compare(samples["base_a"], samples["slow_dense2"])
    reg = result.regressions
    assert reg.height > 0
    first_scope = reg.filter(pl.col("kind") == "scope")["name"][0]
    assert "dense2" in first_scope.split("/")
    # the untouched layers' forward scopes are not called regressions
    assert not {"dense1", "dense3"} & set(reg["name"].to_list())
    cli = run_cli(["compare", COMPARE / "base_a", COMPARE / "slow_dense2", "--no-cache"],
                  expect_exit=1).output
    lines = [ln for ln in cli.splitlines() if ln.startswith("  scope")]
    assert "dense2" in lines[0].split()[1].rstrip(":").split("/")


def test_machine_wide_noise_is_neither_hidden_nor_reported(samples):
    # Every op 25% slower (a busy machine): no regression in any scope or op type.
    noisy = compare(samples["base_b"], _scaled(samples["base_a"], 1.25))
    assert noisy.factor == pytest.approx(1.25 * compare(samples["base_b"],
                                                        samples["base_a"]).factor)
    assert noisy.regressions.height == 0
    # A 4x layer on a 25% faster machine is still caught, and still named first.
    hidden = compare(samples["base_a"], _scaled(samples["slow_dense2"], 0.8))
    assert hidden.regressions.filter(pl.col("kind") == "scope")["name"][0].split("/")[-1] \
        == "dense2"
    # Without normalization the noisy machine would be called a regression.
    raw = compare(samples["base_b"], _scaled(samples["base_a"], 1.25), normalize=False)
    assert raw.regressions.height > 0


def test_too_few_steps_fall_back_to_the_floors_with_a_warning(samples):
    few = _subset(samples["slow_dense2"], lambda k: k < 2)
    result = compare(samples["base_a"], few)
    assert result.method.startswith("no test")
    assert any("fewer than 3 steps" in w for w in result.warnings)
    assert result.regressions.height > 0  # a 4x layer passes any floor


def test_samples_too_small_for_the_family_say_so_and_need_complete_separation(samples):
    # 4 vs 4 steps: the smallest exact p (1/70) cannot pass BH over the family; the
    # report says so, names the smallest p, and still calls the 4x layer (every new
    # step slower than every base step, and far above the floor).
    base = _subset(samples["base_a"], lambda k: 4 <= k < 8)
    new = _subset(samples["slow_dense2"], lambda k: 4 <= k < 8)
    result = compare(base, new)
    assert "complete separation" in result.method
    assert any("smallest exact p is 0.014" in w for w in result.warnings)
    names = result.regressions.filter(pl.col("kind") == "scope")["name"].to_list()
    assert names and "dense2" in names[0].split("/")


def test_baseline_file_compares_like_the_run(samples, tmp_path):
    path = tmp_path / "baseline.json"
    save_baseline(samples["base_a"], path)
    assert path.stat().st_size < 50_000
    loaded = load_baseline(path)
    direct = compare(samples["base_a"], samples["slow_dense2"]).rows
    via_file = compare(loaded, samples["slow_dense2"]).rows
    cols = ["kind", "name", "verdict"]
    assert via_file.select(cols).equals(direct.select(cols))
    run_cli(["baseline", "save", COMPARE / "base_a", "-o", tmp_path / "b.json", "--no-cache"])
    run_cli(["compare", tmp_path / "b.json", COMPARE / "base_b", "--no-cache"])
    run_cli(["compare", tmp_path / "b.json", COMPARE / "slow_dense2", "--no-cache"],
            expect_exit=1)


def test_report_formats(tmp_path):
    args = ["compare", COMPARE / "base_a", COMPARE / "slow_dense2", "--no-cache"]
    doc = json.loads(run_cli([*args, "--format", "json"], expect_exit=1).stdout)
    assert doc["schema"] == 2 and doc["regressions"] > 0 and doc["method"].startswith("exact")
    assert {"kind", "name", "verdict", "base_median_us", "new_median_us", "change_pct",
            "effect_pct", "effect_ci95_pct", "p_value", "p_adjustment"} <= set(doc["metrics"][0])
    md = run_cli([*args, "--format", "markdown"], expect_exit=1).stdout
    assert md.startswith("### runlens: ❌ regression") and "| 🔺 |" in md
    out = tmp_path / "junit.xml"
    run_cli([*args, "--format", "junit", "-o", out], expect_exit=1)
    suite = ET.parse(out).getroot()
    failures = suite.findall("testcase/failure")
    assert int(suite.get("failures")) == len(failures) == doc["regressions"]
    assert int(suite.get("tests")) == len(suite.findall("testcase")) == len(doc["metrics"])


@pytest.mark.parametrize("content, message", [
    ("{not json", "not a readable baseline"),
    ('{"format": "something else"}', "not a runlens baseline"),
    ('{"format": "runlens-baseline", "schema": 1, "samples": ["w/1"], "metrics": [{}]}',
     "invalid baseline: metrics[0].kind"),
])
def test_bad_baseline_files_exit_2(tmp_path, content, message):
    bad = tmp_path / "baseline.json"
    bad.write_text(content)
    out = run_cli(["compare", bad, COMPARE / "base_b", "--no-cache"], expect_exit=2).output
    assert message in out and len(out.strip().splitlines()) == 1


def test_missing_output_directory_exits_2():
    out = run_cli(["compare", COMPARE / "base_a", COMPARE / "base_b", "--no-cache",
                   "-o", "/nonexistent/dir/report.txt"], expect_exit=2).output
    assert "does not exist" in out


def test_text_report_headings_read_as_words():
    """Reversed, the slow_dense2 pair shows scopes that vanished: 'VANISHED', not
    'VANISHEDS'; improvements and vanished scopes do not fail the check."""
    out = run_cli(["compare", COMPARE / "slow_dense2", COMPARE / "base_a"]).stdout
    assert "\nVANISHED (" in out and "VANISHEDS" not in out
    assert "\nIMPROVEMENTS (" in out and "dense2/project" in out.split("VANISHED")[1]
