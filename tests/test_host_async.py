"""Step markers that cover only the dispatch (fixtures/gen_host.py host_jax_async: JAX
with plain StepTraceAnnotation and no wait inside it; host_jax_dispatch: the same with one
step dispatching one more program). The work's step time comes from the raw thunks of
each execution (computed here from the file with protobuf); no straggler warning, no
share of a step from dispatch-only markers, one line saying what happened and the fix."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from runlens.analyzer.analysis.steps import step_times
from runlens.analyzer.proto import xplane_pb2
from runlens.checkers import REGISTRY
from runlens.checkers.base import Analysis
from tests.conftest import run_cli
from tests.xplane_run import FIXTURES, fixture_file, xplane_run


def raw_executions(path: Path) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]]]:
    """The `train` markers (start_ps, end_ps, step_num) and the span (start_ps, end_ps) of
    every XLA execution (the thunks of one run_id), both in time order."""
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    markers, runs = [], {}
    for plane in space.planes:
        stat = {i: m.name for i, m in plane.stat_metadata.items()}
        for line in plane.lines:
            for e in line.events:
                t = line.timestamp_ns * 1000 + e.offset_ps
                stats = {stat[s.metadata_id]: s.int64_value for s in e.stats}
                name = plane.event_metadata[e.metadata_id].name
                if name == "train":
                    markers.append((t, t + e.duration_ps, stats["step_num"]))
                elif "hlo_op" in {stat[s.metadata_id] for s in e.stats}:
                    b, f = runs.get(stats["run_id"], (t, t + e.duration_ps))
                    runs[stats["run_id"]] = (min(b, t), max(f, t + e.duration_ps))
    return sorted(markers), sorted(runs.values())


def test_work_after_the_markers_gives_the_step_time() -> None:
    path = fixture_file("host_jax_async")
    markers, runs = raw_executions(path)
    assert len(runs) == len(markers)  # one execution per step
    # The markers end before their work begins (but the first, whose dispatch is slow):
    # the capture's asynchronous dispatch.
    assert sum(m[1] < r[0] for m, r in zip(markers, runs, strict=True)) >= len(runs) - 1
    run = xplane_run(path)
    times = step_times(run).sort("step")
    assert times["step"].to_list() == [m[2] for m in markers]
    assert set(times["kind"]) == {"work"}
    want = [(e - b) // 1000 for b, e in runs]
    got = times["duration_ns"].to_list()
    assert all(abs(g - w) <= 0.01 * w for g, w in zip(got, want, strict=True)), (got, want)
    (line,) = [w for w in run.warnings if "cover only the dispatch" in w]
    assert "block_until_ready" in line


def test_dispatch_only_markers_raise_no_straggler_and_no_share() -> None:
    for name in ("host_jax_async", "host_jax_dispatch"):
        a = Analysis(xplane_run(fixture_file(name)))
        assert list(REGISTRY["RL109"]().check(a)) == [], name
        (top,) = REGISTRY["RL101"]().check(a)
        assert "ran in parallel" not in top.message
        shares = [k.get("share_of_step", 0) for k in top.evidence["kernels"]]
        assert max(shares) <= 1.0, (name, shares)


def test_markers_without_a_known_execution_each_say_so() -> None:
    """host_jax_dispatch: more executions than markers, not a multiple of them, so which
    is whose is unknown: the steps are marked 'dispatch' and no step time is claimed."""
    path = fixture_file("host_jax_dispatch")
    markers, runs = raw_executions(path)
    assert len(runs) % len(markers)
    run = xplane_run(path)
    assert set(step_times(run)["kind"]) == {"dispatch"}
    (line,) = [w for w in run.warnings if "cover only the dispatch" in w]
    assert "no step time is measured" in line
    summary = run_cli(["summary", FIXTURES / "host_jax_dispatch"]).output
    assert "dispatch only, not step times" in summary


def test_markers_that_hold_their_work_are_left_alone() -> None:
    """jax_train waits inside each marker (block_until_ready): the markers' spans."""
    run = xplane_run(fixture_file("jax_train"))
    assert set(step_times(run)["kind"]) == {"marker"}
    assert not [w for w in run.warnings if "dispatch" in w]


def test_host_fixtures_are_analysed_never_exit_3() -> None:
    """Eager ops only, markers without work (dispatch-only), work without markers: every
    command gives an answer; a profile of markers and no op at all says so in one line."""
    for name in ("host_eager", "host_jax_async", "host_jax_dispatch", "host_input_keras"):
        for command in (["summary"], ["advise"], ["ops"], ["scopes"]):
            run_cli([*command, FIXTURES / name])
    keras = xplane_run(fixture_file("host_input_keras"))
    assert keras.nodes.filter(pl.col("op_type") == "Dataset").height
    # Work without markers: one step, and the summary says why.
    summary = run_cli(["summary", FIXTURES / "host_no_markers"]).output
    assert "lacks      steps: no step markers" in summary
    run_cli(["advise", FIXTURES / "host_no_markers"])
    # Markers without any op: nothing to analyse, said in one line (exit 2, not 3).
    out = run_cli(["summary", FIXTURES / "host_markers_only"], expect_exit=2).output
    assert "no op events: 4 step markers with no op in them" in out
    assert len(out.strip().splitlines()) == 1
