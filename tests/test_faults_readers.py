"""Fault injection of the newer readers and of the output paths (issue 25): timeline JSON,
trace.json.gz, loose RunMetadata, event files, xplane (generators: tests/faults_readers.py;
at length, by hand: tests/fuzz_sources.py).

Every mutated or crafted input exits 0 or 2 with one line naming the file, never 3; a bad
file in a folder is skipped with a warning and the others analysed; special files are
refused before any read (no hang, no growth); the C and protobuf xplane paths agree on
every mutated file (output paths: tests/test_output_paths.py). Fixed seeds; ~40 s.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import subprocess
import sys

import pytest

from runlens.analyzer.load import load_run
from runlens.analyzer.proto import config_pb2, graph_pb2, node_def_pb2, xplane_pb2
from tests import faults
from tests import faults_readers as fr
from tests.conftest import ROOT, run_cli

# ----------------------------------------------------------------------------- JSON


@pytest.mark.parametrize("gz", [False, True], ids=["timeline", "trace.json.gz"])
def test_crafted_json_values_are_one_line_or_read_never_exit_3(tmp_path, gz):
    """The issue's values (1e400, 1e30, -2^63, "name": [], lone surrogates, ...) each in
    one event of a real trace: exit 3 for 7 of them before."""
    source = fr.TRACE if gz else fr.TIMELINE
    name = "host.trace.json.gz" if gz else "timeline-3.json"
    rng = random.Random(3)
    outcomes = {}
    for case, edit in sorted(fr.JSON_CRAFTS.items()):
        doc = fr.json_doc(source.read_bytes(), gz)
        edit(doc, rng)
        path = tmp_path / case / name
        path.parent.mkdir()
        path.write_bytes(fr.json_bytes(doc, gz))
        outcomes[case] = fr.check_cli(["summary", "--no-cache", path], path)
    deep = tmp_path / "deep" / name
    deep.parent.mkdir()
    deep.write_bytes(fr.deep(gz))
    assert fr.check_cli(["summary", "--no-cache", deep], deep) == "refused"
    refused = (("ts-1e400", "ts-1e30", "dur-1e30", "tid-big", "surrogate") if gz else
               ("ts-1e400", "ts-1e30", "dur-1e30", "tid-neg", "name-list", "surrogate"))
    for case in refused:  # a trace's tid is a line id (int64); args are stats (any JSON)
        assert outcomes[case] == "refused", (case, outcomes)


def test_a_bad_timeline_in_a_profilerhook_folder_is_skipped_not_the_folder(tmp_path):
    """One crafted file among ProfilerHook's: a warning naming it, the others read (the
    whole folder exited 3 before)."""
    hook = fr.SOURCES / "profilerhook"
    clean = load_run(hook, use_cache=False, source="timeline")
    rng = random.Random(5)
    for case in ("ts-1e400", "tid-neg", "name-list", "surrogate", "deep"):
        folder = tmp_path / case
        folder.mkdir()
        for p in hook.glob("timeline-*.json"):
            shutil.copy(p, folder / p.name)
        bad = folder / "timeline-9.json"
        if case == "deep":
            bad.write_bytes(fr.deep(False))
        else:
            doc = fr.json_doc(fr.TIMELINE.read_bytes(), False)
            fr.JSON_CRAFTS[case](doc, rng)
            bad.write_bytes(fr.json_bytes(doc, False))
        run = load_run(folder, use_cache=False)
        assert [w for w in run.warnings if "timeline-9.json" in w], (case, run.warnings)
        assert sorted(run.steps) == sorted(clean.steps), case


def test_a_bad_trace_among_workers_leaves_that_worker_out(tmp_path):
    folder = tmp_path / "run1"
    folder.mkdir()
    shutil.copy(fr.TRACE, folder / "worker0.trace.json.gz")
    doc = fr.json_doc(fr.TRACE.read_bytes(), True)
    fr.JSON_CRAFTS["ts-1e400"](doc, random.Random(1))
    (folder / "worker1.trace.json.gz").write_bytes(fr.json_bytes(doc, True))
    run = load_run(folder, use_cache=False)
    assert run.workers == ["worker0"]
    assert [w for w in run.warnings if "worker1.trace.json.gz" in w and "left out" in w]


def test_a_gzip_bomb_is_refused_by_its_ratio(tmp_path):
    bomb = tmp_path / "host.trace.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (300 << 20), compresslevel=1))
    result = run_cli(["summary", "--no-cache", "--source", "tracejson", bomb], expect_exit=2)
    assert "decompresses to more than" in result.output


@pytest.mark.parametrize("which,count", [("timeline", 60), ("tracejson", 40),
                                         ("runmetadata", 30), ("events", 30)])
def test_mutated_files_of_each_reader_exit_0_or_2(tmp_path, which, count):
    source, name = {"timeline": (fr.TIMELINE, "timeline-3.json"),
                    "tracejson": (fr.TRACE, "host.trace.json.gz"),
                    "runmetadata": (fr.RUN_METADATA, "run_metadata_1.pb"),
                    "events": (fr.EVENTS, "events.out.tfevents.1")}[which]
    rng = random.Random(11)
    raw = source.read_bytes()
    kinds: dict[str, int] = {}
    for i in range(count):
        kind, data = fr.mutate_file(raw, name, rng)
        path = tmp_path / str(i) / name
        path.parent.mkdir()
        path.write_bytes(data)
        outcome = fr.check_cli(["summary", "--no-cache", "--source", which, path], path)
        kinds[f"{kind}:{outcome}"] = kinds.get(f"{kind}:{outcome}", 0) + 1
    assert any(k.endswith(":refused") for k in kinds), kinds


# ----------------------------------------------------------------------------- RunMetadata


def _with_bad_partition_graph(raw: bytes) -> bytes:
    md = config_pb2.RunMetadata.FromString(raw)
    node = md.partition_graphs.add().node.add(name="n", op="Conv2D")
    node.attr["data_format"].s = b"\xff\xfe"  # not UTF-8: the graph cannot be read
    return md.SerializeToString()


def test_a_loose_run_metadata_with_a_bad_partition_graph_skips_that_file(tmp_path):
    """It refused the whole folder before, naming the folder."""
    raw = fr.RUN_METADATA.read_bytes()
    for i in (1, 2, 3):
        (tmp_path / f"run_metadata_{i}.pb").write_bytes(raw)
    bad = tmp_path / "run_metadata_2.pb"
    bad.write_bytes(_with_bad_partition_graph(raw))
    run = load_run(tmp_path, use_cache=False)
    assert sorted(run.steps) == [1, 3]
    assert [w for w in run.warnings if "run_metadata_2.pb" in w and "partition graph" in w]


# ----------------------------------------------------------------------------- xplane


def test_the_c_and_protobuf_xplane_paths_agree_on_every_mutated_file(tmp_path):
    """400 mutated fixtures (~3 s): both refuse or both read the same frames (the C
    decoder read 71-79 of 1,500 that protobuf refused before: docs/robustness.md)."""
    rng = random.Random(1)
    files = [(p, p.read_bytes()) for p in fr.XPLANES]
    outcomes: dict[str, int] = {}
    for i in range(400):
        _, raw = files[i % len(files)]
        kind, data = fr.mutate(raw, rng)
        path = tmp_path / f"m{i}.xplane.pb"
        path.write_bytes(data)
        outcome = fr.xplane_agree(path)
        outcomes[f"{kind}:{outcome}"] = outcomes.get(f"{kind}:{outcome}", 0) + 1
    assert sum(v for k, v in outcomes.items() if k.endswith(":read")) > 40, outcomes
    assert sum(v for k, v in outcomes.items() if k.endswith(":refused")) > 200, outcomes


def _space(ts_ns: int = 0, name: str = "t", stat: int | None = None) -> bytes:
    space = xplane_pb2.XSpace()
    plane = space.planes.add(id=1, name="/host:CPU")
    plane.event_metadata[1].CopyFrom(xplane_pb2.XEventMetadata(id=1, name="a/MatMul:MatMul"))
    plane.stat_metadata[1].CopyFrom(xplane_pb2.XStatMetadata(id=1, name="group_id"))
    line = plane.lines.add(id=1, name=name, timestamp_ns=ts_ns)
    event = line.events.add(metadata_id=1, offset_ps=5, duration_ps=10)
    if stat is not None:
        event.stats.add(metadata_id=1, uint64_value=stat)
    return space.SerializeToString()


def _crowded_space() -> bytes:
    from tests.wire_bytes import delimited

    plane = b"\x12\x09/host:CPU" + b"\x22\x00" * 1_100_000
    return _space() + delimited(1, plane)


@pytest.mark.parametrize("case,expect", [("ts-2^62", "refused"), ("ts-max", "refused"),
                                         ("ts-neg", "refused"), ("uint64-big", "read"),
                                         ("ts-ok", "read"), ("hostname-not-utf8", "refused"),
                                         ("hostname-ok", "read"), ("crowded", "refused")])
def test_crafted_xplane_values_agree_and_never_exit_3(tmp_path, case, expect):
    """A line timestamp_ns of 2^62 (a valid message) exited 3 (OverflowError) on both
    paths; a uint64 stat >= 2^63 overflowed the protobuf walk's int64 column."""
    data = {"ts-2^62": _space(2**62), "ts-max": _space(2**63 - 1), "ts-neg": _space(-2**63),
            "uint64-big": _space(stat=2**64 - 1), "ts-ok": _space(10**15),
            # XSpace.hostnames (field 4), checked in C on the native path
            "hostname-not-utf8": _space() + b"\x22\x02h\xff",
            "hostname-ok": _space() + b"\x22\x02hi",
            # 1.1M empty event metadata entries in one plane (20 MB of them took 0.9 GB)
            "crowded": _crowded_space()}[case]
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(data)
    assert fr.xplane_agree(path) == expect
    assert fr.check_cli(["summary", "--no-cache", path], path) == expect


