"""The command line's shared parts (cli.py holds the commands): error mapping, progress,
loading a PATH with the options every command shares, the views' flags (generated from
analyzer/analysis/view_options.py's FLAGS) and writing an output file.

Only click and light engine modules (names, no polars) are imported at the top, so that
`analyze --help` starts fast.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from .analyzer.registries import ENGINES, SOURCES

if TYPE_CHECKING:
    from .analyzer.analysis.stepselect import StepChoice
    from .analyzer.analysis.view_options import ViewOptions
    from .analyzer.load import LoadOptions
    from .analyzer.model import Run

EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL = 1, 2, 3

# numpy's OpenBLAS starts a thread per core that spins for a while at import: 0.1 CPU-s
# taken from ingest on a small machine, for linear algebra runlens never does.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def fail(message: str, code: int) -> None:
    click.echo(f"analyze: {message}", err=True)
    sys.exit(code)


def one_line(text: str) -> str:
    """A message on one line: its lines joined (a file name may hold a newline), a name's
    bytes that are not UTF-8 as \\xNN (readfile.shown)."""
    from .analyzer.readfile import shown  # light: os and stat only

    return " | ".join(line.strip() for line in shown(text).splitlines() if line.strip())


_AT_EXIT: list[bool] = []


def _no_collection_at_exit() -> None:
    """The process exits without the interpreter's last garbage collections: what the
    command made (frames, HLO, views: cyclic or not) is freed by the exit, not traversed
    first (~100 ms of a cold `analyze scopes` of a 38 MB profile). `gc.freeze` at exit
    runs after threading's exit hooks (the cache writer is joined: its files are whole)
    and before the modules are torn down; a file or lock still held is released by the
    exit itself, as after a kill."""
    if not _AT_EXIT:
        import atexit
        import gc

        atexit.register(gc.freeze)
        _AT_EXIT.append(True)


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn engine errors into one line on stderr and an exit code; never a traceback
    (unless RUNLENS_DEBUG is set). Errors of native libraries that derive from
    BaseException (polars' PanicException) are internal errors too."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from .analyzer.errors import RunlensError

        _printable_stdout()
        _no_collection_at_exit()
        try:
            return fn(*args, **kwargs)
        except RunlensError as e:
            fail(f"error: {one_line(str(e))}", EXIT_BAD_INPUT)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except BrokenPipeError:
            sys.stderr.close()  # `analyze ... | head`: the reader left, nothing to report
            sys.exit(0)
        except (SystemExit, GeneratorExit, click.ClickException):
            raise  # a usage problem found in the command: click's own message, exit 2
        except BaseException as e:  # noqa: BLE001 - see the docstring
            if os.environ.get("RUNLENS_DEBUG"):
                raise
            first = (str(e).strip().splitlines() or [""])[0][:300]
            fail(
                f"internal error: {type(e).__name__}: {first} "
                "(set RUNLENS_DEBUG=1 to see the traceback, and please report it)",
                EXIT_INTERNAL,
            )

    return wrapper


def _printable_stdout() -> None:
    """A name with bytes that are not UTF-8 (kept by Python as surrogate escapes) is
    printed escaped, as stderr does, instead of failing the whole output (stdout is strict
    in a UTF-8 locale)."""
    stream = sys.stdout
    if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (ValueError, OSError):  # pragma: no cover - a stream that cannot
            pass


class Progress:
    """Progress of long work on stderr, only when stderr is a terminal and the work is
    big enough (`minimum` units) to be worth a line."""

    def __init__(self, what: str = "ingesting step files", minimum: int = 20) -> None:
        self.what = what
        self.minimum = minimum
        self.enabled = sys.stderr.isatty()
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if self.enabled and total >= self.minimum:
            self.shown = True
            click.echo(f"\r{self.what} {done}/{total} ({100 * done // total}%)", err=True,
                       nl=False)

    def close(self) -> None:
        if self.shown:
            click.echo("\r\033[K", err=True, nl=False)


def load_options(no_cache: bool) -> LoadOptions:
    """The loading options of this command's shared flags (--no-cache is the command's
    parameter; --source, --profile-run and --workers were kept by their callbacks)."""
    from .analyzer.load import LoadOptions
    from .analyzer.sources import Selection

    ctx = click.get_current_context(silent=True)
    meta: dict[str, Any] = ctx.meta if ctx is not None else {}
    return LoadOptions(use_cache=not no_cache, source=meta.get(_SOURCE_KEY),
                       chosen=Selection(workers=bool(meta.get(_WORKERS_KEY, False)),
                                        profile_run=meta.get(_PROFILE_RUN_KEY)))


def run_summary(run_dir: str, no_cache: bool, steps: StepChoice) -> dict:
    """`analyze summary`'s dict: of a run of several parts, made of the pieces its
    hosts' tasks give (--engine; the driver holds no host's events), else of the Run."""
    from .analyzer.analysis.runsummary import summary
    from .analyzer.engines import summary as fleet_summary

    meta = _meta()
    _use_cache_dir(meta)
    progress = Progress("reading hosts", minimum=2)
    try:
        made = fleet_summary(run_dir, load_options(no_cache),
                             meta.get(_ENGINE_KEY) or DEFAULT_ENGINE, steps,
                             progress=progress, on_note=_note if meta.get(_ENGINE_KEY) else None)
    finally:
        progress.close()
    if made is None:
        return summary(load(run_dir, no_cache), steps)
    for warning in made["warnings"]:
        click.echo(f"analyze: warning: {one_line(warning)}", err=True)
    return made


def _meta() -> dict[str, Any]:
    ctx = click.get_current_context(silent=True)
    return ctx.meta if ctx is not None else {}


def _use_cache_dir(meta: dict[str, Any]) -> None:
    """--cache-dir: this process and the tasks it starts read and write caches there."""
    if meta.get(_CACHE_DIR_KEY):
        os.environ["RUNLENS_CACHE_DIR"] = os.path.abspath(meta[_CACHE_DIR_KEY])


def _note(text: str) -> None:
    click.echo(f"analyze: note: {one_line(text)}", err=True)


def load(run_dir: str, no_cache: bool) -> Run:
    """The Run at `run_dir` read with this command's options (its parts by --engine);
    its warnings on stderr."""
    from .analyzer.engines import load_run

    progress = Progress()

    def warn_late(warning: str) -> None:  # found after loading (a cache damaged later)
        click.echo(f"analyze: warning: {one_line(warning)}", err=True)

    meta = _meta()
    _use_cache_dir(meta)
    try:
        run = load_run(run_dir, load_options(no_cache), meta.get(_ENGINE_KEY) or DEFAULT_ENGINE,
                       progress=progress, on_warning=warn_late,
                       on_note=_note if meta.get(_ENGINE_KEY) else None)
    finally:
        progress.close()
    for warning in run.warnings:
        click.echo(f"analyze: warning: {one_line(warning)}", err=True)
    return run


# readable=False: the engine says what cannot be read, in one line (click: 4 lines).
run_dir_argument = click.argument("run_dir", metavar="RUN_DIR",
                                  type=click.Path(readable=False))


def _remember_workers(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    ctx.meta[_WORKERS_KEY] = value


def no_cache_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--no-cache, and --workers (which load() reads from the context)."""
    fn = click.option("--workers", is_flag=True, expose_value=False, callback=_remember_workers,
                      help="Merge the run dirs in RUN_DIR as workers of one run even when "
                           "they are not one job (different graphs).")(fn)
    return click.option("--no-cache", is_flag=True,
                        help="Ingest step files again instead of reading the cache.")(fn)


