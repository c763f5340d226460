"""The reading side's last cases (issue 29 point 4; promises in docs/robustness.md): step
numbers beyond int64, manifests that are not regular files, an unreadable op_log.pb, a
function-graphs file that is not a GraphDef, and folder and worker names in any bytes.
Each ends in exit 0 (the input skipped with a warning naming it) or exit 2 (one line
naming it), never exit 3; fixtures are made in tmp_path from the committed ones."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys

import pytest

from runlens.analyzer.load import load_run
from runlens.analyzer.proto import config_pb2, event_pb2
from tests import faults_readers as fr
from tests.conftest import FIXTURES, ROOT, run_cli

BIG = "999999999999999999999"  # 10^21: beyond int64 (9.2 x 10^18)

# ----------------------------------------------------------------------------- step numbers


@pytest.mark.parametrize("kind", ["runmetadata", "timeline"])
def test_a_step_number_beyond_int64_in_a_file_name_is_skipped_or_refused(tmp_path, kind):
    """run_metadata_<10^21>.pb / timeline-<10^21>.json exited 3 (OverflowError, polars'
    Int128): in a folder that file is skipped with a warning, alone it is exit 2."""
    source, name = ((fr.RUN_METADATA, f"run_metadata_{BIG}.pb") if kind == "runmetadata"
                    else (fr.TIMELINE, f"timeline-{BIG}.json"))
    folder = tmp_path / "folder"
    folder.mkdir()
    shutil.copy(source, folder / source.name)
    shutil.copy(source, folder / name)
    run = load_run(folder, use_cache=False)
    assert [w for w in run.warnings if name in w and "beyond int64" in w], run.warnings
    assert sorted(run.steps) == [int(fr.TIMELINE.stem.split("-")[1]) if kind == "timeline"
                                 else 1]
    lone = tmp_path / "lone" / name
    lone.parent.mkdir()
    shutil.copy(source, lone)
    result = run_cli(["summary", "--no-cache", lone], expect_exit=2)
    assert result.output.count("\n") == 1 and name in result.output
    assert "beyond int64" in result.output


def _record(event: event_pb2.Event) -> bytes:
    from runlens.analyzer.sources.events import masked_crc

    rec = event.SerializeToString()
    head = struct.pack("<Q", len(rec))
    return head + struct.pack("<I", masked_crc(head)) + rec + struct.pack("<I", masked_crc(rec))


def test_a_tag_step_beyond_int64_in_an_event_file_skips_that_step(tmp_path):
    """Tags step_<10^21> and one of 100,000 digits (int() refuses over 4,300) beside a good
    one: those two steps skipped with a warning each, the good one read."""
    raw = fr.RUN_METADATA.read_bytes()
    records = b""
    for tag in ("step_7", f"step_{BIG}", "step_" + "9" * 100_000):
        event = event_pb2.Event(step=1)
        event.tagged_run_metadata.tag = tag
        event.tagged_run_metadata.run_metadata = raw
        records += _record(event)
    path = tmp_path / "events.out.tfevents.1"
    path.write_bytes(records)
    run = load_run(path, use_cache=False)
    assert sorted(run.steps) == [7]
    assert len([w for w in run.warnings if "beyond int64" in w]) == 2, run.warnings
    # alone, the huge tag is that file's one line
    event = event_pb2.Event(step=1)
    event.tagged_run_metadata.tag = f"step_{BIG}"
    event.tagged_run_metadata.run_metadata = raw
    path.write_bytes(_record(event))
    result = run_cli(["summary", "--no-cache", path], expect_exit=2)
    assert result.output.count("\n") == 1 and path.name in result.output


# ----------------------------------------------------------------------------- manifests

_MANIFESTS = """
import sys
from click.testing import CliRunner
from runlens.cli import main
r = CliRunner().invoke(main, ["summary", "--no-cache", sys.argv[1]])
print(r.exit_code)
print(r.output)
peak = next(int(ln.split()[1]) for ln in open("/proc/self/status")
            if ln.startswith("VmHWM")) // 1024
