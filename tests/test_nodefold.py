"""Node stats of many workers folded into one row per node (analysis.nodefold): the same
bits whichever order the workers come in, every metric the sum of the workers' own, and
a frame that breaks the fold's order said (the caller then reads the run)."""

from __future__ import annotations

import random

import polars as pl

from runlens.analyzer.analysis.nodefold import Folder, fold
from runlens.analyzer.analysis.nodestats import node_stats
from runlens.analyzer.analysis.viewexprs import ALL_METRICS
from runlens.analyzer.analysis.views import ViewOptions, chosen_run
from runlens.analyzer.load import load_run

from .test_engines import BERT, fleet, tf1_workers


def _stats(path):
    run = load_run(path, use_cache=False)
    opts = ViewOptions()
    return node_stats(chosen_run(run, opts), opts.step, opts.average)


def test_fold_is_the_same_bits_in_any_order(tmp_path):
    """A GPU fleet's workers given one by one in shuffled orders fold to the frame the
    whole run's stats fold to, bit for bit."""
    stats = _stats(fleet(tmp_path, 4, BERT))
    whole = fold(stats)
    workers = stats.get_column("worker").unique().to_list()
    for seed in range(3):
        random.Random(seed).shuffle(workers)
        folder = Folder(workers)
        for worker in workers:
            folder.give(worker, stats.filter(pl.col("worker") == worker))
        assert not folder.mixed
        assert folder.folded is not None and folder.folded.equals(whole)


def test_folded_metrics_are_the_workers_sums(tmp_path):
    """TF1 workers (integer metrics: exact): each folded row sums its workers' rows; a
    row stands for as many (worker, node) rows as were folded into it."""
    stats = _stats(tf1_workers(tmp_path, 3))
    folded = fold(stats)
    assert folded.get_column("nodes").sum() == stats.height
    assert folded.get_column("executed").sum() == stats.get_column("executed").sum()
    keys = ["name", "op_type", "kernel"]
    expected = stats.group_by(keys).agg(pl.col(*ALL_METRICS).sum(), rows=pl.len())
    got = folded.join(expected, on=keys, how="left", nulls_equal=True)
    for metric in ALL_METRICS:
        assert (got.get_column(metric) == got.get_column(f"{metric}_right")).all(), metric
    assert (got.get_column("nodes") == got.get_column("rows")).all()


def test_waiting_workers_and_mixed_frames(tmp_path):
    stats = _stats(fleet(tmp_path, 3))
    one = stats.filter(pl.col("worker") == "host001")
    folder = Folder(["host000", "host001", "host002"])
    folder.give("host001", one)
    assert folder.folded is None  # host000 comes first: host001 waits
    folder.give("host000", None)  # its task failed
    assert folder.folded is not None and folder.folded.equals(fold(one))
    folder.give("host002", stats.filter(pl.col("worker") != "host002"))  # two workers
    assert folder.mixed
    assert Folder(["a", "a"]).mixed  # one worker in two parts
