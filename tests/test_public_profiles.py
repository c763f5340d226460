"""Public profiles no one here wrote (docs/sources.md "Public files checked"), when they
are present: $RUNLENS_PUBLIC_PROFILES, default shared/data/public-profiles beside the
repository (they are not committed: most have no licence). Each check is the engine's
own invariant or the other tool's file of the same profile:

- every folder holding a `<host>.xplane.pb` and the `<host>.trace.json.gz` the profile
  plugin wrote beside it: the same steps, executions and op/scope views from both;
- every tf.timeline file: per node, the run's op time is the sum of its events' (on op
  lanes; tfprof's rounding of a 0 us event up to 1 us), and a merged file's step count is
  its number of `_SOURCE` runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pytest

from runlens.analyzer.analysis.views import VIEWS, ViewOptions
from runlens.analyzer.load import load_run
from tests.conftest import ROOT

DATA = Path(os.environ.get("RUNLENS_PUBLIC_PROFILES",
                           ROOT.parent / "shared" / "data" / "public-profiles"))
# The public GPU timelines kept beside the repository (../shared/data/gpu-timelines) are
# always checked; the rest only where a copy of the public files is present.
SHARED_TIMELINES = ROOT.parent / "shared" / "data" / "gpu-timelines"
ABSENT = f"opt-in: {DATA} not present (copy the public files listed in docs/sources.md there)"
PAIRS = sorted(p.parent for p in DATA.rglob("*.xplane.pb")
               if any(p.parent.glob("*.trace.json.gz"))) if DATA.is_dir() else []
TIMELINES = sorted(SHARED_TIMELINES.glob("*.json")) + (
    sorted(DATA.rglob("timeline*.json")) if DATA.is_dir() else [])
COLUMNS = ["step", "lane", "stat_name", "op_type", "all_start_us", "op_start_rel_ns",
           "op_end_rel_ns"]


@pytest.mark.skipif(not PAIRS, reason=ABSENT)
@pytest.mark.parametrize("folder", PAIRS, ids=[p.name for p in PAIRS])
def test_xplane_and_its_trace_viewer_json_agree(folder: Path) -> None:
    trace = load_run(next(folder.glob("*.trace.json.gz")), use_cache=False)
    xplane = load_run(next(folder.glob("*.xplane.pb")), use_cache=False)
    assert trace.steps == xplane.steps and xplane.steps
    assert trace.nodes.select(COLUMNS).sort(pl.all()).equals(
        xplane.nodes.select(COLUMNS).sort(pl.all()))
    for kind in ("ops", "scopes"):
        a, b = VIEWS[kind](trace, ViewOptions()).rows, VIEWS[kind](xplane, ViewOptions()).rows
        assert a.select("name", "micros", "occurrence").equals(
            b.select("name", "micros", "occurrence")), kind


@pytest.mark.parametrize("path", TIMELINES, ids=[p.name for p in TIMELINES])
def test_timeline_node_times_are_their_events(path: Path) -> None:
    events = json.loads(path.read_text())["traceEvents"]
    lanes = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    ops = [e for e in events if e.get("ph") == "X"
           and lanes.get(e["pid"], "").endswith(" Compute")]
    if not ops:
        pytest.skip("no op events (an untraced step: its own test)")
    run = load_run(path, use_cache=False)
    # Each session.run starts with _SOURCE on its first lane (a lone step may lack it).
    first = min((e["pid"] for e in ops if e["args"]["name"] == "_SOURCE"), default=None)
    runs = sum(e["args"]["name"] == "_SOURCE" and e["pid"] == first for e in ops)
    assert len(run.steps) == max(runs, 1)
    op_lanes = [e for e in ops if "/stream:" not in lanes[e["pid"]]
                and "/memcpy" not in lanes[e["pid"]]]
    want = (pl.DataFrame({"lane": [lanes[e["pid"]][: -len(" Compute")] for e in op_lanes],
                          "name": [e["args"]["name"] for e in op_lanes],
                          "us": [max(int(e["dur"]), 1) for e in op_lanes]})
            .group_by("name").agg(pl.col("us").sum()))
    got = (run.nodes.filter(pl.col("lane_kind") != "device")
           .group_by(name=pl.col("stat_name"))
           .agg(us=pl.col("op_end_rel_us").clip(lower_bound=1).sum()))
    both = want.join(got, on="name", how="full", coalesce=True)
    assert both.filter(pl.col("us") != pl.col("us_right")).height == 0
