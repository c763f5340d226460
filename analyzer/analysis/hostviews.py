"""`analyze ops` and `analyze scopes` of a run of many hosts, made of small per-host
pieces (each host's node stats over its chosen steps, its work outside the steps, the
devices it covers, its step flags) that each host's task computes where it reads the
host (analyzer/engines), so that the driver holds no host's events (docs/fleet.md).

A view's numbers are per (worker, node) (analysis.nodestats): every rule that decides them
(the chosen steps, warm-up and outliers, the node's canonical device, the average over a
worker's steps) is one worker's own, so the run's node stats are its hosts' put together;
the driver folds them into one row per node as they come, in the order a Run's views fold
their workers (analysis.nodefold), and the view is the Run's byte for byte
(tests/test_engine_views.py).

`RunViews` and `HostViews` answer the same questions (`ViewSource`), of one Run or of the
hosts' pieces: the CLI prints a view and its notes the same way from either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import polars as pl

from ..errors import RunlensError
from ..model import Run
from .devicecut import COVERED, covered_of
from .hostsummary import Pieces, piece
from .nodefold import Folder
from .nodestats import node_stats
from .outside import note_of, outside_ops
from .stepselect import StepChoice, choose, left_out, left_out_rows, step_flags
from .views import VIEWS, View, ViewOptions, chosen_run, covering, op_view_of, scope_view_of

# The views made of node stats alone; the others need a Run (code paths, graph inputs).
HOST_VIEWS = {"ops": op_view_of, "scopes": scope_view_of}


def pieces(run: Run, opts: ViewOptions) -> Pieces:
    """What `analyze ops|scopes` with `opts` needs of `run` (one host, or any workers).
    A host none of whose steps or devices `opts` chooses gives no node stats, only the
    reason (`chosen`): the run's view is the other hosts'."""
    made: Pieces = {
        "flags": step_flags(run).select("worker", "step", "step_us", "left_out", "why"),
        "traced": run.executions.select(pl.col("step").unique()),
        "attribution": run.attribution,
        "op_types": ran_op_types(run),
    }
    try:
        chosen = chosen_run(run, opts)
    except RunlensError as e:  # --worker, --device or --steps leave this host nothing
        return made | {"chosen": pl.DataFrame({"why": [str(e)]})}
    return made | {"stats": node_stats(chosen, opts.step, opts.average),
                   "outside": outside_ops(chosen).select("op_type", "ns"),
                   "covered": COVERED(chosen)}


def ran_op_types(run: Run) -> pl.DataFrame:
    """The op types of the keys the executions use (a few hundred keys, not a million
    executions' op types gathered and hashed)."""
    used = run.executions.get_column("key_id").unique()
    return (run.keys.get_column("op_type").cast(pl.String).gather(used).unique()
            .to_frame("op_type"))


class ViewSource(Protocol):
    """What the CLI asks of a run to print a view: of a Run, or of its hosts' pieces."""

    @property
    def steps(self) -> list[int]: ...
    @property
    def lacks(self) -> Mapping[str, str]: ...
    @property
    def attribution(self) -> pl.DataFrame: ...
    def op_types(self) -> list[str]: ...
    def left_out(self, choice: StepChoice) -> list[dict]: ...
    def view(self, kind: str, opts: ViewOptions) -> View: ...


@dataclass
class RunViews:
    """A loaded Run as a ViewSource."""

    run: Run

    @property
    def steps(self) -> list[int]:
        return self.run.steps

    @property
    def lacks(self) -> Mapping[str, str]:
        return self.run.lacks

    @property
    def attribution(self) -> pl.DataFrame:
        return self.run.attribution

    def op_types(self) -> list[str]:
        return ran_op_types(self.run).get_column("op_type").to_list()

    def left_out(self, choice: StepChoice) -> list[dict]:
        return left_out(self.run, choice)

    def view(self, kind: str, opts: ViewOptions) -> View:
        return VIEWS[kind](self.run, opts)


class HostViews:
    """The pieces of a run's hosts as a ViewSource (the views of HOST_VIEWS only), given
    as they come: each host's node stats folded into the run's (analysis.nodefold), its
    other pieces (a few rows) kept."""

    def __init__(self) -> None:
        self.hosts: list[Pieces] = []  # without their node stats
        self.folder = Folder([])
        self.lacks: Mapping[str, str] = {}

    def start(self, parts: list[Any]) -> None:
        """The run's parts (sources.Part), before any is given."""
        self.folder = Folder([p.worker for p in parts])

    def give(self, part: Any, pieces: Pieces | None) -> None:
        """A part's pieces (None: its task failed)."""
        stats = None if pieces is None else pieces.pop("stats", None)
        self.folder.give(part.worker, stats)
        if pieces is not None:
            self.hosts.append(pieces)

    def _cat(self, name: str) -> pl.DataFrame:
        return piece(self.hosts, name)

    @property
    def steps(self) -> list[int]:
        return self._cat("traced").get_column("step").unique().sort().to_list()

    @property
    def attribution(self) -> pl.DataFrame:
        return self._cat("attribution")

    def op_types(self) -> list[str]:
        return self._cat("op_types").get_column("op_type").unique().to_list()

    def left_out(self, choice: StepChoice) -> list[dict]:
        flags = self._cat("flags").sort("worker", "step")
        return left_out_rows(choose(flags, choice))

    def view(self, kind: str, opts: ViewOptions) -> View:
        chosen = [h for h in self.hosts if "covered" in h]
        if not chosen or self.folder.folded is None:
            # every host's reason is the same; the first names its file
            raise RunlensError(next(h["chosen"].item() for h in self.hosts if "chosen" in h))
        outside = note_of(pl.concat([h["outside"] for h in chosen], how="vertical_relaxed"))
        made = HOST_VIEWS[kind](self.folder.folded, opts, outside)
        return covering(made, covered_of(pl.concat([h["covered"] for h in chosen])))
