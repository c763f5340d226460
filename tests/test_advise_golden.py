"""Golden files of `analyze advise` (text and JSON) on fixtures: a change in findings shows
up as a diff to review. JSON is compared structurally, text line by line.

Regenerate after an intended change: RUNLENS_UPDATE_GOLDEN=1 python -m pytest
tests/test_advise_golden.py, then review `git diff tests/golden`.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import FIXTURES, ROOT, run_cli

GOLDEN = ROOT / "tests" / "golden"
CASES = ["cnn", "fused_cnn", "input_bound", "gpu_mnist", "rnn_while"]
UPDATE = bool(os.environ.get("RUNLENS_UPDATE_GOLDEN"))


def _output(name: str, fmt: str) -> str:
    # The run path is printed as given: use a stable relative one.
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return run_cli(["advise", f"fixtures/runs/{name}", "--format", fmt,
                        "--no-cache"]).output
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("name", CASES)
def test_advise_json_matches_golden(name):
    assert (FIXTURES / name).is_dir()
    got = json.loads(_output(name, "json"))
    path = GOLDEN / f"advise-{name}.json"
    if UPDATE:
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    expected = json.loads(path.read_text())
    assert got == expected, f"advise JSON for {name} changed; see the module docstring"


@pytest.mark.parametrize("name", CASES)
def test_advise_text_matches_golden(name):
    got = _output(name, "text")
    path = GOLDEN / f"advise-{name}.txt"
    if UPDATE:
        path.write_text(got)
    assert got.splitlines() == path.read_text().splitlines()
