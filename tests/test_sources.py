"""The source registry: detection of every kind, --source, and the cache for every source
(its key covers the source's files: a changed file is never served from the cache)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

from runlens.analyzer import cache
from runlens.analyzer.load import load_run
from runlens.analyzer.sources import SOURCES, Selection, detect, registered
from tests.conftest import FIXTURES, ROOT, run_cli

SRC = ROOT / "fixtures" / "sources"
TRACES = ROOT / "fixtures" / "tracejson" / "keras_fit"
# (what to copy, the path inside the copy to read, the kind it is)
CASES = [
    (FIXTURES / "mlp", ".", "rundir"),
    (SRC / "profilerhook", ".", "timeline"),
    (SRC / "profilerhook", "timeline-3.json", "timeline"),
    (SRC / "runmetadata", ".", "runmetadata"),
    (SRC / "runmetadata", "run_metadata_1.pb", "runmetadata"),
    (SRC / "profilerhook", "events.out.tfevents.0.fixture", "events"),
    (SRC / "tfprof", ".", "tfprof"),
    (SRC / "tfprof", "profile_4", "tfprof"),
    (TRACES, ".", "tracejson"),
    (TRACES / "plugins" / "profile" / "run1", "worker0.trace.json.gz", "tracejson"),
]


def test_registry_kinds_are_unique_and_described():
    kinds = [s.kind for s in registered()]
    assert kinds == list(SOURCES) and len(set(kinds)) == len(kinds)
    assert all(s.description for s in registered())


@pytest.mark.parametrize(("folder", "inner", "kind"), CASES,
                         ids=[f"{k}-{i}" for _, i, k in CASES])
def test_detected_and_cached_per_source(folder, inner, kind, tmp_path):
    copy = tmp_path / "in"
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns(".runlens"))
    path = copy / inner
    source = detect(path)
    assert source.kind == kind
    fresh = load_run(path, use_cache=False)
    load_run(path)
    cache.wait()
    (part,) = source.parts(Path(path), Selection())
    key = cache.fingerprint(part)
    assert cache.load(part, key) is not None  # written beside the files
    cached = load_run(path)
    assert_frame_equal(cached.nodes.sort("step", "exec_idx"),
                       fresh.nodes.sort("step", "exec_idx"))
    assert cached.lacks == fresh.lacks
    changed = part.files[-1]
    os.utime(changed, ns=(0, os.stat(changed).st_mtime_ns + 10**9))
    assert cache.load(part, cache.fingerprint(part)) is not None  # touched: same content
    data = bytearray(Path(changed).read_bytes())
    data[-1] ^= 0xFF  # same size, other content, mtime restored
    mtime = os.stat(changed).st_mtime_ns
    Path(changed).write_bytes(bytes(data))
    os.utime(changed, ns=(0, mtime))
    assert cache.load(part, cache.fingerprint(part)) is None  # its file changed


def test_source_option_forces_a_kind():
    run_cli(["summary", "--no-cache", "--source", "events",
             SRC / "profilerhook" / "events.out.tfevents.0.fixture"])
    result = run_cli(["summary", "--no-cache", "--source", "tfprof", SRC / "profilerhook"],
                     expect_exit=2)
    assert result.output.count("\n") == 1 and "profile_<step>" in result.output


TRUNCATED = [
    (SRC / "profilerhook" / "timeline-3.json", "timeline", 2),
    (SRC / "runmetadata" / "run_metadata_1.pb", "runmetadata", 2),
    (SRC / "runmetadata" / "run_metadata_2.pbtxt", "runmetadata", 2),
    (SRC / "profilerhook" / "events.out.tfevents.0.fixture", "events", 0),  # earlier records
    (SRC / "tfprof" / "profile_4", "tfprof", 2),
    (TRACES / "plugins" / "profile" / "run1" / "worker0.trace.json.gz", "tracejson", 2),
]


@pytest.mark.parametrize(("original", "kind", "code"), TRUNCATED,
                         ids=[k + p.suffix for p, k, _ in TRUNCATED])
def test_a_truncated_file_of_every_kind_is_one_line_naming_it(original, kind, code, tmp_path):
    """Exit 2 with one line naming the file; an event file keeps the records before the
    cut and says which one it could not read."""
    target = tmp_path / original.name
    raw = original.read_bytes()
    target.write_bytes(raw[: len(raw) * 2 // 3])
    result = run_cli(["summary", "--no-cache", "--source", kind, target], expect_exit=code)
    lines = [line for line in result.output.splitlines() if line.startswith("analyze:")]
    assert len(lines) == 1 and str(target) in lines[0]
