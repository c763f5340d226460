"""Chrome Trace events of traced steps (docs/timeline.md): `build_trace` (build.py) over
the executions (events.py), lanes (lanes.py), dataflow arrows and critical paths
(flows.py), memory counters (memory.py); `select_steps` (steps.py) chooses the steps."""

from .build import build_trace
from .model import SCHEMA, Part, TimelineOptions, Trace
from .steps import parse_step_range, select_steps

__all__ = ["SCHEMA", "Part", "TimelineOptions", "Trace", "build_trace", "parse_step_range",
           "select_steps"]
