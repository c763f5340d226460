"""A tree view (scopes or code) as weighted call stacks, for flame-graph formats.

Each displayed node becomes one stack (the names from the top of the tree down to it)
whose weight is what the node holds that its displayed children do not: its total minus
theirs. With the default options that is the node's own number; with thresholds or
regexes that hide nodes, the hidden part stays with the nearest displayed ancestor, so a
flame graph's totals always equal the view's (and `analyze scopes`' text); hidden
top-level nodes add up in one "(not displayed)" frame.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..analysis.views import TREE_KINDS, View
from ..errors import RunlensError

# Metric column -> (sample type, unit) of the flame-graph formats; time first.
SAMPLE_TYPES = {"micros": ("time", "microseconds"), "requested_bytes": ("memory", "bytes")}
NOT_DISPLAYED = "(not displayed)"  # top-level nodes the options hide
_TRACE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<function>.*)$")


@dataclass(frozen=True)
class Frame:
    name: str
    file: str | None = None
    line: int | None = None


def frame(kind: str, name: str) -> Frame:
    """A code frame's trace string ("file.py:12:fn") splits into file, line and name."""
    m = _TRACE.match(name) if kind == "code" else None
    if m:
        return Frame(name, m["file"], int(m["line"]))
    return Frame(name)


def stacks(view: View, fmt: str) -> Iterator[tuple[list[str], dict[str, int]]]:
    """(names from the top down, {metric: weight}) per displayed node with any weight."""
    if view.kind not in TREE_KINDS:
        raise RunlensError(f"--format {fmt} draws a tree: use it with `analyze code` or "
                           f"`analyze scopes`, not `analyze {view.kind}`")

    def walk(node: dict[str, Any], path: list[str]) -> Iterator[tuple[list[str], dict[str, int]]]:
        here = [*path, str(node["name"])]
        weights = {m: max(0, int(node[m]) - sum(int(c[m]) for c in node["children"]))
                   for m in SAMPLE_TYPES}
        if any(weights.values()):
            yield here, weights
        for child in node["children"]:
            yield from walk(child, here)

    tops = view.tree()
    for top in tops:
        yield from walk(top, [])
    rest = {m: max(0, int(view.root.get(m, 0)) - sum(int(t[m]) for t in tops))
            for m in SAMPLE_TYPES}
    if any(rest.values()):
        yield [NOT_DISPLAYED], rest
