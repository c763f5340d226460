"""The report pages in a real browser (headless Debian chromium, tests/report_browser.py):
no script error or console warning, no request but the page itself, every chart section
drawn on a canvas that is not blank, and a screenshot that is not blank.

.ci/run installs chromium when it is missing; without it this test skips, except in CI
(CI=true), where it fails.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT, run_cli
from tests.report_browser import chromium, open_page

RUN_SECTIONS = ["steps", "ops", "scopes", "code", "critical_path", "memory"]
RUN_CHARTS = ["steps", "ops", "op_nodes", "scopes", "code", "critical_path", "memory"]
MIN_VARIANCE = 50.0  # grey-level variance of a chart's canvas; an empty canvas is 0
MIN_STDEV = 5.0  # of the screenshot's grey levels; a blank page is 0


def _need_browser() -> None:
    why = None
    if importlib.util.find_spec("playwright") is None:
        why = "playwright (dev extra) is not installed"
    elif chromium() is None:
        why = "chromium is not installed (apt-get install chromium; .ci/run does)"
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the browser test must run in CI: {why}")
        pytest.skip(why)


def _check(html: Path, charts: list[str], sections: list[str]) -> None:
    page = open_page(html)
    assert page.errors == []
    assert page.requests and all(u.startswith("file://") for u in page.requests), page.requests
    assert page.sections == sections
    drawn = {c["id"].removeprefix("chart-"): c for c in page.charts}
    assert sorted(drawn) == sorted(charts)
    for key, c in drawn.items():
        assert c["drawn"] and (c["canvas"] or c["svg"]), key
        assert c["variance"] > MIN_VARIANCE, (key, c)
        assert c["height"] >= 120, (key, c)
    assert page.screenshot_stdev > MIN_STDEV


def test_run_report_in_chromium(tmp_path):
    _need_browser()
    out = tmp_path / "cnn.html"
    run_cli(["report", FIXTURES / "cnn", "-o", out])
    _check(out, RUN_CHARTS, ["glance", *RUN_SECTIONS, "findings"])


def test_run_report_without_code_or_memory_in_chromium(tmp_path):
    _need_browser()
    out = tmp_path / "gpu.html"
    run_cli(["report", FIXTURES / "gpu_mnist", "-o", out])
    # no graph either: the critical path says it was skipped (no one-op 0.0% chart)
    _check(out, ["steps", "ops", "op_nodes", "scopes"],
           ["glance", *RUN_SECTIONS, "findings"])


def test_compare_page_in_chromium(tmp_path):
    _need_browser()
    out = tmp_path / "compare.html"
    compare = ROOT / "fixtures" / "compare"
    run_cli(["compare", compare / "base_a", compare / "slow_dense2", "--format", "html",
             "-o", out], expect_exit=1)
    _check(out, ["distributions", "scopes_moved"], ["distributions", "moved", "scopes_moved"])
