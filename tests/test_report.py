"""The HTML report pages: one source of truth with the text views, self-contained,
sections that say what the source lacks, a comparison page with regressions first.
(The page in a real browser: tests/test_report_browser.py.)"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import polars as pl
import pytest

from runlens.analyzer.gate.compare import compare, samples_from_run
from runlens.analyzer.load import load_run
from runlens.analyzer.report import compare_page
from runlens.analyzer.report.compare_data import metric_row
from runlens.analyzer.report.page import embed_json
from tests.conftest import COMPARE, FIXTURES, ROOT, run_cli

DATA_RE = re.compile(r'<script type="application/json" id="runlens-data">(.*?)</script>', re.S)


def page_data(html: str) -> dict:
    found = DATA_RE.findall(html)
    assert len(found) == 1
    return json.loads(found[0])


def build_report(run: Path, tmp_path: Path) -> str:
    out = tmp_path / f"{run.name}.html"
    run_cli(["report", run, "-o", out])
    return out.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", ["cnn", "rnn_while", "gpu_mnist"])
def test_embedded_data_equals_the_text_views(name, tmp_path):
    run = FIXTURES / name
    data = page_data(build_report(run, tmp_path))
    for view in ("ops", "scopes"):
        cli = json.loads(run_cli([view, run, "--format", "json"]).stdout)
        assert data[view] == cli, view
    code = run_cli(["code", run, "--format", "json"])
    if code.stdout:
        doc = json.loads(code.stdout)
        assert data["code"] == doc if doc["rows"] else data["code"]["missing"]
    else:  # the run lacks code traces: the command says it skipped, the page says why
        assert "code view skipped" in code.stderr and data["code"]["missing"]
    summary = json.loads(run_cli(["summary", run, "--format", "json"]).stdout)["summary"]
    assert data["glance"]["step_time_us"] == summary["step_time_us"]
    assert data["glance"]["steps"] == len(summary["steps"])
    assert [r["step"] for r in data["steps"]["rows"]] == [r["step"] for r in summary["per_step"]]
    findings = json.loads(run_cli(["advise", run, "--format", "json"]).stdout)["findings"]
    assert data["findings"] == findings


@pytest.mark.parametrize("name", ["cnn", "rnn_while"])
def test_op_type_drill_down_adds_up_to_the_op_view(name, tmp_path):
    data = page_data(build_report(FIXTURES / name, tmp_path))
    ops = {r["name"]: r["micros"] for r in data["ops"]["rows"]}
    drill = {t["name"]: sum(us for _, us in t["nodes"]) + t["rest"]
             for t in data["op_nodes"]["types"]}
    assert drill == {k: v for k, v in ops.items() if v > 0}
    for t in data["op_nodes"]["types"]:
        times = [us for _, us in t["nodes"]]
        assert times == sorted(times, reverse=True) and len(times) <= 25
        assert (t["rest"] > 0) == (t["rest_nodes"] > 0)


def test_critical_path_is_the_graph_commands(tmp_path):
    run = FIXTURES / "cnn"
    data = page_data(build_report(run, tmp_path))["critical_path"]
    cli = json.loads(run_cli(["graph", run, "--critical-path", "--format", "json"]).output)
    assert {k: v for k, v in data.items() if k != "ops_total"} == cli
    assert data["ops_total"] == len(cli["ops"]) > 0


def test_page_is_self_contained_and_small(tmp_path):
    html = build_report(FIXTURES / "cnn", tmp_path)
    assert len(html.encode()) < 5_000_000
    # Nothing that loads: no script/style/image/frame by reference, no CSS import or url().
    assert not re.search(r"<(script|link|img|iframe|source|embed)\b[^>]*\b(src|href)=", html, re.I)
    assert not re.search(r"@import|url\(\s*['\"]?(https?:)?//", html, re.I)
    assert "default-src 'none'" in html  # the CSP blocks any request a bug would make
    assert html.count("<script") == 3  # echarts, the data, report.js


def test_vendored_echarts_is_the_recorded_build():
    """analyzer/report/vendor/echarts.min.js is what build_echarts.py wrote (echarts.json)."""
    vendor = ROOT / "analyzer" / "report" / "vendor"
    manifest = json.loads((vendor / "echarts.json").read_text())
    data = (vendor / "echarts.min.js").read_bytes()
    assert len(data) == manifest["bytes"] < 800_000
    assert hashlib.sha256(data).hexdigest() == manifest["sha256"]
    assert f"Apache ECharts {manifest['echarts']}" in data[:200].decode()
    assert (vendor / "LICENSE-echarts").is_file() and (vendor / "LICENSE-zrender").is_file()


def test_embedded_json_cannot_end_its_script_element():
    text = embed_json({"name": "a</script><script>alert(1)</script><!--\u2028"})
    assert "<" not in text and "\u2028" not in text
    assert json.loads(text)["name"].startswith("a</script>")


def test_sections_without_data_say_so_in_one_line(tmp_path):
    html = build_report(FIXTURES / "gpu_mnist", tmp_path)  # a tf.timeline trace: no op log
    missing = re.findall(r'<section id="(\w+)"><h2>[^<]*</h2><p class="missing">([^<]*)</p>',
                         html)
    # and no dataflow graph: the critical path says it was skipped (not "0.0% of the step")
    assert dict(missing).keys() == {"code", "memory", "critical_path"}
    for _, line in missing:
        assert "\n" not in line and line.endswith(".")
    assert 'id="chart-code"' not in html and 'id="chart-memory"' not in html
    data = page_data(html)
    assert data["steps"]["rows"] and data["ops"]["rows"]


def test_steps_are_marked(tmp_path):
    """cnn's step 18 (2x the median) is the straggler the advisor names (RL109)."""
    data = page_data(build_report(FIXTURES / "cnn", tmp_path))
    outliers = [r["step"] for r in data["steps"]["rows"] if r["outlier"]]
    stragglers = [s["step"] for f in data["findings"] if f["code"] == "RL109"
                  for s in f["evidence"]["stragglers"]]
    assert outliers == stragglers == [18]


