"""`analyze`: the runlens command line. Parses options and maps errors to exit codes.

No analysis happens here, and the engine is imported inside each command so that
`analyze --help` starts without loading polars or protobuf.

Exit codes: 0 fine; 1 the check failed (findings at or above --fail-on, or a regression);
2 bad usage or unreadable input (one line on stderr, no traceback); 3 internal error.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import click

EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL = 1, 2, 3


def _fail(message: str, code: int) -> None:
    click.echo(f"analyze: {message}", err=True)
    sys.exit(code)


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn engine errors into one line on stderr and an exit code; never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from analyzer.errors import RunlensError

        try:
            return fn(*args, **kwargs)
        except RunlensError as e:
            _fail(f"error: {e}", EXIT_BAD_INPUT)
        except KeyboardInterrupt:
            _fail("interrupted", 130)
        except BrokenPipeError:
            sys.stderr.close()  # `analyze ... | head`: the reader left, nothing to report
            sys.exit(0)
        except Exception as e:
            if os.environ.get("RUNLENS_DEBUG"):
                raise
            _fail(
                f"internal error: {type(e).__name__}: {e} "
                "(set RUNLENS_DEBUG=1 to see the traceback, and please report it)",
                EXIT_INTERNAL,
            )

    return wrapper


class _Progress:
    """Progress of long ingests on stderr, only when stderr is a terminal."""

    def __init__(self) -> None:
        self.enabled = sys.stderr.isatty()
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if self.enabled and total >= 20:
            self.shown = True
            click.echo(f"\ringesting step files {done}/{total}", err=True, nl=False)

    def close(self) -> None:
        if self.shown:
            click.echo("\r\033[K", err=True, nl=False)


def load(run_dir: str, no_cache: bool) -> Any:
    from analyzer.load import load_run

    progress = _Progress()
    try:
        run = load_run(run_dir, use_cache=not no_cache, progress=progress)
    finally:
        progress.close()
    for warning in run.warnings:
        click.echo(f"analyze: warning: {warning}", err=True)
    return run


run_dir_argument = click.argument("run_dir", metavar="RUN_DIR", type=click.Path())
no_cache_option = click.option(
    "--no-cache", is_flag=True, help="Ingest step files again instead of reading the cache."
)


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
    """Offline profiler and advisor for TensorFlow training runs.

    Reads a run directory written by runlens's capture hook (raw RunMetadata of traced
    steps, graph.pb, op_log.pb) without TensorFlow, and tells where the time and memory
    went. RUN_DIR may also be a directory of run dirs, one per worker.

    \b
    Examples:
      analyze summary fixtures/runs/mlp
    """


@main.command()
@run_dir_argument
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Output format.")
@no_cache_option
@handle_errors
def summary(run_dir: str, fmt: str, no_cache: bool) -> None:
    """Steps, workers, devices, node counts and step-time statistics of RUN_DIR."""
    from analyzer.steps import summary as make_summary

    data = make_summary(load(run_dir, no_cache))
    if fmt == "json":
        click.echo(json.dumps({"schema": 1, "summary": data}, indent=1))
    else:
        from analyzer.render.summary import summary_text

        click.echo(summary_text(data), nl=False)


if __name__ == "__main__":
    main()
