"""Paths of the xplane fixtures, and their Run as every command loads it."""

from __future__ import annotations

from pathlib import Path

from runlens.analyzer.load import load_run
from runlens.analyzer.model import Run

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures" / "xplane"
GPU_XPLANE = (REPO.parent / "shared" / "data" / "xplane"
              / "tensorflow__profiler__GPU-multi-worker__34.83.195.179_6003.xplane.pb")
CAPTURED = ("tf_function", "keras_fit", "jax_train")


def fixture_file(name: str) -> Path:
    return next((FIXTURES / name).rglob("*.xplane.pb"))


def xplane_run(path: Path) -> Run:
    return load_run(path, use_cache=False, jobs=1)


def hlo_modules(logdir: Path):  # -> Iterator[HloModuleProto]
    """Every HLO module of a profile's metadata plane, read with protobuf (the oracle
    side of the HLO tests)."""
    from runlens.analyzer.proto import hlo_pb2
    from runlens.analyzer.sources.xplane import xplane_files
    from runlens.analyzer.sources.xplane_wire import read_planes

    for plane in read_planes(xplane_files(logdir)[0], False):
        if plane.name != "/host:metadata":
            continue
        stat = {k: v.name for k, v in plane.meta.stat_metadata.items()}
        for meta in plane.meta.event_metadata.values():
            for s in meta.stats:
                if stat.get(s.metadata_id) == "Hlo Proto":
                    yield hlo_pb2.HloProto.FromString(s.bytes_value).hlo_module