_SOURCE_KEY = "runlens.source"
_WORKERS_KEY = "runlens.workers"
_PROFILE_RUN_KEY = "runlens.profile_run"
_ENGINE_KEY = "runlens.engine"
_CACHE_DIR_KEY = "runlens.cache_dir"
DEFAULT_ENGINE = next(iter(ENGINES))
# Options for every command that reads a PATH; `load` takes them from the context.
_source = click.option(
    "--source", metavar="KIND", default=None, expose_value=False,
    callback=lambda ctx, _param, value: ctx.meta.__setitem__(_SOURCE_KEY, value),
    help=f"Read PATH as this kind of profile ({', '.join(SOURCES)}; docs/sources.md) "
         "instead of detecting it.")
_profile_run = click.option(
    "--profile-run", metavar="NAME", default=None, expose_value=False,
    callback=lambda ctx, _param, value: ctx.meta.__setitem__(_PROFILE_RUN_KEY, value),
    help="PATH is a TensorBoard logdir: read its profile run NAME "
         "(plugins/profile/NAME/) instead of the newest (docs/xplane.md).")


_engine = click.option(
    "--engine", type=click.Choice(list(ENGINES)), default=None, expose_value=False,
    callback=lambda ctx, _param, value: ctx.meta.__setitem__(_ENGINE_KEY, value),
    help=f"Who reads the run's host files (or worker dirs), one task each: {DEFAULT_ENGINE} "
         "(default): a process per core; ray: the Ray cluster in RAY_ADDRESS, else a "
         "local one (pip install 'runlens[ray]'; docs/fleet.md).")
