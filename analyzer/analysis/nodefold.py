"""Node stats of many workers folded into one row per node: the rows of every worker with
the same name, op type, kernel, fused ops, types and device (the hosts of one job run
the same program) summed, with how many (worker, node) rows and executed ones each row
stands for. The ops and scope views sum nodes across workers anyway; folded first, a
fleet's views are made of as many rows as its job has nodes, whatever its hosts
(analysis.hostviews), instead of one row per host and node.

A float sum's last bits depend on the order of its additions, so the fold has one
order, whoever folds: a left fold over the workers in the order of their names, one
addition of two numbers per metric at each step (a worker holds each node once). A Run's
views fold its workers the same way (analysis.views), so a fleet's view and the whole
Run's are the same bytes however the hosts were grouped or when they came in.
"""

from __future__ import annotations

import polars as pl

from .viewexprs import ALL_METRICS

KEYS = ["name", "op_type", "kernel", "fused_ops", "types", "device"]
COUNTS = ["nodes", "executed"]  # (worker, node) rows, and those that ran, per folded row


def rows_of(stats: pl.DataFrame) -> pl.DataFrame:
    """One worker's node stats (nodestats.node_stats' columns) as fold rows."""
    return stats.select(*KEYS, *ALL_METRICS, nodes=pl.lit(1, pl.UInt32),
                        executed=pl.col("executed").cast(pl.UInt32))


def add(acc: pl.DataFrame | None, rows: pl.DataFrame) -> pl.DataFrame:
    """`acc` with one worker's fold `rows` added: a row per key, acc's first (in their
    order), then the worker's new keys in its order."""
    if acc is None:
        return rows
    return (pl.concat([acc, rows], how="vertical_relaxed")
            .group_by(KEYS, maintain_order=True)
            .agg(pl.col(*ALL_METRICS, *COUNTS).sum()))


def fold(stats: pl.DataFrame) -> pl.DataFrame:
    """The node stats of any workers folded, their workers in the order of their names."""
    acc = None
    for worker in sorted(stats.get_column("worker").unique().to_list()):
        acc = add(acc, rows_of(stats.filter(pl.col("worker") == worker)))
    return acc if acc is not None else rows_of(stats)


class Folder:
    """Workers' node stats folded as they come, in any order: a worker is folded once
    every worker named before it (of `expected`) has been folded or said to have none;
    until then it waits. `mixed` is set when a frame held a worker not expected (or
    several): then the fold cannot keep its order, and the caller must read the run
    another way."""

    def __init__(self, expected: list[str]) -> None:
        self.order = sorted(set(expected))
        self.waiting: dict[str, pl.DataFrame | None] = {}
        self.folded: pl.DataFrame | None = None
        self.next = 0
        self.mixed = len(self.order) < len(expected)  # two parts of one worker

    def give(self, worker: str, stats: pl.DataFrame | None) -> None:
        """The node stats of `worker`'s part (None: none, its task failed or chose
        nothing)."""
        if stats is not None:
            found = stats.get_column("worker").unique().to_list()
            if found and found != [worker]:
                self.mixed = True
        self.waiting[worker] = stats
        while self.next < len(self.order) and self.order[self.next] in self.waiting:
            done = self.waiting.pop(self.order[self.next])
            if done is not None and done.height:
                self.folded = add(self.folded, rows_of(done))
            self.next += 1
