"""What runs inside the training process: the capture side, the only part of runlens that
imports TensorFlow or JAX (each module imports its framework itself, when used).

- `tf1`: the TF1 `CaptureHook` (SessionRunHook) and `trace_step` -> a run directory;
- `tf2`: the TF2 Keras `ProfileCallback` and `profile()` -> xplane files + function graphs;
- `jax`: JAX's `profile()` / `@profiled` -> xplane files with `train` step markers;
- `logs`: quiets TensorFlow's per-step log lines while tracing on CPU.

`from runlens.analyzer.capture import CaptureHook` (the name before the move) still works:
the TF1 names are loaded from `tf1` on first use, so importing this package imports no
framework.
"""

from __future__ import annotations

import importlib
from typing import Any

_TF1_NAMES = ("CaptureHook", "StepTimer", "trace_step")


def __getattr__(name: str) -> Any:
    if name in _TF1_NAMES:
        return getattr(importlib.import_module(".tf1", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
