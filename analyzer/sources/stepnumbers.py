"""Step numbers of inputs that carry them only in a name (a file name, a run metadata tag):
the last number in it, and a free number for an input without one or whose number an
earlier input took. Shared by the timeline, runmetadata and events sources."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from ..errors import InputFileError
from ..rundir import MAX_STEP

_NUMBER_RE = re.compile(r"(\d+)")
BEYOND = MAX_STEP + 1  # what number_in says of a number beyond int64, however long


def number_in(name: str) -> int | None:
    """The last number in `name` (`timeline-12.json` -> 12), None when it has none;
    BEYOND for one beyond int64 (a tag of a million digits is not converted)."""
    numbers = _NUMBER_RE.findall(name)
    if not numbers:
        return None
    digits = numbers[-1].lstrip("0")
    return BEYOND if len(digits) > 19 else min(int(digits or "0"), BEYOND)


def check_step(step: int, name: str) -> None:
    """InputFileError naming `name` when `step` does not fit int64 (our frames', and
    TensorFlow's, global step): that input is refused or skipped, never an overflow."""
    if not -MAX_STEP - 1 <= step <= MAX_STEP:
        raise InputFileError(f"{name}: step number beyond int64 (the largest is "
                             f"{MAX_STEP:,}); not read")


def distinct_steps(wanted: Iterable[int | None]) -> list[int]:
    """Each input's wanted step, in order; one above the highest so far (1 for the first)
    when it wants none or an earlier input has it, so that no two inputs share a step."""
    steps: list[int] = []
    used: set[int] = set()
    highest = 0  # kept, not recomputed: max(used) per input was quadratic (a crafted
    # event file of 950k tagged records ran for more than 5 minutes)
    for step in wanted:
        if step is not None and step > MAX_STEP:  # kept, for its reader to refuse by name
            steps.append(step)
            continue
        if step is None or step in used:
            step = highest + 1
        used.add(step)
        highest = max(highest, step)
        steps.append(step)
    return steps


def by_number(paths: Iterable[Path]) -> list[Path]:
    """Files whose names hold a number first, by that number; then the others by name."""
    def key(p: Path) -> tuple[bool, int, str]:
        number = number_in(p.name)
        return number is None, number or 0, p.name

    return sorted(paths, key=key)
