"""`analyze`: the runlens command line. Parses options and maps errors to exit codes.

No analysis happens here, and the engine is imported inside each command so that
`analyze --help` starts without loading polars or protobuf. The parts the commands share
(error mapping, loading, the views' flags) are in cli_options.py.

Exit codes: 0 fine; 1 the check failed (findings at or above --fail-on, or a regression);
2 bad usage or unreadable input (one line on stderr, no traceback); 3 internal error.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from . import cli_gate
from .analyzer import registries
from .cli_options import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERNAL,
    Progress,
    choice,
    emit,
    exit_without_teardown,
    handle_errors,
    load,
    no_cache_option,
    note_left_out,
    run_dir_argument,
    run_summary,
    source_option,
    step_options,
    view_options,
    view_source,
)

if TYPE_CHECKING:
    from .analyzer.analysis.view_options import ViewOptions

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_INTERNAL", "handle_errors", "main", "run"]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("runlens")
    except PackageNotFoundError:
        return "unknown"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=None, package_name="runlens", prog_name="analyze",
                      message="%(prog)s (runlens) %(version)s")
def main() -> None:
    """Offline profiler and advisor for TensorFlow and JAX training runs (CPU, GPU, TPU).

    Reads a run directory written by runlens's capture hook (raw RunMetadata of traced
    steps, graph.pb, op_log.pb) without TensorFlow, and tells where the time and memory
    went. RUN_DIR may also be a directory of run dirs, one per worker, or a profile
    another tool wrote: TF2/JAX .xplane.pb or a TensorBoard logdir, the profile plugin's
    trace.json.gz, tf.timeline / ProfilerHook JSON, a tfprof profile, RunMetadata
    .pb/.pbtxt files, TensorBoard event files (detected; --source KIND forces one;
    docs/sources.md).

    \b
    Examples:
      analyze advise fixtures/runs/input_bound
      analyze ops fixtures/runs/cnn --min-micros 100
      analyze summary fixtures/runs/mlp
    """


@main.command()
@run_dir_argument
@click.option("--format", "fmt", type=click.Choice(registries.formats("summary")), default="text",
              show_default=True, help="Output format.")
@step_options
@no_cache_option
@source_option
@handle_errors
def summary(run_dir: str, fmt: str, no_cache: bool) -> None:
    """Steps, workers, devices, node counts and step-time statistics of RUN_DIR.

    The statistics leave out warm-up and outlier steps (named, with why) unless
    --include-warmup."""
    made = run_summary(run_dir, no_cache, choice())  # of hosts' pieces when it has several
    click.echo(registries.renderer("summary", fmt)(made), nl=False)


@main.command()
@click.argument("run_dir", metavar="RUN_DIR", type=click.Path(readable=False),
                required=False)
@click.option("--format", "fmt", type=click.Choice(registries.formats("findings")), default="text",
              show_default=True, help="Output format.")
@click.option("--fail-on", type=click.Choice(["info", "warning", "error"]), default=None,
              help="Exit 1 when a finding is at or above this severity (default: never).")
@click.option("--select", "select", multiple=True, metavar="CHECKER",
              help="Run only these checkers (codes like RL105 or names like input-bound; "
                   "repeat or comma-separate).")
@click.option("--ignore", "ignore", multiple=True, metavar="CHECKER",
              help="Skip these checkers.")
@click.option("--checkers", "checkers_opt", multiple=True, metavar="CHECKER", hidden=True)
@click.option("--list", "list_checkers", is_flag=True, help="Describe every checker.")
@step_options
@no_cache_option
@source_option
@handle_errors
def advise(run_dir: str | None, fmt: str, fail_on: str | None, select: tuple[str, ...],
           ignore: tuple[str, ...], checkers_opt: tuple[str, ...], list_checkers: bool,
           no_cache: bool) -> None:
    """Say what is slow in RUN_DIR and what to do about it.

    Runs every checker (`--list` describes them) and prints findings grouped by
    severity, biggest impact (share of step time at stake) first, with the numbers
    behind them. In CI, `--fail-on warning` exits 1 when a warning or error is found.

    \b
    Examples:
      analyze advise fixtures/runs/input_bound
      analyze advise runs/exp1 --format json --fail-on warning
      analyze advise runs/exp1 --select input-bound,RL103
    """
    from . import checkers
    from .analyzer.render.findings import checker_list

    if list_checkers:
        click.echo(checker_list(checkers.all_checkers(), fmt), nl=False)
        return
    if not run_dir:
        raise click.UsageError("RUN_DIR is required (or use --list)")
    split = lambda items: [x for item in items for x in item.split(",") if x.strip()]  # noqa: E731
    chosen, ignored = split(select + checkers_opt) or None, split(ignore)
    steps = choice()
    run = load(run_dir, no_cache)
    findings = checkers.run_checks(run, select=chosen, ignore=ignored, steps=steps)
    meta = checkers.header(run, run_dir, steps, select=chosen, ignore=ignored)
    click.echo(registries.renderer("findings", fmt)(findings, meta), nl=False)
    if fail_on is not None:
        bar = checkers.Severity.parse(fail_on)
        if any(f.severity >= bar for f in findings):
            sys.exit(EXIT_FAILED)


@main.command()
@run_dir_argument
@click.option("-o", "--output", type=click.Path(), default=None,
              help="Trace file to write; gzip-compressed when the name ends in .gz.")
@click.option("--step", type=int, default=None,
              help="Global step to draw (as in steps/step-%08d.pb). Default: the "
                   "median-time step.")
@click.option("--steps", "step_range", metavar="A:B", default=None,
              help="Every traced step from A to B, inclusive (A: or :B leave an end open).")
@click.option("--all-steps", is_flag=True, help="Every traced step, on one timeline.")
@click.option("--include-warmup", is_flag=True,
              help="The default step is the median of every traced step (default: of the "
                   "steps left after warm-up and outliers, docs/ci.md).")
@click.option("--dataflow/--no-dataflow", default=True, show_default=True,
              help="Arrows from each tensor's producer to its consumers on other threads.")
@click.option("--memory/--no-memory", default=True, show_default=True,
              help="Bytes in use per allocator, as counter tracks.")
@click.option("--critical-path/--no-critical-path", default=True, show_default=True,
              help="Each step's critical path on a 'critical path' thread of its device.")
@click.option("--per-step-dir", type=click.Path(), default=None,
              metavar="DIR",
              help="Also write DIR/timeline-<step>.json for each chosen step, as "
                   "tf.train.ProfilerHook did (every step when there is no -o and no "
                   "step option).")
@no_cache_option
@source_option
@handle_errors
def timeline(run_dir: str, output: str | None, step: int | None, step_range: str | None,
             all_steps: bool, include_warmup: bool, dataflow: bool, memory: bool,
             critical_path: bool, per_step_dir: str | None, no_cache: bool) -> None:
    """Write a Chrome Trace of RUN_DIR for Perfetto (ui.perfetto.dev) or chrome://tracing.

    Every op execution as tf.timeline draws it (same start and duration), a process per
    device with a thread per real thread and GPU stream, a slice per step, dataflow
    arrows, memory counters per allocator and each step's critical path
    (docs/timeline.md).

    \b
    Examples:
      analyze timeline fixtures/runs/cnn -o cnn.json
      analyze timeline runs/exp1 --all-steps -o exp1.json.gz
      analyze timeline runs/exp1 --steps 100:200 --no-memory -o part.json
      analyze timeline runs/exp1 --per-step-dir traces/
    """
    from .analyzer.analysis.graph import no_dataflow
    from .analyzer.analysis.stepselect import StepChoice
    from .analyzer.errors import RunlensError
    from .analyzer.render.chrome_trace import export, export_per_step
    from .analyzer.rundir import check_output, check_output_dir
    from .analyzer.timeline import TimelineOptions, select_steps

    if sum([step is not None, step_range is not None, all_steps]) > 1:
        raise RunlensError("give only one of --step, --steps and --all-steps")
    if output is None and per_step_dir is None:
        raise RunlensError("timeline: give -o FILE (a .json or .json.gz) or --per-step-dir DIR")
    if output is not None:
        check_output(output)
    if per_step_dir is not None:
        check_output_dir(per_step_dir)
    run = load(run_dir, no_cache)
    steps, note = select_steps(run, step, step_range, all_steps, default_all=output is None,
                               choice=StepChoice(include_warmup))
    click.echo(f"timeline: {note}", err=True)
    skipped = no_dataflow(run) if critical_path else None
    if skipped:  # a path without edges would be one op: said, not drawn
        click.echo(f"timeline: critical path skipped: {skipped}", err=True)
        critical_path = False
    options = TimelineOptions(tuple(steps), dataflow=dataflow, memory=memory,
                              critical_path=critical_path)
    progress = Progress("writing trace events", minimum=200_000)
    written = []
    try:
        if output is not None:
            w = export(run, output, options, progress)
            written.append(w)
            click.echo(f"timeline: wrote {w.path} ({w.events} events, "
                       f"{w.json_bytes / 1e6:.1f} MB of JSON)", err=True)
    finally:
        progress.close()
    if per_step_dir is not None:
        files = export_per_step(run, per_step_dir, options)
        written += files
        click.echo(f"timeline: wrote {len(files)} files in {per_step_dir} "
                   f"(timeline-{steps[0]}.json .. timeline-{steps[-1]}.json)", err=True)
    for w in written:
        for warning in w.warnings:
            click.echo(f"analyze: warning: {warning}", err=True)


def _run_view(kind: str, run_dir: str, fmt: str, no_cache: bool, kw: dict[str, Any],
              output: str | None = None) -> None:
    from .analyzer.analysis.attribution import attribution_note
    from .analyzer.analysis.collectives import views_note
    from .analyzer.analysis.stepselect import StepChoice, require_traced
    from .analyzer.analysis.views import VIEW_NEEDS, ViewOptions
    from .analyzer.rundir import check_output
    from .analyzer.units import lacks_by_reason

    kw["select"] = tuple(s.strip() for s in kw["select"].split(",") if s.strip())
    for key in [k for k in kw if k.endswith("_regexes") or k in ("device", "worker")]:
        kw[key] = tuple(kw[key])
    steps = choice()
    options = ViewOptions.from_flags(kw.pop("tfprof_rows"), include_warmup=steps.include_warmup,
                                     first_step=steps.first, last_step=steps.last, **kw)
    source = view_source(kind, run_dir, no_cache, options)
    if options.step >= 0:
        require_traced(source.steps, options.step, run_dir)
    for why, what in lacks_by_reason(source.lacks).items():
        click.echo(f"analyze: note: lacks {', '.join(what)}: {why}", err=True)
    if note := attribution_note(source.attribution):  # accelerator profiles: time on ops
        click.echo(f"analyze: note: {note}", err=True)
    if note := views_note(source.op_types()):  # how collectives and their wait show
        click.echo(f"analyze: note: {note}", err=True)
    missing = sorted(VIEW_NEEDS.get(kind, frozenset()) & set(source.lacks))
    if missing:
        click.echo(f"analyze: {kind} view skipped: needs "
                   + "; ".join(f"{m}: {source.lacks[m]}" for m in missing), err=True)
        return
    if fmt == "text":  # --select chooses the text output's columns only
        options = _columns_it_has(source.lacks, options)
    if output is not None:
        check_output(output)  # before the work: a bad path is a one-line error
    text = registries.renderer("view", fmt)(source.view(kind, options))
    if options.step < 0:  # after the view: a bad option stays a one-line error
        note_left_out(source.left_out(StepChoice(options.include_warmup, options.first_step,
                                                 options.last_step)))
    emit(text, output)


# The columns of the text output each need a part of the run: a profile without per-op
# memory (XSpace) or without op outputs shows no column of zeros for it by default.
_COLUMN_NEEDS = {"bytes": "memory", "peak_bytes": "memory", "residual_bytes": "memory",
                 "output_bytes": "outputs", "params": "op_log", "float_ops": "op_log"}


def _columns_it_has(lacks: Mapping[str, str], options: ViewOptions) -> ViewOptions:
    """`options` without the default columns the run cannot fill (an explicit --select
    keeps them: the user asked)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None or ctx.get_parameter_source("select") != click.core.ParameterSource.DEFAULT:
        return options
    kept = tuple(c for c in options.select if _COLUMN_NEEDS.get(c) not in lacks)
    if not kept or kept == options.select:
        return options
    import dataclasses

    return dataclasses.replace(options, select=kept)


