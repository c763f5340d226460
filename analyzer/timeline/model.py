"""The timeline's event model: its options, and a Trace of Parts, each the events of one
kind as rows of integer columns (one row per event) with the line that renders a row
(analyzer/timeline/jsonrows.py), possibly still being built in a second thread."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from .jsonrows import Rows

SCHEMA = 1


@dataclass(frozen=True)
class TimelineOptions:
    steps: tuple[int, ...]
    dataflow: bool = True
    memory: bool = True
    critical_path: bool = True
    max_counter_points: int = 2000  # per allocator per step


class Part:
    """Events of one kind: rows of a frame rendered as a JSON line each (jsonrows.Rows), or
    the future of them, still being built in a second thread."""

    def __init__(self, kind: str, rows: Rows | Future[Any],
                 make: Callable[[Any], Rows] | None = None) -> None:
        self.kind = kind
        self._rows = rows
        self._make = make  # the future's result -> rows

    @property
    def ready(self) -> bool:
        return not isinstance(self._rows, Future) or self._rows.done()

    @property
    def rows(self) -> Rows:
        if isinstance(self._rows, Future):
            result = self._rows.result()
            self._rows = self._make(result) if self._make else result
        assert isinstance(self._rows, Rows)
        return self._rows

    @property
    def frame(self) -> pl.DataFrame:
        return self.rows.frame


@dataclass
class Trace:
    metadata: list[dict[str, Any]]  # process / thread names and sort order ("ph": "M")
    parts: list[Part]
    other: dict[str, Any] = field(default_factory=dict)

    @property
    def events(self) -> int:
        return len(self.metadata) + sum(p.frame.height for p in self.parts)
