"""Which traced steps a timeline draws: one step, a range A:B, all, or the median-time
step of the analysed ones (analyzer.analysis.stepselect)."""

from __future__ import annotations

from ..analysis.steps import median_step
from ..analysis.stepselect import (
    StepChoice,
    analysed,
    parse_step_range,
    require_traced,
    short_steps,
)
from ..errors import RunlensError
from ..model import Run


def select_steps(run: Run, step: int | None = None, step_range: str | None = None,
                 all_steps: bool = False, default_all: bool = False,
                 choice: StepChoice | None = None) -> tuple[list[int], str]:
    """The steps to draw and a note saying how they were chosen.

    At most one of step / step_range / all_steps (the CLI checks); none: the median-time
    step of the steps `choice` keeps (warm-up and outliers left out: analyzer.analysis.stepselect),
    or every step when `default_all`, as for one file per step."""
    traced = run.steps
    where = ", ".join(map(str, run.paths)) or "run"
    if step is not None:
        require_traced(run.steps, step, where)
        return [step], f"step {step}"
    if step_range is not None:
        lo, hi = parse_step_range(step_range)
        chosen = [s for s in traced if (lo is None or s >= lo) and (hi is None or s <= hi)]
        if not chosen:
            raise RunlensError(f"{where}: --steps {step_range}: no traced step in that range "
                               f"(traced steps: {short_steps(traced)})")
        return chosen, f"{len(chosen)} steps ({chosen[0]}..{chosen[-1]})"
    if all_steps or default_all:
        return traced, f"all {len(traced)} steps"
    s = median_step(analysed(run, choice))
    return [s], f"step {s} (median step time)"