def test_lines_are_decoded_in_batches_not_one_task_each(tmp_path):
    """100k one-event lines: a few dozen tasks (one per line before: 21 s); the time is
    benchmarks/xplane_lines.py's (0.7 s here)."""
    from runlens.analyzer.sources import xplane_wire

    space = xplane_pb2.XSpace()
    plane = space.planes.add(id=1, name="/host:CPU")
    plane.event_metadata[1].CopyFrom(xplane_pb2.XEventMetadata(id=1, name="a/MatMul:MatMul"))
    for i in range(100_000):
        plane.lines.add(id=i, name=f"t{i}").events.add(metadata_id=1, offset_ps=i,
                                                       duration_ps=3)
    path = tmp_path / "lines.xplane.pb"
    path.write_bytes(space.SerializeToString())
    for native in (True, False):
        (read,) = xplane_wire.read_planes(path, native=native)
        batches = list(read.batches((), 2))
        assert sum(len(b.names) for b in batches) == 100_000
        assert len(batches) <= 30, len(batches)
        assert sum(len(b.mid) for b in batches) == 100_000
    run = load_run(path, use_cache=False)
    assert run.executions.height == 100_000
    assert run.threads.height == 100_000


# ----------------------------------------------------------------------------- paths

_SPECIALS = """
import json, os, sys
from click.testing import CliRunner
from runlens.cli import main
out = []
for args in json.loads(sys.argv[1]):
    r = CliRunner().invoke(main, ["summary", "--no-cache", *args[:1 if len(args) == 2 else 3]])
    out.append([args, r.exit_code, r.output])
# VmHWM, not ru_maxrss: that one keeps the forking parent's high-water mark across exec
peak = next(int(ln.split()[1]) for ln in open("/proc/self/status")
            if ln.startswith("VmHWM")) // 1024
print(json.dumps({"results": out, "peak_mib": peak}))
"""