_cache_dir = click.option(
    "--cache-dir", metavar="DIR", default=None, expose_value=False,
    type=click.Path(file_okay=False),
    callback=lambda ctx, _param, value: ctx.meta.__setitem__(_CACHE_DIR_KEY, value),
    help="Keep the analysis cache under DIR (as RUNLENS_CACHE_DIR does): storage every "
         "Ray node shares, for --engine ray on a cluster.")


def source_option(f: Any) -> Any:
    return _source(_profile_run(_engine(_cache_dir(f))))


_STEPS_KEY = "runlens.steps"


def _remember_steps(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    ctx.meta.setdefault(_STEPS_KEY, {})[param.name] = value


def step_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--steps A:B and --include-warmup, which choice() reads from the context: the steps
    averages, checks and statistics cover (analyzer.analysis.stepselect)."""
    fn = click.option("--include-warmup", is_flag=True, expose_value=False,
                      callback=_remember_steps,
                      help="Keep warm-up and outlier steps (left out of averages, checks "
                           "and comparisons by default; rule: docs/ci.md).")(fn)
    return click.option("--steps", "steps", metavar="A:B", default=None, expose_value=False,
                        callback=_remember_steps,
                        help="Analyse only the traced steps from A to B, inclusive (A: or "
                             ":B leave an end open).")(fn)


def choice() -> StepChoice:
    """The StepChoice of --steps and --include-warmup."""
    from .analyzer.analysis.stepselect import StepChoice

    ctx = click.get_current_context(silent=True)
    given = ctx.meta.get(_STEPS_KEY, {}) if ctx is not None else {}
    return StepChoice.parse(given.get("steps"), bool(given.get("include_warmup")))


def view_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """tfprof's options as flags (tfprof's options.md; docs/views.md), generated from
    analyzer/analysis/view_options.py's FLAGS (names, types, defaults, help), plus --format and
    --tfprof."""
    from .analyzer.analysis.view_options import FLAGS
    from .analyzer.registries import formats

    for flag in reversed(FLAGS):
        name = "--" + flag.name.replace("_", "-")
        default = flag.default
        if flag.decl is not None:
            option = click.option(flag.decl, flag.name, default=default, help=flag.help)
        elif isinstance(default, bool):
            option = click.option(name, is_flag=True, help=flag.help)
        elif flag.name == "select":  # comma-separated on the command line
            option = click.option(name, default=",".join(default), show_default=True,
                                  help=flag.help)
        elif isinstance(default, tuple):
            option = click.option(name, multiple=True, default=list(default),
                                  show_default=bool(default), metavar="REGEX",
                                  help=flag.help)
        elif flag.choices is not None:
            option = click.option(name, type=click.Choice(list(flag.choices)),
                                  default=default, show_default=True, help=flag.help)
        else:
            option = click.option(name, type=type(default), default=default,
                                  show_default=True, help=flag.help)
        fn = option(fn)
        if flag.name == "step":  # --format sits between ours (op_types) and tfprof's
            fn = click.option("--format", "fmt", type=click.Choice(formats("view")),
                              default="text", show_default=True,
                              help="Output format; speedscope and pprof (gzipped "
                                   "profile.proto, to redirect to a file) are flame graphs "
                                   "of the code and scopes views.")(fn)
    fn = click.option("--tfprof", "tfprof_rows", is_flag=True, help="All four of the "
                      "above as tfprof does them, and --include-warmup: reproduces "
                      "tfprof's rows.")(fn)
    return step_options(fn)


def note_left_out(run: Run, options: ViewOptions) -> None:
    """Which steps step -1 leaves out, once on stderr (the rows stay tfprof-shaped)."""
    from .analyzer.analysis.stepselect import StepChoice, left_out

    dropped = left_out(run, StepChoice(options.include_warmup, options.first_step,
                                       options.last_step))
    if dropped:
        steps = ", ".join(f"{d['step']} ({d['why']})" for d in dropped[:8])
        more = f", ... ({len(dropped)} in all)" if len(dropped) > 8 else ""
        hint = ("; --include-warmup keeps them"
                if any(d["why"] != "outside --steps" for d in dropped) else "")
        click.echo(f"analyze: note: averages leave out step(s) {steps}{more}{hint}", err=True)


def emit(text: str | bytes, output: str | None) -> int:
    """Print, or write to --output (analyzer/output.py: atomically to a regular file or a
    new path, through a link to its target, streamed to a FIFO, a device or -); the
    bytes written."""
    if output is None:
        click.echo(text, nl=False)
        return len(text)

    from .analyzer import output as out

    data = text.encode("utf-8", "backslashreplace") if isinstance(text, str) else text
    return out.write(out.check(output), data)