def _view_command(kind: str, doc: str) -> None:
    @main.command(name=kind, help=doc)
    @run_dir_argument
    @view_options
    @no_cache_option
    @source_option
    @handle_errors
    def command(run_dir: str, fmt: str, no_cache: bool, output: str | None,
                **kw: Any) -> None:
        if kw.pop("critical_path", False):
            _critical_path(run_dir, fmt, no_cache, kw["step"], output)
        else:
            _run_view(kind, run_dir, fmt, no_cache, kw, output)

    click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
                 help="Write the view to this file (atomically) instead of printing it; "
                      "for --format speedscope or pprof, a file to open in those tools."
                 )(command)

    if kind == "graph":
        click.option(
            "--critical-path", is_flag=True,
            help="Show the critical path of a step (the median-time step unless --step).",
        )(command)


def _critical_path(run_dir: str, fmt: str, no_cache: bool, step: int,
                   output: str | None = None) -> None:
    from .analyzer.analysis.graph import critical_path, no_dataflow
    from .analyzer.analysis.steps import median_step
    from .analyzer.analysis.stepselect import analysed, require_traced
    from .analyzer.errors import RunlensError

    run = load(run_dir, no_cache)
    if step < 0:
        step = median_step(analysed(run, choice()))
    else:
        require_traced(run.steps, step, run_dir)
    if fmt not in registries.formats("critical_path"):
        raise RunlensError("--critical-path supports --format "
                           + " or ".join(registries.formats("critical_path")))
    skipped = no_dataflow(run)
    if skipped:  # said, not drawn as a one-op path covering 0.0% of the step
        click.echo(f"analyze: critical path skipped: {skipped}", err=True)
        return
    emit(registries.renderer("critical_path", fmt)(critical_path(run, step)), output)


