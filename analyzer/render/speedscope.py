"""A tree view as a speedscope file (https://www.speedscope.app/file-format-schema.json).

Two sampled profiles over the same frames: time (microseconds) and requested memory
(bytes); each displayed node is one sample, its stack the path from the top of the tree
(analyzer.render.stacks). Open it at speedscope.app or with `speedscope FILE`.
"""

from __future__ import annotations

import json
from typing import Any

from ..analysis.views import View
from .stacks import SAMPLE_TYPES, Frame, frame, stacks

SCHEMA_URL = "https://www.speedscope.app/file-format-schema.json"


def view_speedscope(view: View) -> str:
    frames: dict[Frame, int] = {}
    samples: list[list[int]] = []
    weights: dict[str, list[int]] = {m: [] for m in SAMPLE_TYPES}
    for names, values in stacks(view, "speedscope"):
        samples.append([frames.setdefault(frame(view.kind, n), len(frames)) for n in names])
        for metric in SAMPLE_TYPES:
            weights[metric].append(values[metric])
    profiles: list[dict[str, Any]] = []
    for metric, (kind, unit) in SAMPLE_TYPES.items():
        profiles.append({
            "type": "sampled", "name": f"{view.kind}: {kind}", "unit": unit,
            "startValue": 0, "endValue": sum(weights[metric]),
            "samples": samples, "weights": weights[metric],
        })
    doc = {
        "$schema": SCHEMA_URL,
        "name": f"runlens {view.kind} view",
        "exporter": "runlens",
        "activeProfileIndex": 0,
        "shared": {"frames": [_frame_json(f) for f in frames]},
        "profiles": profiles,
    }
    return json.dumps(doc, separators=(",", ":")) + "\n"


def _frame_json(f: Frame) -> dict[str, Any]:
    out: dict[str, Any] = {"name": f.name}
    if f.file is not None:
        out["file"] = f.file
        out["line"] = f.line
    return out