def test_report_bad_input_is_one_line(tmp_path):
    r = run_cli(["report", tmp_path / "nope", "-o", tmp_path / "r.html"], expect_exit=2)
    assert len(r.output.strip().splitlines()) == 1
    r = run_cli(["report", FIXTURES / "cnn", "-o", tmp_path / "no" / "r.html"], expect_exit=2)
    assert "does not exist" in r.output and not (tmp_path / "no").exists()


# ----------------------------------------------------------------------------- compare


def _samples(name: str):
    path = COMPARE / name
    return samples_from_run(load_run(path), str(path))


def test_compare_page_shows_regressions_first(tmp_path):
    out = tmp_path / "c.html"
    args = ["compare", COMPARE / "base_a", COMPARE / "slow_dense2", "--format", "html",
            "-o", out]
    run_cli(args, expect_exit=1)  # a regression: html fails the check like every format
    data = page_data(out.read_text(encoding="utf-8"))
    cli = json.loads(run_cli([*args[:3], "--format", "json"], expect_exit=1).stdout)
    moved = [m for m in cli["metrics"] if m["verdict"] in ("regression", "improvement",
                                                           "new", "vanished")]
    assert [(m["kind"], m["name"]) for m in data["moved"]] == \
        [(m["kind"], m["name"]) for m in moved]
    assert data["moved"][0]["verdict"] == "regression" and data["regressions"] == \
        cli["regressions"] > 0
    verdicts = [m["verdict"] for m in data["moved"]]
    assert verdicts == sorted(verdicts, key=["regression", "improvement", "new",
                                             "vanished"].index)
    assert data["scopes"][0]["verdict"] == "regression"
    assert "dense2" in {s["name"] for s in data["scopes"] if s["verdict"] == "regression"}
    base_steps = [s["value_us"] for s in _samples("base_a").samples.filter(
        (pl.col("kind") == "step") & (pl.col("name") == "step time")).sort("sample").to_dicts()]
    assert data["distributions"]["base"] == [round(v, 1) for v in base_steps]


def test_compare_adapter_uses_confidence_intervals_when_present():
    base, new = _samples("base_a"), _samples("slow_dense2")
    c = compare(base, new)
    row = c.rows.row(0, named=True)
    assert row["verdict"] == "regression"
    r = metric_row(row)
    # The change judged is compare.py's Hodges-Lehmann effect, with its interval.
    assert r["change_pct"] == round(row["effect_pct"], 2)
    assert r["ci_pct"] == [round(row["effect_low_pct"], 2), round(row["effect_high_pct"], 2)]
    assert r["ci_pct"][0] <= r["change_pct"] <= r["ci_pct"][1]
    html = compare_page(c, base, new)
    assert f"[{r['ci_pct'][0]:+.1f}%, {r['ci_pct'][1]:+.1f}%]" in html
    # Rows without an interval (e.g. a metric new in this run) fall back to medians.
    bare = metric_row({**row, "effect_pct": None, "effect_low_pct": None,
                       "effect_high_pct": None})
    assert bare["ci_pct"] is None and bare["change_pct"] == round(row["norm_change_pct"], 2)


def test_compare_page_p_values_and_left_out_steps_read_as_the_text_report(tmp_path):
    """Tiny p-values keep 3 significant digits (they were rounded to 6 decimals: "0"), and
    a step left out of one of several base runs is named by its run dir, not by the
    internal sample id ("0#worker:0/7")."""
    out = tmp_path / "c.html"
    args = ["compare", COMPARE / "tf_base_b", COMPARE / "tf_base_c", COMPARE / "tf_wide_block3"]
    run_cli([*args, "--format", "html", "-o", out], expect_exit=1)
    data = page_data(out.read_text(encoding="utf-8"))
    cli = json.loads(run_cli([*args, "--format", "json"], expect_exit=1).stdout)
    by_name = {m["name"]: m["p_value"] for m in cli["metrics"]}
    regressions = [m for m in data["moved"] if m["verdict"] == "regression"]
    assert regressions and all(0 < m["p_value"] < 1e-3 for m in regressions)
    assert all(m["p_value"] == by_name[m["name"]] for m in regressions)
    left_out = [s for steps in data["excluded"].values() for s in steps]
    assert left_out and all("#" not in s for s in left_out), left_out
    assert all(s.split()[0] in ("tf_base_b", "tf_base_c", "tf_wide_block3") for s in left_out)
