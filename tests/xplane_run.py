"""A Run from an xplane path, through the xplane source (as analyzer.load does for a run
dir: raw frames -> derive_keys -> Run). Until load_run reads every source, the xplane
tests build their runs here."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from analyzer.model import Run, derive_keys
from analyzer.sources import detect

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures" / "xplane"
GPU_XPLANE = (REPO.parent / "shared" / "data" / "xplane"
              / "tensorflow__profiler__GPU-multi-worker__34.83.195.179_6003.xplane.pb")
CAPTURED = ("tf_function", "keras_fit", "jax_train")


def fixture_file(name: str) -> Path:
    return next((FIXTURES / name).rglob("*.xplane.pb"))


def xplane_run(path: Path) -> Run:
    source = detect(path)
    parts = [source.read(part, 1, None) for part in source.parts(path)]
    frames: dict[str, pl.DataFrame] = {}
    for name in parts[0].frames:
        got = [p.frames[name] for p in parts]
        if name == "executions":  # each part numbers its keys from 0
            offset, shifted = 0, []
            for p, f in zip(parts, got, strict=True):
                shifted.append(f.with_columns(pl.col("key_id") + offset))
                offset += p.frames["keys"].height
            got = shifted
        frames[name] = pl.concat(got, how="vertical_relaxed")
    frames["keys"] = derive_keys(frames["keys"], frames["graph_nodes"])
    lacks = {k: v for p in parts for k, v in p.lacks.items()}
    run = Run.from_frames(frames, paths=[path], warnings=[w for p in parts for w in p.warnings])
    run.lacks = lacks  # type: ignore[attr-defined]
    return run
