"""Flame-graph files of the code and scopes views: speedscope JSON and gzipped pprof.

Each file is parsed by the format's own definition (speedscope's published JSON schema,
tests/schemas/, from the speedscope npm package; pprof's profile.proto, analyzer/proto)
and its weights must add up to the view's totals (`--format json`), with and without
options that hide nodes.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import jsonschema
import pytest

from runlens.analyzer.proto import profile_pb2
from tests.conftest import FIXTURES, run_cli

SCHEMA = json.loads((Path(__file__).parent / "schemas" /
                     "speedscope-file-format-schema.json").read_text())
VIEWS = ["code", "scopes"]
HIDING = [[], ["--min-micros", "50", "--max-depth", "3"]]


def _total(view: str, run: Path, options: list[str]) -> dict:
    doc = json.loads(run_cli([view, run, "--format", "json", *options]).stdout)
    return doc["total"]


@pytest.mark.parametrize("options", HIDING)
@pytest.mark.parametrize("view", VIEWS)
def test_speedscope_matches_schema_and_view_totals(view, options):
    run = FIXTURES / "cnn"
    doc = json.loads(run_cli([view, run, "--format", "speedscope", *options]).stdout)
    jsonschema.validate(doc, SCHEMA)
    total = _total(view, run, options)
    time, memory = doc["profiles"]
    assert (time["unit"], memory["unit"]) == ("microseconds", "bytes")
    assert sum(time["weights"]) == time["endValue"] == total["micros"] > 0
    assert sum(memory["weights"]) == total["requested_bytes"] > 0
    frames = doc["shared"]["frames"]
    for p in doc["profiles"]:
        assert len(p["samples"]) == len(p["weights"])
        assert all(0 <= i < len(frames) for stack in p["samples"] for i in stack)
    if view == "code":  # code frames keep their file and line
        assert all(f["file"].endswith(".py") and f["line"] > 0 for f in frames
                   if f["name"] != "(not displayed)")


@pytest.mark.parametrize("options", HIDING)
@pytest.mark.parametrize("view", VIEWS)
def test_pprof_parses_with_profile_proto_and_matches_view_totals(view, options):
    run = FIXTURES / "cnn"
    raw = run_cli([view, run, "--format", "pprof", *options]).stdout_bytes
    profile = profile_pb2.Profile.FromString(gzip.decompress(raw))
    strings = profile.string_table
    assert strings[0] == ""
    types = [(strings[t.type], strings[t.unit]) for t in profile.sample_type]
    assert types == [("time", "microseconds"), ("memory", "bytes")]
    assert strings[profile.default_sample_type] == "time"
    total = _total(view, run, options)
    assert sum(s.value[0] for s in profile.sample) == total["micros"] > 0
    assert sum(s.value[1] for s in profile.sample) == total["requested_bytes"] > 0
    locations = {loc.id: loc for loc in profile.location}
    functions = {f.id: f for f in profile.function}
    assert 0 not in locations and 0 not in functions
    for sample in profile.sample:
        assert sample.location_id and all(i in locations for i in sample.location_id)
    for loc in profile.location:
        assert [ln.function_id in functions for ln in loc.line] == [True]


def test_pprof_stacks_go_leaf_first():
    """A scope's sample ends (root side) at its top-level scope, as pprof reads stacks."""
    raw = run_cli(["scopes", FIXTURES / "cnn", "--format", "pprof"]).stdout_bytes
    profile = profile_pb2.Profile.FromString(gzip.decompress(raw))
    name = {f.id: profile.string_table[f.name] for f in profile.function}
    for sample in profile.sample:
        stack = [name[i] for i in sample.location_id]
        assert all(leaf.startswith(parent + "/") for leaf, parent in
                   zip(stack, stack[1:], strict=False))


@pytest.mark.parametrize("fmt", ["speedscope", "pprof"])
def test_flat_views_refuse_flame_formats(fmt):
    result = run_cli(["ops", FIXTURES / "cnn", "--format", fmt], expect_exit=2)
    assert "code" in result.output and len(result.output.strip().splitlines()) == 1
