"""Step markers that cover only the dispatch (JAX's asynchronous dispatch, docs/xplane.md
"Asynchronous step markers").

`jax.profiler.StepTraceAnnotation("train")` around a jitted call returns as soon as the
call is queued: without a wait inside it (`block_until_ready`), the marker spans the
dispatch (well under a millisecond) and the step's work (XLA:CPU thunks) runs after it,
often after every marker of the trace. The time rule (an event in the step begun last
before it) then gives all work to the last step, and the markers' spans are no step time.

Detected when most of the run's XLA work (thunks with a `run_id`, one id per execution of
a program) starts outside every marker. Then each execution is given to the step that
dispatched it, in order: the k-th of the R executions to marker k * K // R when R is a
multiple of the K markers (every step dispatches the same programs), and a step's time is
its work's span ("work"). Otherwise the steps stay as the time rule made them and their
spans are marked "dispatch": no step time to compare (no straggler, no share of a step).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NO_RUN = np.iinfo(np.int64).min  # an execution without a run_id (run ids may be negative)
OUTSIDE_SHARE = 0.5  # of XLA work starting outside every marker: the markers are dispatch
FIX = ("wait for the step's result inside the marker (`jax.block_until_ready(loss)` in "
       "the StepTraceAnnotation) or profile with runlens.analyzer.capture.jax.profile")


@dataclass
class Rebound:
    step: np.ndarray  # each execution's step
    spans: list[tuple[int, int, int]]  # (step, start_ps, end_ps)
    kind: str  # "work": spans of each step's work; "dispatch": the markers' (no step time)
    note: str  # the one line said to the user


def _inside(start_ps: np.ndarray, markers: list[tuple[int, int, int]]) -> np.ndarray:
    """Whether each time lies within some marker's [start, end)."""
    m = sorted(markers)
    begins = np.array([x[0] for x in m], np.int64)
    ends = np.maximum.accumulate(np.array([x[1] for x in m], np.int64))
    at = np.searchsorted(begins, start_ps, side="right") - 1
    return (at >= 0) & (start_ps < ends[np.clip(at, 0, len(m) - 1)])


def _work_spans(order: list[tuple[int, int, int]], xla: np.ndarray, step: np.ndarray,
                start_ps: np.ndarray, dur_ps: np.ndarray) -> list[tuple[int, int, int]]:
    """(step, start, end) of each marker's step: the span of its XLA work."""
    spans = []
    for b, _, n in order:
        mine = xla & (step == n)
        if mine.any():
            spans.append((n, int(start_ps[mine].min()),
                          int((start_ps[mine] + dur_ps[mine]).max())))
        else:
            spans.append((n, b, b))
    return spans


def rebind(markers: list[tuple[int, int, int]], start_ps: np.ndarray, dur_ps: np.ndarray,
           run: np.ndarray, step: np.ndarray, linked: np.ndarray | None = None
           ) -> Rebound | None:
    """The steps and spans of a run whose markers cover only the dispatch; None when the
    markers hold their work (or there are no markers, or no XLA executions). `linked`:
    executions whose step is already that of the host work that launched them
    (xplane_links: PjRt's Execute in the marker); when all are, only the spans change."""
    xla = run != NO_RUN
    if not markers or not xla.any():
        return None
    outside = xla & ~_inside(start_ps, markers)
    if dur_ps[outside].sum() <= OUTSIDE_SHARE * dur_ps[xla].sum():
        return None
    median_ms = float(np.median([e - b for b, e, _ in markers])) / 1e9
    said = (f"the step markers cover only the dispatch (median {median_ms:.2f} ms) and "
            "the work runs after them (asynchronous dispatch)")
    order = sorted(markers)
    if linked is not None and linked[xla].all():
        return Rebound(step, _work_spans(order, xla, step, start_ps, dur_ps), "work",
                       f"{said}: each step's time is its own work's span (each execution "
                       f"in the step whose host work launched it); {FIX}")
    # Executions in the order they began (each program counts its own run ids).
    runs, inverse = np.unique(run[xla], return_inverse=True)
    first = np.full(len(runs), np.iinfo(np.int64).max)
    np.minimum.at(first, inverse, start_ps[xla])
    rank = np.empty(len(runs), np.int64)
    rank[np.lexsort((runs, first))] = np.arange(len(runs))
    if len(runs) % len(order):
        return Rebound(step, [(n, b, e) for b, e, n in order], "dispatch",
                       f"{said}: {len(runs)} executions for {len(order)} markers, so no "
                       f"step time is measured; {FIX}")
    per = len(runs) // len(order)
    which = rank[inverse] // per
    step = step.copy()
    step[xla] = np.array([n for _, _, n in order], np.int64)[which]
    return Rebound(step, _work_spans(order, xla, step, start_ps, dur_ps), "work",
                   f"{said}: each step's time is its own work's span (its {per} "
                   f"execution(s) in dispatch order); {FIX}")
