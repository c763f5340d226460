"""The advisor's building blocks: Severity, Finding, Checker, the registry, and Analysis.

A checker is a small class with a stable `code` ("RL105"), a kebab-case `name`, a
`title`, a default `severity`, and `check(analysis) -> Iterable[Finding]`. Its docstring
says what it detects, why it matters and how to fix it (`analyze advise --list` prints
it). Checkers read the run through `Analysis`, which computes shared frames once (step
times, per-node numbers, critical paths); they never walk protobuf messages.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import polars as pl

from ..analyzer.analysis.graph import CriticalPath, step_critical_paths
from ..analyzer.analysis.nodestats import node_stats
from ..analyzer.analysis.steps import median_step, step_times
from ..analyzer.analysis.stepselect import StepChoice, analysed, chosen_steps
from ..analyzer.errors import RunlensError
from ..analyzer.model import Run


class Severity(enum.IntEnum):
    INFO = 1
    WARNING = 2
    ERROR = 3

    def __str__(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Severity:
        try:
            return cls[text.upper()]
        except KeyError:
            raise RunlensError(f"unknown severity {text!r} (info, warning, error)") from None


@dataclass(frozen=True)
class Finding:
    """One thing the advisor found: what, where, the numbers behind it, what to do, and
    `impact`, the share of step time at stake (0..1), by which findings are sorted."""

    code: str
    name: str
    severity: Severity
    message: str
    where: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    suggestion: str = ""
    impact: float = 0.0

    def sort_key(self) -> tuple:
        return (-int(self.severity), -round(self.impact, 6), self.code, self.message)

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code, "name": self.name, "severity": str(self.severity),
            "message": self.message, "where": self.where, "evidence": self.evidence,
            "suggestion": self.suggestion, "impact": round(self.impact, 6),
        }


class Checker:
    """Base class; subclasses set the class attributes and implement check()."""

    code: ClassVar[str]
    name: ClassVar[str]
    title: ClassVar[str]
    severity: ClassVar[Severity] = Severity.INFO
    # When a finding gets another severity than `severity` (`advise --list` shows it), e.g.
    # "warning when the device is idle for half of the step or more".
    severity_note: ClassVar[str] = ""
    # What of the run it needs (names of Run.lacks: "memory", "outputs", "graph", "code");
    # a run whose source lacks one reports the checker as skipped, with the reason.
    needs: ClassVar[frozenset[str]] = frozenset()

    def skip_reason(self, run: Run) -> str | None:
        """Why this checker cannot run on `run` (what it needs that the input lacks)."""
        missing = sorted(self.needs & set(run.lacks))
        return "; ".join(f"{what}: {run.lacks[what]}" for what in missing) or None

    def check(self, analysis: Analysis) -> Iterable[Finding]:
        raise NotImplementedError

    def finding(self, message: str, *, severity: Severity | None = None,
                impact: float = 0.0, **kw: Any) -> Finding:
        return Finding(code=self.code, name=self.name, severity=severity or self.severity,
                       message=message, impact=max(0.0, min(1.0, impact)), **kw)


REGISTRY: dict[str, type[Checker]] = {}


def register(cls: type[Checker]) -> type[Checker]:
    """Class decorator: add a checker; duplicate codes or names are a programming error."""
    for other in REGISTRY.values():
        if other.code == cls.code or other.name == cls.name:
            raise ValueError(f"checker {cls.__name__}: code {cls.code} / name {cls.name} "
                             f"already used by {other.__name__}")
    REGISTRY[cls.code] = cls
    return cls


class Analysis:
    """The Run plus derived frames that several checkers need, each computed once.

    `run` holds the steps `choice` keeps (analyzer.analysis.stepselect: warm-up and outlier steps
    left out by default), so averages, the median step and sampled steps leave them out;
    `checked_step_times` is what a checker of step times themselves reads."""

    def __init__(self, run: Run, choice: StepChoice | None = None) -> None:
        self.choice = choice or StepChoice()
        self.run = analysed(run, self.choice)
        self._paths: dict[tuple[int, str], CriticalPath] = {}

    @functools.cached_property
    def checked_step_times(self) -> pl.DataFrame:
        """worker, step, us of the steps in range, warm-up left out unless included, but
        outliers kept (a straggler is an outlier: what RL109 looks for)."""
        flags = chosen_steps(self.run, self.choice)
        kept = pl.col("in_range") & (pl.lit(self.choice.include_warmup) | ~pl.col("warmup"))
        return flags.filter(kept).select("worker", "step", us="step_us")

    @functools.cached_property
    def step_times(self) -> pl.DataFrame:
        """worker, step, start_ns, end_ns, duration_ns."""
        return step_times(self.run)

    @functools.cached_property
    def mean_step_us(self) -> float:
        return num(self.step_times["duration_ns"].mean()) / 1000.0

    @functools.cached_property
    def nodes(self) -> pl.DataFrame:
        """Per node, average over the steps analysed (the views' step -1 numbers; work
        outside the steps left out: analysis.outside)."""
        return node_stats(self.run, -1, "steps")

    @functools.cached_property
    def median_step(self) -> int:
        return median_step(self.run)

    def critical_path(self, step: int, worker: str | None = None) -> CriticalPath:
        return self.critical_paths([step], worker)[0]

    def critical_paths(self, steps: list[int], worker: str | None = None
                       ) -> list[CriticalPath]:
        """The critical paths of `steps` (one worker), each computed once per Analysis,
        those not yet known in one pass."""
        worker = worker or self.run.workers[0]
        missing = [s for s in steps if (s, worker) not in self._paths]
        if missing:
            for path in step_critical_paths(self.run, missing, worker):
                self._paths[(path.step, worker)] = path
        return [self._paths[(s, worker)] for s in steps]

    def sample_steps(self, n: int = 16) -> list[int]:
        """Up to n steps spread evenly over the run (critical paths cost per step)."""
        steps = self.run.steps
        if len(steps) <= n:
            return steps
        return [steps[round(i * (len(steps) - 1) / (n - 1))] for i in range(n)]

    def per_step(self, us: float) -> float:
        """A per-step time in microseconds as a share of the mean step."""
        return us / self.mean_step_us if self.mean_step_us else 0.0

    @functools.cached_property
    def workers(self) -> int:
        """How many workers the run holds (1 at least)."""
        return max(1, len(self.run.workers))

    def per_worker_step(self, us: float) -> float:
        """A per-step time summed over the run's workers (as `nodes` sums it), as a share
        of a worker's mean step: each worker's ops fill its own step, so the sum against
        one step overstated shares N times (two workers: `CollectiveReduceV2 [64.4% of
        step]` for 30-34% on each)."""
        return self.per_step(us / self.workers)


def num(value: Any) -> float:
    """A polars scalar (mean, median, ...) as a float; None counts as 0."""
    return float(value) if value is not None else 0.0


def pct(share: float) -> str:
    return f"{100 * share:.1f}%"


Check = Callable[[Analysis], Iterable[Finding]]
