"""The C reader of a ProfileProto's runs (analyzer/_tfprof.c) against the protobuf walk it
replaces: the same executions frame, row for row, on real profiles (the committed one, and
profiles serialized by a live tfprof Profiler from captured runs, GPU ones included:
accelerator lanes, while loops' repeated runs); both reject a run time that is not
(start, duration) with one line naming the file."""

from __future__ import annotations

import importlib.util

import pytest

from runlens.analyzer.proto import tfprof_log_pb2
from runlens.analyzer.sources import tfprof
from tests.conftest import CAPTURED, ROOT, run_cli

PROFILE = ROOT / "fixtures" / "sources" / "tfprof" / "profile_4"
HAS_TF = importlib.util.find_spec("tensorflow") is not None
needs_reader = pytest.mark.skipif(tfprof._tfprof is None, reason="C reader not built")


def _both(raw: bytes) -> tuple:
    profile = tfprof_log_pb2.ProfileProto.FromString(raw)
    return tfprof._executions(profile), tfprof._executions(profile, raw)


@needs_reader
def test_reader_equals_the_walk_on_the_committed_profile():
    walked, read = _both(PROFILE.read_bytes())
    assert read.height > 0 and read["mem_total_bytes"].sum() > 0
    assert read.equals(walked)


@needs_reader
@pytest.mark.skipif(not HAS_TF, reason="serializing a live Profiler needs TensorFlow")
@pytest.mark.parametrize("name", [*CAPTURED, "gpu_kittibox", "gpu_mnist"])
def test_reader_equals_the_walk_on_live_profiles(name):
    from tests import tfprof_oracle as oracle
    from tests.conftest import FIXTURES

    prof = oracle.profiler(FIXTURES / name, graph=not name.startswith("gpu_"))
    walked, read = _both(prof.serialize_to_string())
    assert read.height > 0
    assert read.equals(walked)


def test_a_run_time_of_three_numbers_is_one_line_naming_the_file(tmp_path):
    profile = tfprof_log_pb2.ProfileProto.FromString(PROFILE.read_bytes())
    node = next(n for n in profile.nodes.values() if n.execs)
    ex = next(iter(node.execs.values()))
    times = next(iter((ex.cpu_execs or ex.accelerator_execs).values())).times[0]
    times.int64_values.append(7)
    bad = tmp_path / "profile_4"
    bad.write_bytes(profile.SerializeToString())
    result = run_cli(["ops", bad, "--no-cache"], expect_exit=2)
    assert result.output.count("\n") == 1
    assert "profile_4: not a tfprof ProfileProto" in result.output
    with pytest.raises(ValueError):
        tfprof._walk_runs(profile)
