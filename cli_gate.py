"""The CI gate's commands of `analyze`: `compare` and `baseline save` (docs/ci.md).

Registered on the command group by cli.py; like the other commands they parse options
and map errors to exit codes, and import the engine inside each command so that
`analyze --help` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .analyzer import registries
from .cli_options import (
    EXIT_FAILED,
    emit,
    handle_errors,
    load,
    no_cache_option,
    source_option,
)

if TYPE_CHECKING:
    from .analyzer.gate.samples import Samples


def _samples(path: str, no_cache: bool, scope_depth: int, step_range: str | None = None
             ) -> Samples:
    """A run dir (its steps in --steps A:B, every one of them flagged: the test leaves
    warm-up and outliers out itself) or a baseline file, as per-step samples."""
    from .analyzer.analysis.stepselect import StepChoice, analysed
    from .analyzer.gate.compare import is_baseline_file, load_baseline, samples_from_run
    from .analyzer.readfile import shown

    if is_baseline_file(Path(path)):
        return load_baseline(Path(path))
    run = analysed(load(path, no_cache), StepChoice.parse(step_range, include_warmup=True))
    return samples_from_run(run, shown(path), scope_depth=scope_depth)  # named as shown


def _base_samples(paths: tuple[str, ...], no_cache: bool, scope_depth: int,
                  step_range: str | None) -> Samples:
    """One or several base runs (run dirs or baseline files), each run kept apart."""
    from .analyzer.gate.baseruns import merge_runs

    return merge_runs([_samples(p, no_cache, scope_depth, step_range) for p in paths])


# Compare formats whose text on stdout carries the warnings; others (and -o) get them on
# stderr, so that each warning is printed once.
_SAYS_WARNINGS = ("text", "markdown")

@click.command()
@click.argument("base", metavar="BASE...", nargs=-1, required=True,
                type=click.Path(readable=False))
@click.argument("new", metavar="NEW", type=click.Path(readable=False))
@click.option("--threshold", type=click.FloatRange(min=0), default=0.0, show_default=True,
              metavar="PCT", help="Smallest change (in percent, after removing machine-wide "
                                  "noise) that counts as a regression, on top of the "
                                  "effect-size floors (docs/ci.md).")
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=0.01, show_default=True,
              help="Significance level: exact Mann-Whitney U for step time and op time "
                   "(Bonferroni), Benjamini-Hochberg over scopes and op types.")
@click.option("--include-warmup", "--keep-outliers", "keep_outliers", is_flag=True,
              help="Keep warm-up and outlier steps in the test (left out by default), as "
                   "on the other commands (--keep-outliers is the same flag).")
@click.option("--steps", "step_range", metavar="A:B", default=None,
              help="Compare only the traced steps from A to B of each run dir, inclusive "
                   "(A: or :B leave an end open; baseline files keep their steps).")
@click.option("--by", type=click.Choice(["step", "op", "scope", "all"]), default="all",
              show_default=True, help="Compare step time, op types, name scopes, or all.")
@click.option("--scope-depth", type=click.IntRange(min=1), default=3, show_default=True,
              help="Compare name scopes down to this depth.")
@click.option("--no-normalize", is_flag=True,
              help="Do not divide out machine speed (the per node-size class factors), "
                   "and let the wall step time fail the build too (use on dedicated "
                   "machines).")
@click.option("--new-runs", type=click.IntRange(min=1), default=1, show_default=True,
              metavar="N", help="The last N paths are new runs (separate processes of the "
                                "new code), pooled; 3 make a slow process on either side "
                                "far less likely to fail the build (docs/ci.md).")
@click.option("--format", "fmt", type=click.Choice(registries.formats("compare")),
              default="text", show_default=True,
              help="Report format; html: one self-contained page (use -o).")
@click.option("-o", "--output", type=click.Path(), default=None,
              help="Write the report to this file instead of stdout.")
@no_cache_option
@source_option
@handle_errors
def compare(base: tuple[str, ...], new: str, threshold: float, alpha: float,
            keep_outliers: bool,
            step_range: str | None, by: str, scope_depth: int, no_normalize: bool,
            new_runs: int, fmt: str, output: str | None, no_cache: bool) -> None:
    """Compare NEW against BASE and fail (exit 1) on a regression.

    BASE is a run dir or a baseline file (`analyze baseline save`), or several of them:
    with 2 or more base runs (separate processes of the same code, 3 or more recommended)
    a scope's effect-size floor comes from how far the base runs' own medians spread
    instead of a floor per size class. NEW is a run dir or a baseline file, or with
    --new-runs N the last N paths, pooled (3 recommended as well). Per-step
    samples of step time, op time, op types and name scopes are compared with exact
    one-sided Mann-Whitney U tests (step time and op time on their own; scopes and op
    types under Benjamini-Hochberg); a regression must be significant and its change
    (Hodges-Lehmann, after dividing out machine speed per node-size class, each scope's
    nodes by the same kernels of their size outside it) above an effect-size floor
    measured between separate runs (docs/ci.md) with 95% confidence.
    Verdicts by evidence: every line shows what changed in its nodes' work (bytes, float
    ops, parameters); a scope whose work changed fails when +20% or more; one whose work
    is the same fails with one process a side only when it moved op time or is beyond any
    same-config swing, else it is a WATCH line (run 3 + 3 processes to judge it).
    Warm-up and outlier steps are left out. Exit 0: no regression (WATCH lines do not
    fail); 1: regression; 2: bad input.

    \b
    Examples:
      analyze compare fixtures/compare/base_a fixtures/compare/slow_dense2
      analyze compare baseline.json runs/new --format junit -o runlens.xml
      analyze compare runs/main_1 runs/main_2 runs/main_3 runs/pr
      analyze compare main.json runs/pr_1 runs/pr_2 runs/pr_3 --new-runs 3
    """
    from .analyzer.gate.compare import compare as run_compare
    from .analyzer.rundir import check_output

    paths = (*base, new)
    if new_runs >= len(paths):
        raise click.UsageError(f"--new-runs {new_runs} leaves no BASE: give at least one "
                               "base run before the new runs")
    if output is not None:
        check_output(output)  # before the long work
    base_samples = _base_samples(paths[:-new_runs], no_cache, scope_depth, step_range)
    new_samples = (_base_samples(paths[-new_runs:], no_cache, scope_depth, step_range)
                   if new_runs > 1 else _samples(new, no_cache, scope_depth, step_range))
    result = run_compare(base_samples, new_samples, threshold_pct=threshold,
                         alpha=alpha, by=by, normalize=not no_normalize,
                         keep_outliers=keep_outliers)
    if output is not None or fmt not in _SAYS_WARNINGS:  # else the text says them: once
        for warning in result.warnings:
            click.echo(f"analyze: warning: {warning}", err=True)
    render = registries.renderer("compare", fmt)
    if fmt == registries.COMPARE_PAGE:  # the page shows the samples too
        emit(render(result, base_samples, new_samples), output)
    else:
        emit(render(result), output)
    if result.regressions.height:
        sys.exit(EXIT_FAILED)


@click.group()
def baseline() -> None:
    """Keep a small summary of a run for later comparisons (CI keeps it, not run dirs)."""


@baseline.command("save")
@click.argument("run_dirs", metavar="RUN_DIR...", nargs=-1, required=True,
                type=click.Path(readable=False))
@click.option("-o", "--output", type=click.Path(), required=True,
              help="The baseline file to write (JSON).")
@click.option("--scope-depth", type=click.IntRange(min=1), default=3, show_default=True,
              help="Keep name scopes down to this depth.")
@click.option("--steps", "step_range", metavar="A:B", default=None,
              help="Save only the traced steps from A to B, inclusive (A: or :B leave an "
                   "end open). Warm-up and outlier steps are saved: compare leaves them "
                   "out.")
@no_cache_option
@source_option
@handle_errors
def baseline_save(run_dirs: tuple[str, ...], output: str, scope_depth: int,
                  step_range: str | None, no_cache: bool) -> None:
    """Save the per-step samples (step time, op types, scopes) of RUN_DIR to a baseline file.

    `analyze compare baseline.json NEW_RUN` then works as with the run dir itself. With
    several RUN_DIRs (separate runs of the same code, 3 recommended), each run's samples
    are kept apart, and compare takes each metric's floor from their spread (docs/ci.md).
    """

    from .analyzer.errors import RunlensError
    from .analyzer.gate.compare import save_baseline
    from .analyzer.readfile import shown
    from .analyzer.rundir import check_output

    target = check_output(output)
    samples = _base_samples(run_dirs, no_cache, scope_depth, step_range)
    try:  # through analyzer/output.py (rundir.atomic_write): a link's target, a FIFO...
        save_baseline(samples, target)
        size = (f" ({target.stat().st_size:,} bytes)" if output != "-" and target.is_file()
                else "")
    except OSError as e:
        raise RunlensError(f"{output}: cannot write ({e.strerror or e})") from None
    runs = len(samples.meta.get("runs") or [samples.source])
    click.echo(f"baseline: {runs} run(s), {samples.n_samples} steps, "
               f"{samples.samples.select('kind', 'name').n_unique()} metrics -> "
               f"{shown(output)}"
               f"{size}", err=True)
