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
