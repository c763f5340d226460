"""One self-contained HTML page of a run (`analyze report`) or of a comparison
(`analyze compare --format html`): every script, style and number inline, no request to
the network, charts by a vendored partial Apache ECharts build (vendor/, docs/report.md).

The pages are built from the engine's public results (views, step times, critical path,
the advisor's findings, a Comparison), aggregated: never raw executions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..gate.compare import Comparison, Samples
from ..model import Run


def run_page(run: Run, findings: Sequence[Any], source: str, steps: Any = None) -> str:
    """The report of one run; `findings` are the advisor's (checkers.run_checks), over
    the steps `steps` (an analyzer.analysis.stepselect.StepChoice; default: warm-up and outlier
    steps left out) keeps."""
    from .page import page, run_body
    from .run_data import run_data

    data = run_data(run, findings, source, steps)
    return page(f"runlens report: {source}", run_body(data), data)


def compare_page(comparison: Comparison, base: Samples, new: Samples) -> str:
    """The report of a comparison, from compare()'s result and the samples it compared."""
    from .compare_data import compare_data
    from .page import compare_body, page

    data = compare_data(comparison, base, new)
    return page(f"runlens comparison: {comparison.base} vs {comparison.new}",
                compare_body(data), data)