_view_command("ops", """Time and memory by op type (tfprof's op view).

    One row per op type, summed over its nodes; -1 (the default step) averages each node
    over the steps it ran in, as tfprof does.""")
_view_command("scopes", """Time and memory by name scope (tfprof's scope view).

    A tree: a scope's numbers include everything under it (total/self in text).""")
_view_command("code", """Time and memory by Python code (tfprof's code view).

    A tree of call stacks from op_log.pb's code traces; gradient ops sit under their
    forward op's code, marked "(gradient)".""")
_view_command("graph", """Time and memory by graph node (one row per node, with inputs).

    With --critical-path: the chain of dependent ops that ends the step last.""")


@main.command()
@click.argument("path", metavar="PATH", type=click.Path(readable=False))
@click.option("-o", "--output", type=click.Path(), required=True,
              help="The HTML file to write.")
@step_options
@no_cache_option
@source_option
@handle_errors
def report(path: str, output: str, no_cache: bool) -> None:
    """Write one self-contained HTML page about PATH (docs/report.md).

    The run at a glance, step time across steps, time by op type and by name scope, the
    Python code as a flame graph, the critical path of the median step, memory over time
    and the advisor's findings; it opens offline in any browser.

    \b
    Examples:
      analyze report fixtures/runs/cnn -o cnn.html
    """

    from . import checkers
    from .analyzer.report import run_page
    from .analyzer.rundir import check_output

    check_output(output)  # before the long work: a path that cannot be written says so
    run = load(path, no_cache)
    steps = choice()
    size = emit(run_page(run, checkers.run_checks(run, steps=steps), path, steps), output)
    click.echo(f"report: wrote {output} ({size / 1e6:.2f} MB)", err=True)


# The CI gate's commands (compare, baseline save) live in cli_gate.py.
main.add_command(cli_gate.compare)
main.add_command(cli_gate.baseline)


def run() -> None:
    """The `analyze` script: `main`, then the process ends without the interpreter's
    teardown (cli_options.exit_without_teardown)."""
    try:
        main()
    except SystemExit as e:
        exit_without_teardown(e.code)
    exit_without_teardown(0)


if __name__ == "__main__":
    run()
