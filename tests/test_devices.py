"""Every device is its own device (issue 30 points 1 and 2): GPU planes, XLA CPU replicas
(`device_ordinal`), each with its own step (the span of its work in the step), busy time
and idle share; a device with no work in a step says so. Expected numbers come from the
raw events of the files (walked here with protobuf) or from xprof."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest

from runlens.analyzer.proto import xplane_pb2
from tests.conftest import FIXTURES, run_cli
from tests.xplane_run import GPU_XPLANE

BERT = GPU_XPLANE
PMAP = FIXTURES.parent / "xplane" / "jax_pmap4_devices"
NEEDS_BERT = pytest.mark.skipif(not BERT.is_file(), reason="../shared/data/xplane not present")


def _space(path: Path) -> xplane_pb2.XSpace:
    return xplane_pb2.XSpace.FromString(path.read_bytes())


def _events(plane: xplane_pb2.XPlane):
    """(line name, name, start_ps, dur_ps, {stat: value}) of every event of a plane."""
    stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
    names = {k: v.name for k, v in plane.event_metadata.items()}
    for line in plane.lines:
        for e in line.events:
            stats = {stat_names[s.metadata_id]: s.int64_value or s.uint64_value
                     for s in e.stats}
            yield (line.name, names[e.metadata_id], line.timestamp_ns * 1000 + e.offset_ps,
                   e.duration_ps, stats, line.id)


def _union_ps(intervals: list[tuple[int, int]]) -> int:
    total, reach = 0, None
    for b, e in sorted(intervals):
        if reach is None or b > reach:
            total, reach = total + e - b, e
        elif e > reach:
            total, reach = total + e - reach, e
    return total


def _json(args: list[str]) -> dict:
    return json.loads(run_cli(args).stdout)  # stderr: notes on what the run lacks


def _summary(path: Path) -> dict:
    return _json(["summary", str(path), "--format", "json"])


@NEEDS_BERT
def test_bert_each_gpu_has_its_own_step_and_busy_time():
    """The 8-V100 BERT profile: gpu:4 and gpu:6 ran step 0's 665 kernels 650 ms apart.
    Each one's device step is its kernels' span in step 0 and its busy time their union
    (raw events); gpu:6's step is xprof's step db's to the 0.1 us. gpu:1 (19 memcpys of
    no group) and the five GPUs without events have no work in the step (they read
    "idle 100%" before, and the pooled device step was 953 ms)."""
    from tests.xprof_oracle import step_db

    space = _space(BERT)
    raw = {}
    for plane in space.planes:
        if plane.name in ("/device:GPU:4", "/device:GPU:6"):
            kernels = [(s, s + d) for line, _, s, d, st, _ in _events(plane)
                       if "Compute" in line and st.get("group_id", -1) == 0]
            assert len(kernels) == 665
            raw[plane.name.lower()] = (max(e for _, e in kernels) - min(b for b, _ in kernels),
                                       _union_ps(kernels))
    s = _summary(BERT)
    assert s["summary"]["device_step_time_us"]["median"] == pytest.approx(21310.4, abs=0.1)
    devices = {d["device"]: d for d in s["summary"]["devices"]}
    assert set(devices) == {"/device:cpu:0", *(f"/device:gpu:{i}" for i in range(8))}
    for name, (span_ps, busy_ps) in raw.items():
        d = devices[name]
        assert d["steps_with_work"] == 1
        assert d["device_step_us"] == pytest.approx(span_ps / 1e6, rel=0.15)
        assert d["busy_us"] == pytest.approx(busy_ps / 1e6, rel=0.10)
        assert 0 < d["idle_share"] < 0.5
    assert raw["/device:gpu:4"][0] / 1e9 == pytest.approx(19.9, abs=0.05)
    assert raw["/device:gpu:6"][0] / 1e9 == pytest.approx(21.3, abs=0.05)
    xprof = step_db(BERT)
    assert xprof.height == 1
    assert devices["/device:gpu:6"]["device_step_us"] == pytest.approx(
        xprof["duration_ps"][0] / 1e6, abs=0.1)
    idle = [f"/device:gpu:{i}" for i in (0, 1, 2, 3, 5, 7)]
    for name in idle:
        assert devices[name]["steps_with_work"] == 0 and devices[name]["busy_us"] is None
    assert devices["/device:gpu:1"]["node_stats"] == 19
    text = run_cli(["summary", str(BERT)]).output
    for name in idle:
        (line,) = [ln for ln in text.splitlines() if f" {name} " in ln]
        assert line.rstrip().endswith("no work in this step")


@NEEDS_BERT
def test_bert_no_idle_warning_on_a_gpu_that_computed():
    """advise: RL102 measures gpu:4 in its own step (its work lies outside gpu:6's), says
    nothing of gpu:1, and no finding calls a GPU that computed idle for the whole step."""
    doc = _json(["advise", str(BERT), "--format", "json"])
    idle = [f for f in doc["findings"] if f["code"] in ("RL102", "RL107")]
    assert {f["where"]["device"] for f in idle if f["code"] == "RL102"} == {
        "/device:gpu:4", "/device:gpu:6"}
    for f in idle:
        assert "100.0%" not in f["message"] and "no kernel ran" not in f["message"]
    (ops,) = [f for f in doc["findings"] if f["code"] == "RL101"]
    assert "summed over 4 devices" in ops["message"]  # cpu:0 and the GPUs that ran ops
    assert ops["evidence"]["summed_over_devices"] == 4
    assert max(r["share_of_step"] for k in ("kernels", "scopes")
               for r in ops["evidence"][k]) <= 1.0  # were up to 1.34 against gpu:6's step
    for f in (f for f in idle if f["code"] == "RL102"):  # gaps inside the device's step
        e = f["evidence"]
        assert e["largest_gaps"] and all(
            g["gap_us"] < e["mean_device_step_us"] for g in e["largest_gaps"])


def _pmap_raw() -> tuple[dict, dict, dict]:
    """Per (replica, step): thunks, the all-reduce thunks' time and their Rendezvous time,
    from the raw events; a thunk's step is that of its run (run_id), whose Execute starts
    inside the `train` marker."""
    (path,) = PMAP.glob("plugins/profile/*/*.xplane.pb")
    (host,) = [p for p in _space(path).planes if p.name == "/host:CPU"]
    events = list(_events(host))
    markers = sorted((s, st["step_num"]) for _, n, s, _, st, _ in events if n == "train")
    run_start: dict[int, int] = {}
    for _, _, s, _, st, _ in events:
        if "run_id" in st:
            run_start[st["run_id"]] = min(s, run_start.get(st["run_id"], s))

    def step_of(t: int) -> int:
        return [n for b, n in markers if b <= t][-1]

    thunks, reduce_ps, wait_ps = defaultdict(int), defaultdict(int), defaultdict(int)
    reduces = []
    for _, name, s, d, st, line_id in events:
        if "hlo_op" in st and "device_ordinal" in st:
            key = (st["device_ordinal"], step_of(run_start[st["run_id"]]))
            thunks[key] += 1
            if name.startswith("all-reduce"):
                reduce_ps[key] += d
                reduces.append((line_id, s, s + d, key))
    for _, name, s, d, _, line_id in events:
        if name == "Rendezvous":
            (key,) = [k for ln, b, e, k in reduces if ln == line_id and b <= s and s + d <= e]
            wait_ps[key] += d
    return thunks, reduce_ps, wait_ps


def test_xla_cpu_replicas_are_four_devices():
    """jax.pmap over 4 XLA CPU devices: each replica (`device_ordinal`) is a device, its
    thunks in the step that launched them; per (device, step) runlens's events, collective
    time and Rendezvous wait are the raw events'."""
    from runlens.analyzer.analysis.collectives import per_device_step
    from runlens.analyzer.analysis.devicesteps import device_steps
    from runlens.analyzer.load import load_run

    thunks, reduce_ps, wait_ps = _pmap_raw()
    run = load_run(PMAP)
    assert run.devices == [f"/device:cpu:{i}" for i in range(4)]
    got = device_steps(run).filter(pl.col("work"))
    assert {(int(r["device"][-1]), r["step"]): r["events"]
            for r in got.iter_rows(named=True)} == dict(thunks)
    assert set(got.get_column("how")) == {"launch"}
    coll = per_device_step(run)
    for r in coll.iter_rows(named=True):
        key = (int(r["device"][-1]), r["step"])
        assert r["collective_us"] == pytest.approx(reduce_ps[key] / 1e6, abs=0.01)
        assert r["collective_wait_us"] == pytest.approx(wait_ps[key] / 1e6, abs=0.01)
        assert r["collective_wait_us"] <= r["collective_us"]
    s = _summary(PMAP)["summary"]
    assert [d["device"] for d in s["devices"]] == [f"/device:cpu:{i}" for i in range(4)]
    for d in s["devices"]:
        assert d["steps_with_work"] == d["steps"] == 4 and d["worker"] == "worker0"
        assert 0 <= d["idle_share"] <= 1 and d["busy_us"] <= d["device_step_us"]


def test_pmap_steps_are_xprofs():
    """The pmap capture's steps: xprof's step db (count, begin, duration per step)."""
    from runlens.analyzer.analysis.steps import step_times
    from runlens.analyzer.load import load_run
    from tests.xprof_oracle import step_db

    (path,) = PMAP.glob("plugins/profile/*/*.xplane.pb")
    want = step_db(path)
    got = step_times(load_run(PMAP)).sort("step")
    assert got.height == want.height == 4
    assert (got["start_ns"] * 1000).to_list() == want["begin_ps"].to_list()
    assert ((got["end_ns"] - got["start_ns"]) * 1000).to_list() == pytest.approx(
        want["duration_ps"].to_list(), abs=1000)


def test_views_filter_by_device_and_say_it():
    """--device cuts a view to one replica: its all-reduce and the peer wait inside it
    (collectives: the Rendezvous rows) are that replica's all-reduce thunks' (raw), and
    every JSON row names the worker and device it covers; a view over
    several says "summed over N devices"; an unknown device is a one-line error."""
    _, reduce_ps, _ = _pmap_raw()
    doc = _json(["ops", str(PMAP), "--device", "/device:cpu:2", "--format", "json"])
    assert doc["devices"] == ["/device:cpu:2"] and doc["workers"] == ["worker0"]
    rows = {r["name"]: r for r in doc["rows"]}
    reduce, wait = rows["all-reduce"], rows["peer-wait"]
    for r in (reduce, wait):
        assert r["device"] == "/device:cpu:2" and r["worker"] == "worker0"
    per_step = [v for (dev, _), v in reduce_ps.items() if dev == 2]
    assert reduce["micros"] + wait["micros"] == pytest.approx(
        sum(per_step) / len(per_step) / 1e6, rel=0.001)
    both = _json(["scopes", str(PMAP), "--device", "/device:cpu:[23]", "--format", "json"])
    assert all(r["device"] == "summed over 2 devices" for r in both["rows"])
    bad = run_cli(["ops", str(PMAP), "--device", "/device:gpu:0"], expect_exit=2)
    assert "no device matches --device /device:gpu:0" in bad.output


def test_no_share_of_a_step_above_100_percent_from_summing_devices():
    """advise on the 4-replica capture: no finding's share of the step exceeds 100%."""
    doc = _json(["advise", str(PMAP), "--format", "json"])
    assert doc["findings"]

    def shares(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if k.startswith("share") or k in ("impact", "idle_share"):
                    yield v
                yield from shares(v)
        elif isinstance(x, list):
            for v in x:
                yield from shares(v)

    found = [v for f in doc["findings"] for v in shares(f) if isinstance(v, float)]
    assert found and max(found) <= 1.0


TPU = GPU_XPLANE.parent / "openxla__xprof__tpu_inference_2.xplane.pb"


@pytest.mark.skipif(not TPU.is_file(), reason="../shared/data/xplane not present")
def test_tpu_chips_are_their_own_devices_as_xprof_counts_them(tmp_path):
    """The 4-chip TPU inference profile has no step marker: its one step is the whole
    profile. Each chip's device step is xprof's total device time of that chip (xprof run
    on the file with that chip's plane only) within 0.1%; its busy time (the union of its
    XLA ops) is within 5% of xprof's op time on the chip, which sums ops whose measured
    time (`device_duration_ps`) overlaps the next op's start (78.8 s against a 75.7 s
    union on chip 1). Its program runs (the "XLA Modules" line) per chip are xprof's."""
    from xprof.convert import raw_to_tool_data
    from xprof.protobuf import op_stats_pb2

    space = _space(TPU)
    one = xplane_pb2.XSpace()
    one.planes.extend(p for p in space.planes
                      if not p.name.startswith("/device:TPU:") or p.name == "/device:TPU:1")
    path = tmp_path / "chip1.xplane.pb"
    path.write_bytes(one.SerializeToString())
    raw_to_tool_data.xspace_to_tool_data([str(path)], "framework_op_stats", {})
    (cached,) = tmp_path.glob("*.op_stats_v2.pb")
    db = op_stats_pb2.OpStats.FromString(cached.read_bytes()).device_op_metrics_db
    devices = {d["device"]: d for d in _summary(TPU)["summary"]["devices"]}
    assert sorted(devices) == [f"/device:tpu:{i}" for i in range(4)]
    chip = devices["/device:tpu:1"]
    assert chip["device_step_us"] == pytest.approx(db.total_time_ps / 1e6, rel=0.001)
    assert chip["busy_us"] == pytest.approx(db.total_op_time_ps / 1e6, rel=0.05)
    assert chip["busy_us"] < db.total_op_time_ps / 1e6
    # Program runs per chip: xprof's "XLA Modules" rows (105, 103, 103, 103).
    events, meta = _trace_viewer(TPU)
    runs = defaultdict(int)
    for e in events:
        if meta.get(("thread_name", e["pid"], e["tid"])) == "XLA Modules":
            runs[meta[("process_name", e["pid"], None)].lower()] += 1
    assert {d: v["modules"] for d, v in devices.items()} == dict(runs)
    assert runs["/device:tpu:0"] == 105


def test_device_work_belongs_to_the_step_that_launched_it():
    """Steps dispatched ahead (pmap over 4 CPU devices, sync=False: fixtures/xplane/
    jax_pmap4_ahead, `gen_jax_pmap_devices.py --dispatch-ahead`, committed because
    whether a step's work outlasts its marker depends on the machine's load): a step's
    thunks run while later steps' markers are open. Each XLA run is launched by its
    `Execute` on the host (the producer of its run_id), inside its step's marker; each
    thunk is in that step (raw: run_id -> Execute's start -> marker), not in the marker
    open when the thunk started, which would pile later runs into the last step."""
    from runlens.analyzer.analysis.devicesteps import device_steps
    from runlens.analyzer.load import load_run

    ahead = FIXTURES.parent / "xplane" / "jax_pmap4_ahead"
    (path,) = ahead.glob("plugins/profile/*/*.xplane.pb")
    (host,) = [p for p in _space(path).planes if p.name == "/host:CPU"]
    events = list(_events(host))
    markers = sorted((s, st["step_num"]) for _, n, s, _, st, _ in events if n == "train")
    launch = {st["run_id"]: s for _, _, s, _, st, _ in events
              if "run_id" in st and st.get("_p") == st["run_id"]}

    def step_at(t: int) -> int:
        return [n for b, n in markers if b <= t][-1]

    want: dict = defaultdict(int)
    late = 0
    for _, _, s, _, st, _ in events:
        if "hlo_op" in st and st.get("run_id") in launch:
            step = step_at(launch[st["run_id"]])
            want[(st["device_ordinal"], step)] += 1
            late += step_at(s) != step  # a time window would put it elsewhere
    assert late > 0 and len({k[1] for k in want}) == 4
    got = device_steps(load_run(ahead)).filter(pl.col("work"))
    assert {(int(r["device"][-1]), r["step"]): r["events"]
            for r in got.iter_rows(named=True)} == dict(want)


def test_two_workers_are_two_sets_of_devices(tmp_path):
    """Two workers (copies of one TF1 run dir): summary has one entry per (worker,
    device), each with the single run's numbers (not summed over the workers); a view
    over both says "summed over 2 workers" in its rows, --worker cuts it to one, whose
    numbers are the single run's."""
    import shutil

    single = tmp_path / "single"
    shutil.copytree(FIXTURES / "mlp", single)
    parent = tmp_path / "exp"
    for worker in ("worker-0", "worker-1"):
        shutil.copytree(single, parent / worker)
        manifest = json.loads((parent / worker / "manifest.json").read_text())
        manifest["task"] = None
        (parent / worker / "manifest.json").write_text(json.dumps(manifest))
    one = {d["device"]: d for d in _summary(single)["summary"]["devices"]}
    both = _summary(parent)["summary"]["devices"]
    assert sorted((d["worker"], d["device"]) for d in both) == sorted(
        (w, dev) for w in ("worker-0", "worker-1") for dev in one)
    for d in both:
        mine = one[d["device"]]
        for k in ("node_stats", "nodes", "device_step_us", "busy_us", "idle_share"):
            assert d[k] == mine[k]
    ops = _json(["ops", str(parent), "--format", "json"])
    assert ops["workers"] == ["worker-0", "worker-1"]
    assert {r["worker"] for r in ops["rows"]} == {"summed over 2 workers"}
    cut = _json(["ops", str(parent), "--worker", "worker-1", "--format", "json"])
    alone = _json(["ops", str(single), "--format", "json"])
    assert {r["worker"] for r in cut["rows"]} == {"worker-1"}
    assert [(r["name"], r["micros"]) for r in cut["rows"]] == [
        (r["name"], r["micros"]) for r in alone["rows"]]


GPU_JAX = FIXTURES.parents[2] / "shared" / "data" / "gpu-jax"


def _trace_viewer(path: Path) -> tuple[list[dict], dict]:
    """xprof's trace viewer events of a file (its EventForest's group_id included) and
    the names of their processes and threads."""
    import gzip
    import shutil
    import tempfile

    from xprof.convert import raw_to_tool_data

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        shutil.copy(path, copy)
        out = raw_to_tool_data.xspace_to_tool_data([str(copy)], "trace_viewer", {})
    data = out[0] if isinstance(out, tuple) else out
    if isinstance(data, bytes) and data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    events = json.loads(data)["traceEvents"]
    meta = {(e["name"], e["pid"], e.get("tid")): e["args"]["name"] for e in events
            if e.get("ph") == "M" and e["name"] in ("process_name", "thread_name")}
    return [e for e in events if e.get("ph") == "X"], meta


def _xprof_groups(path: Path) -> dict[tuple[str, int], int | None]:
    """xprof's step of every GPU stream event ((device, start ns) -> step_num; None: no
    group): EventForest's group_id, named by the group's `train` marker."""
    events, meta = _trace_viewer(path)
    steps = {e["args"]["group_id"]: int(e["args"]["step_num"]) for e in events
             if "step_num" in e.get("args", {}) and "group_id" in e["args"]}
    return {(meta[("process_name", e["pid"], None)].lower(), round(e["ts"] * 1000)):
            steps.get(e["args"].get("group_id", ""))
            for e in events
            if meta.get(("thread_name", e["pid"], e["tid"]), "").startswith("Stream #")}


@pytest.mark.parametrize("name", ["cnn_a", "xf_input"])
def test_device_events_are_in_the_steps_xprof_groups_them_in(name: str):
    """JAX on an H200, no group_id in the files: every GPU event is in the step xprof's
    EventForest puts it in (its trace viewer's group_id -> the group's `train` marker),
    cnn_a's 1,560 all. xf_input calls jax.device_put inside each step's marker
    (capture_jax.py): runlens puts its two input copies per step in that step (their host
    launch is inside it); xprof puts them in the step before (step 0's in none): those 16
    are the only difference."""
    from runlens.analyzer.load import load_run

    folder = GPU_JAX / name
    if not folder.is_dir():
        pytest.skip("../shared/data/gpu-jax not present")
    (path,) = folder.glob("plugins/profile/*/*.xplane.pb")
    xprof = _xprof_groups(path)
    ours = load_run(folder).nodes.filter(pl.col("lane_kind") == "stream_all").select(
        "device", "start_ns", "step", "kernel")
    assert ours.height == len(xprof)
    differ = [(r["kernel"], r["step"], xprof[(r["device"], r["start_ns"])])
              for r in ours.iter_rows(named=True)
              if xprof[(r["device"], r["start_ns"])] != r["step"]]
    if name == "cnn_a":
        assert ours.height == 1560 and differ == []
    else:
        assert len(differ) == 16 and {k for k, _, _ in differ} == {"MemcpyH2D"}
        assert all(x == (s - 1 if s else None) for _, s, x in differ)


@NEEDS_BERT
def test_bert_summary_text_reads_the_working_devices_first():
    """What a user reads first: the devices that worked (host, gpu:4, gpu:6) before the
    six without work; one worker, so no worker column; under the table, the host's step
    that spans 31x the step time (its events launched gpu:4's and gpu:6's work 650 ms
    apart) and gpu:1's events outside the steps, with the JSON's own numbers."""
    s = _summary(BERT)["summary"]
    devices = {d["device"]: d for d in s["devices"]}
    text = run_cli(["summary", str(BERT)]).output.splitlines()
    header = next(i for i, line in enumerate(text) if line.split()[:2] == ["device", "node"])
    rows = [line.split()[0] for line in text[header + 1:header + 10]]
    assert rows[:3] == ["/device:cpu:0", "/device:gpu:4", "/device:gpu:6"]
    assert sorted(rows[3:]) == [f"/device:gpu:{i}" for i in (0, 1, 2, 3, 5, 7)]
    assert s["workers"][0] not in "\n".join(text[header:header + 10])
    host, step = devices["/device:cpu:0"], s["device_step_time_us"]["median"]
    ratio = round(host["device_step_us"] / step)
    assert ratio > 2  # the note's condition
    note = next(line for line in text if "/device:cpu:0: its work in a step spans" in line)
    assert f"{ratio}x the step's" in note
    assert "/device:gpu:1: its 19 node stats lie outside the steps" in "\n".join(text)