def test_special_files_are_refused_before_any_read_in_every_source(tmp_path):
    """FIFOs, /dev/zero links and sockets named like each source's files, in its folder
    and as the path itself: never opened (a FIFO named *.xplane.pb hung; /dev/zero read as
    events grew to 5.4 GB), reported, the other files read; a gzip bomb of empty objects
    refused before parsing. In a subprocess, with a timeout and its peak memory."""
    import socket

    src = fr.SOURCES
    layouts = {  # folder -> (files copied into it, a name the source reads)
        "xplane": ([fr.XPLANES[0]], "x.xplane.pb"),
        "tracejson": ([fr.TRACE], "x.trace.json.gz"),
        "timeline": (sorted((src / "profilerhook").glob("timeline-*.json")), "timeline-9.json"),
        "runmetadata": ([fr.RUN_METADATA], "run_metadata_9.pb"),
        "events": ([fr.EVENTS], "events.out.tfevents.9"),
        "tfprof": ([src / "tfprof" / "profile_4"], "profile_9"),
    }
    cases = []
    for kind, (files, special) in layouts.items():
        folder = tmp_path / kind
        folder.mkdir()
        for f in files:
            shutil.copy(f, folder / f.name)
        names = ({"fifo-": "profile_97", "zero-": "profile_98", "sock-": "profile_99"}
                 if kind == "tfprof" else {w: w + special for w in ("fifo-", "zero-", "sock-")})
        os.mkfifo(folder / names["fifo-"])
        os.symlink("/dev/zero", folder / names["zero-"])
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(folder / names["sock-"]))
        cases.append([str(folder), names])
        cases.append(["--source", kind, str(folder / names["fifo-"])])
        cases.append(["--source", kind, "/dev/zero"])
    # Small files that would grow: 245 KB of gzip holding 240 MiB of `{},` (~6 GB parsed).
    bomb = tmp_path / "bomb.trace.json.gz"
    bomb.write_bytes(gzip.compress(b'{"traceEvents":[' + b"{}," * (80 << 20) + b"{}]}"))
    cases += [["--source", "tracejson", str(bomb)], ["--source", "timeline", str(bomb)]]
    # 20 MB loose RunMetadata of no content (tests/faults.py's kinds): empty node stats
    # took 2 GB and 5 s (walked with protobuf), empty partition graphs 630 MB (detection)
    for kind in ("zeros", "empty-graphs", "empty-step-stats", "empty-node-stats"):
        crafted = tmp_path / kind / "run_metadata_1.pb"
        crafted.parent.mkdir()
        faults.write_crafted(crafted, kind, 20 << 20)
        cases.append(["--source", "runmetadata", str(crafted)])
    # 3 MB of empty tfprof `nodes` entries (20 MB of them took 1.9 GB)
    crowded = tmp_path / "tfprof-crowded" / "profile_1"
    crowded.parent.mkdir()
    crowded.write_bytes(b"\x0a\x00" * 1_500_000)
    cases.append(["--source", "tfprof", str(crowded)])
    # 20 MB of empty XSpace.errors strings after a plane (0.5 GB when parsed whole)
    errors = tmp_path / "errors.xplane.pb"
    errors.write_bytes(fr.XPLANES[0].read_bytes() + b"\x12\x00" * (10 << 20))
    cases.append([str(errors), {}])
    proc = subprocess.run([sys.executable, "-c", _SPECIALS, json.dumps(cases)],
                          capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONPATH": str(ROOT.parent)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    for args, code, output in report["results"]:
        assert "Traceback" not in output
        if len(args) == 2:  # the folder: read, each special file a warning
            assert code == 0, (args, output)  # (and the file of empty errors: read)
            for name in args[1].values():
                assert [ln for ln in output.splitlines() if name in ln and "skipped" in ln], \
                    (args, name, output)
        else:
            assert code == 2 and len(output.strip().splitlines()) == 1, (args, output)
    assert report["peak_mib"] < 1024, report["peak_mib"]


@pytest.mark.parametrize("kind", ["xplane", "tracejson", "timeline", "runmetadata", "events"])
def test_any_byte_in_a_file_or_folder_name_works_shown_escaped(tmp_path, kind):
    """A non-UTF-8 xplane file name exited 3 (the worker name could not be stored)."""
    files = {"xplane": (fr.XPLANES[0], b"h\xff.xplane.pb"),
             "tracejson": (fr.TRACE, b"h\xff.trace.json.gz"),
             "timeline": (fr.TIMELINE, b"timeline-\xff3.json"),
             "runmetadata": (fr.RUN_METADATA, b"run_metadata_\xff1.pb"),
             "events": (fr.EVENTS, b"events.out.tfevents.\xff")}
    source, name = files[kind]
    folder = os.path.join(os.fsencode(tmp_path), b"dir\xfe")
    os.mkdir(folder)
    target = os.path.join(folder, name)
    shutil.copy(source, os.fsdecode(target))
    for path in (folder, target):
        result = run_cli(["summary", "--no-cache", os.fsdecode(path)])
        assert "\\udc" not in result.output
    if kind in ("xplane", "tracejson"):  # the worker is named after the file
        assert "h\\xff" in result.output


# ----------------------------------------------------------------------------- run dir


def test_graph_and_op_log_that_cannot_be_read_are_reported_unreadable(run_copy):
    """Not "missing": a FIFO graph.pb (never opened) and an op_log.pb folder."""
    run_dir = run_copy("mlp")
    (run_dir / "graph.pb").unlink()
    os.mkfifo(run_dir / "graph.pb")
    (run_dir / "op_log.pb").unlink()
    (run_dir / "op_log.pb").mkdir()
    run = load_run(run_dir, use_cache=False)
    assert "could not be read" in run.lacks["graph"]
    assert [w for w in run.warnings if "graph.pb" in w and "FIFO" in w]
    assert [w for w in run.warnings if "op_log.pb" in w and "directory" in w]
    load_run(run_dir)  # the cache writer never opens the FIFO either


def test_a_file_named_runlens_keeps_the_cache_in_the_user_dir_silently(run_copy):
    run_dir = run_copy("mlp")
    (run_dir / ".runlens").write_text("not runlens's")
    from runlens.analyzer import cache

    load_run(run_dir)
    cache.wait()
    again = load_run(run_dir)
    assert callable(again._frames["executions"])  # read from the user cache dir
    assert not [w for w in again.warnings if "cache" in w or "key.json" in w]
    assert (run_dir / ".runlens").read_text() == "not runlens's"


def test_graphs_of_a_partition_are_parsed(tmp_path):
    """Guard: a good partition graph in a loose RunMetadata still gives op types."""
    raw = fr.RUN_METADATA.read_bytes()
    md = config_pb2.RunMetadata.FromString(raw)
    md.partition_graphs.add().CopyFrom(graph_pb2.GraphDef(
        node=[node_def_pb2.NodeDef(name="only", op="MatMul")]))
    (tmp_path / "run_metadata_1.pb").write_bytes(md.SerializeToString())
    run = load_run(tmp_path, use_cache=False)
    assert "only" in run.graph_nodes.get_column("name").to_list()


def test_step_numbers_of_many_unnumbered_inputs_are_linear():
    """A crafted event file of 950k tagged records ran for more than 5 minutes: each
    unnumbered input took max() of every step so far."""
    import time

    from runlens.analyzer.sources.stepnumbers import distinct_steps

    t = time.perf_counter()
    steps = distinct_steps([None, 5, 5, *([None] * 300_000)])
    assert steps[:4] == [1, 5, 6, 7] and len(set(steps)) == len(steps)
    assert time.perf_counter() - t < 5


def test_an_event_file_of_tiny_records_is_one_line_in_bounded_memory(tmp_path):
    """95k tagged records of nothing (2 MB): exit 2, one warning per unreadable step up to
    100 and then a count, not 95k lines kept."""
    import struct

    from runlens.analyzer.proto import event_pb2
    from runlens.analyzer.sources.events import masked_crc

    event = event_pb2.Event()
    event.tagged_run_metadata.tag = "s"
    rec = event.SerializeToString()
    head = struct.pack("<Q", len(rec))
    one = head + struct.pack("<I", masked_crc(head)) + rec + struct.pack("<I", masked_crc(rec))
    path = tmp_path / "events.out.tfevents.1"
    path.write_bytes(one * 95_000)
    result = run_cli(["summary", "--no-cache", path], expect_exit=2)
    assert len(result.output.strip().splitlines()) == 1
    assert "95,000 skipped" in result.output or "95000 skipped" in result.output
