"""Eager TF2 profiles (fixtures/gen_host.py host_eager: matmuls in a Python loop,
tf.profiler.experimental.start/stop, `train` markers): one op per `EagerLocalExecute: Op`
event, its host time equal to the raw events' (computed here from the file with
protobuf), steps from the markers, exit 0 and "eager" said in summary."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import polars as pl

from runlens.analyzer.proto import xplane_pb2
from tests.conftest import run_cli
from tests.xplane_run import FIXTURES, fixture_file, xplane_run

EAGER = FIXTURES / "host_eager"


def raw_eager(path: Path) -> tuple[dict[str, int], dict[str, int], list[int]]:
    """Per op type: the summed duration (ns) and count of `EagerLocalExecute: Op`
    events; and the step_num of every `train` marker."""
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    ns: dict[str, int] = collections.Counter()
    count: dict[str, int] = collections.Counter()
    steps = []
    for plane in space.planes:
        stat_names = {i: m.name for i, m in plane.stat_metadata.items()}
        for line in plane.lines:
            for e in line.events:
                name = plane.event_metadata[e.metadata_id].name
                if name.startswith("EagerLocalExecute: "):
                    op = name.split(": ", 1)[1]
                    ns[op] += e.duration_ps // 1000
                    count[op] += 1
                elif name == "train":
                    steps += [s.int64_value for s in e.stats
                              if stat_names[s.metadata_id] == "step_num"]
    return ns, count, sorted(steps)


def test_eager_ops_are_the_raw_events() -> None:
    path = fixture_file("host_eager")
    want_ns, want_count, want_steps = raw_eager(path)
    assert want_count["MatMul"] >= 10  # the capture ran matmuls eagerly
    run = xplane_run(path)
    got = run.nodes.group_by("op_type").agg(ns=pl.col("op_end_rel_ns").sum(), n=pl.len())
    got_ns = dict(zip(got["op_type"], got["ns"], strict=True))
    got_n = dict(zip(got["op_type"], got["n"], strict=True))
    assert set(got_ns) == set(want_ns)
    for op, ns in want_ns.items():
        assert abs(got_ns[op] - ns) <= 0.05 * ns, (op, got_ns[op], ns)
        assert got_n[op] == want_count[op]
    assert run.steps == want_steps
    assert set(run.nodes["node_name"]) == {f"eager/{op}" for op in want_ns}


def test_eager_only_profile_gives_per_op_time_and_says_eager() -> None:
    want_ns, _, steps = raw_eager(fixture_file("host_eager"))
    out = run_cli(["ops", EAGER, "--format", "json", "--include-warmup"]).output
    rows = {r["name"]: r for r in json.loads(out[out.index("{"):])["rows"]}
    for op in ("MatMul", "Relu", "Mul", "Sum"):  # ran in every step: average x steps
        total_us = rows[op]["micros"] * len(steps)
        assert abs(total_us - want_ns[op] / 1000) <= 0.05 * want_ns[op] / 1000, op
    summary = run_cli(["summary", EAGER]).output
    assert "eager TF2 profile" in summary
    assert f"steps      {len(steps)} " in summary
    run_cli(["advise", EAGER])


def test_function_calls_are_not_eager_ops() -> None:
    """A tf.function called eagerly (`EagerLocalExecute: __inference_...`) is the caller's
    wait for the function's ops, counted where they ran: no op of its own."""
    run = xplane_run(fixture_file("host_input_step"))
    eager = run.nodes.filter(pl.col("node_name").str.starts_with("eager/"))
    assert set(eager["op_type"]) == {"IteratorGetNext"}