print("peak", peak)
"""


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "huge"])
def test_a_manifest_that_is_not_a_small_regular_file_is_ignored_by_name(run_copy, kind):
    """A FIFO manifest.json hung, a link to /dev/zero exited 3 (MemoryError): read through
    readfile (regular files only, at most 256 MiB), it is one warning and the steps are
    read. In a subprocess, with a timeout and its peak memory."""
    run_dir = run_copy("mlp")
    manifest = run_dir / "manifest.json"
    manifest.unlink()
    if kind == "fifo":
        os.mkfifo(manifest)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", manifest)
    else:  # sparse: 300 MiB of nothing, refused by its size before it is read
        with open(manifest, "wb") as f:
            f.truncate(300 << 20)
    proc = subprocess.run([sys.executable, "-c", _MANIFESTS, str(run_dir)], timeout=120,
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT.parent)})
    code, *lines = proc.stdout.strip().splitlines()
    assert code == "0", proc.stdout + proc.stderr[-2000:]
    said = [ln for ln in lines if "manifest.json" in ln]
    assert said and all("ignored" in ln for ln in said), lines
    assert any(ln.startswith("steps      8") for ln in lines), lines
    assert int(lines[-1].split()[1]) < 600, lines[-1]


def test_the_capture_side_never_blocks_on_a_fifo_manifest(tmp_path):
    """RunDirWriter adopts the steps of an earlier manifest: reading a FIFO one blocked the
    training process for ever (its later writes stream to it: analyzer/output.py)."""
    from runlens.analyzer.rundir import RunDirWriter

    os.mkfifo(tmp_path / "manifest.json")
    assert RunDirWriter(tmp_path)._steps == {}


# ----------------------------------------------------------------------------- side files


def test_an_unparseable_op_log_is_said_unreadable_not_empty(run_copy):
    run_dir = run_copy("mlp")
    (run_dir / "op_log.pb").write_bytes(b"\x0a\xff\xff")
    run = load_run(run_dir, use_cache=False)
    assert [w for w in run.warnings if "op_log.pb" in w and "not a readable" in w]
    assert run.lacks["code"].startswith("op_log.pb could not be read"), run.lacks
    assert run.lacks["float_ops"] == run.lacks["code"]
    assert not [v for v in run.lacks.values() if "holds no code traces" in v]


def _bad_function_graphs(raw: bytes) -> bytes:
    md = config_pb2.RunMetadata.FromString(raw)
    md.function_graphs[0].partition_graphs[0].node[0].attr["data_format"].s = b"\xff\xfe"
    return md.SerializeToString()


@pytest.mark.parametrize("case", ["not-utf8-attr", "a-graphdef", "garbage"])
def test_a_bad_function_graphs_file_is_skipped_and_the_profile_read(tmp_path, case):
    """A runlens.graphs.pb whose graph is not a GraphDef refused the whole profile (exit 2):
    now a warning naming it, and the profile analysed without graphs."""
    src = ROOT / "fixtures" / "xplane" / "keras_fit" / "plugins" / "profile" / "run1"
    run1 = tmp_path / "run1"
    shutil.copytree(src, run1)
    graphs = run1 / "runlens.graphs.pb"
    clean = load_run(src, use_cache=False)
    graphs.write_bytes({"not-utf8-attr": _bad_function_graphs(graphs.read_bytes()),
                        "a-graphdef": (FIXTURES / "mlp" / "graph.pb").read_bytes(),
                        "garbage": b"\x0a\xff\xff"}[case])
    run = load_run(run1, use_cache=False)
    assert [w for w in run.warnings if "runlens.graphs.pb" in w and "no dataflow graph" in w]
    assert "could not be read" in run.lacks["graph"]
    assert run.executions.height == clean.executions.height
    assert run.graph_nodes.height == 0


# ----------------------------------------------------------------------------- names


def _layouts(base: bytes) -> dict[str, bytes]:
    """Each layout with a folder name (or a worker's) that is not UTF-8, made under
    `base`: the path to analyse."""
    xplane = ROOT / "fixtures" / "xplane" / "keras_fit"
    made = {}
    for kind, src, rel in (("xplane folder", xplane, b"xp\xff"),
                           ("run dir", FIXTURES / "mlp", b"run\xff"),
                           ("trace.json folder", ROOT / "fixtures" / "tracejson" / "keras_fit",
                            b"tj\xff")):
        shutil.copytree(src, os.fsdecode(os.path.join(base, rel)))
        made[kind] = os.path.join(base, rel)
    logdir = os.path.join(base, b"logdir")
    shutil.copytree(xplane, os.fsdecode(logdir))
    profile = os.path.join(logdir, b"plugins", b"profile")
    os.rename(os.path.join(profile, b"run1"), os.path.join(profile, b"r\xff"))
    made["TensorBoard logdir"] = logdir
    multi = os.path.join(base, b"multi")
    for worker in (b"w0", b"w\xff"):
        shutil.copytree(FIXTURES / "mlp", os.fsdecode(os.path.join(multi, worker)))
    made["multi-worker run dir"] = multi
    return made


def test_folder_and_worker_names_in_any_bytes_work_everywhere(tmp_path, monkeypatch):
    """A folder (or a worker sub-folder) named b'..\\xff' exited 3 (UnicodeEncodeError
    hashing it for the cache); then the cache beside it failed in polars (which takes
    only UTF-8 paths), JSON carried lone surrogates ("\\udcff") and a worker showed as
    'w\\ufffd\\ufffd\\ufffd'. Now: the cache is written and read back beside the run, and
    every output shows the byte as \\xff (readfile.shown)."""
    import json

    monkeypatch.delenv("RUNLENS_CACHE_DIR")  # the cache beside the data (a copy here)
    for kind, path in _layouts(os.fsencode(tmp_path)).items():
        name = os.fsdecode(path)
        fresh = load_run(name)
        from runlens.analyzer import cache

        cache.wait()
        again = load_run(name)
        assert callable(again._frames["executions"]), kind  # read from the cache
        assert again.executions.height == fresh.executions.height, kind
        texts = []
        for args in (["summary"], ["summary", "--format", "json"],
                     ["advise", "--format", "json"], ["ops", "--format", "json"]):
            result = run_cli([args[0], name, *args[1:]])
            out = result.output
            assert "\\udc" not in out and "\ufffd" not in out, (kind, args, out[-500:])
            if "json" in args:
                json.loads(result.stdout)
            texts.append(out)
        assert "\\xff" in texts[0], (kind, texts[0])
        if kind == "multi-worker run dir":
            assert "w\\xff" in again.workers, again.workers
            assert sorted(set(again.keys.get_column("worker").to_list())) == ["w0", "w\\xff"]


def test_baselines_and_compare_name_runs_in_any_bytes_as_shown(tmp_path):
    """`compare` said "base": "run\\udcff" in JSON, and a baseline saved from such a run
    stored it so; the baseline file's own non-UTF-8 name likewise."""
    import json

    base = os.fsencode(tmp_path)
    run = os.fsdecode(os.path.join(base, b"run\xff"))
    shutil.copytree(FIXTURES / "mlp", run)
    saved = os.fsdecode(os.path.join(base, b"base\xfe.json"))
    out = run_cli(["baseline", "save", "--no-cache", run, "-o", saved]).output
    assert "base\\xfe.json" in out and "\\udc" not in out
    assert "\\udc" not in open(saved, encoding="utf-8").read()
    for first in (run, saved):
        result = run_cli(["compare", "--no-cache", first, str(FIXTURES / "mlp"),
                          "--format", "json"], expect_exit=0)
        doc = json.loads(result.stdout)
        assert doc["base"].endswith(("run\\xff", "base\\xfe.json")), doc["base"]
