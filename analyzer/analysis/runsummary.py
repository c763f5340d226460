"""What `analyze summary` prints (and the report's header): the run's shape and its
step-time statistics over the steps an analysis covers. Above step selection
(analysis.stepselect), which is above the step times (analysis.steps)."""

from __future__ import annotations

from typing import Any

from ..model import Run
from ..readfile import shown
from .hostsummary import pieces, summary_of


def summary(run: Run, choice: Any = None) -> dict:
    """What `analyze summary` prints (analysis.hostsummary.summary_of, the one summary):
    shape of the run and step-time statistics over the steps `choice` keeps
    (analyzer.analysis.stepselect.StepChoice; default: warm-up and outlier steps left out),
    the steps left out and why, every step's time, and what the input lacks."""
    return summary_of([pieces(run)], choice, paths=[shown(p) for p in run.paths],
                      warnings=run.warnings, lacks=run.lacks)
