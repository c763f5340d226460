"""The engine's registries of named extensions, one table each: a name -> the dotted
target that implements it (`module:attribute`, relative to runlens.analyzer), imported
on first use.

One fact in one place: the command line's choices and help texts (`--format`,
`--source`) are made from these tables, and the engine looks its extensions up in them;
nothing else lists them. Names only, no imports, so that `analyze --help` imports no
renderer, no source and no polars. tests/test_cli_registries.py checks that every target
exists and that the CLI offers exactly these names.

Checkers are registered by their own decorator (checkers/base.py: each module in
checkers/ is one); views by `analysis.views.VIEWS`, one command each.
"""

from __future__ import annotations

import importlib
from typing import Any

# Input formats, in detection order: the first source that accepts a path reads it.
# Each target is an object with the sources.Source protocol. xplane goes before the
# sources that open a file to recognize it: it goes by file name.
SOURCES: dict[str, str] = {
    "rundir": "sources.rundir:SOURCE",
    "xplane": "sources.xplane:SOURCE",
    "tracejson": "sources.tracejson:SOURCE",
    "timeline": "sources.timeline:SOURCE",
    "runmetadata": "sources.runmetadata:SOURCE",
    "events": "sources.events:SOURCE",
    "tfprof": "sources.tfprof:SOURCE",
}

# Who reads a run's parts (host files, worker dirs) when it has several: one task per
# part (analyzer/engines). The first is the default.
ENGINES: dict[str, str] = {
    "local": "engines.local:run",
    "ray": "engines.ray:run",
}

# Output formats of each kind of output: format -> the function that renders it.
RENDERERS: dict[str, dict[str, str]] = {
    # a View (analysis.views) -> str | bytes; speedscope and pprof: the tree views
    "view": {
        "text": "render.views:view_text",
        "json": "render.views:view_json",
        "csv": "render.views:view_csv",
        "speedscope": "render.speedscope:view_speedscope",
        "pprof": "render.pprof:view_pprof",
    },
    # analyze advise: (findings, meta) -> str
    "findings": {"text": "render.findings:findings_text", "json": "render.findings:findings_json"},
    # analyze graph --critical-path: a CriticalPath -> str
    "critical_path": {"text": "render.critical_path:critical_path_text",
                      "json": "render.critical_path:critical_path_json"},
    # analyze summary: the summary dict -> str
    "summary": {"text": "render.summary:summary_text", "json": "render.summary:summary_json"},
    # analyze compare: a Comparison -> str; html is the report's page, which also takes
    # the samples of both sides: (result, base_samples, new_samples) -> str
    "compare": {
        "text": "render.compare:compare_text",
        "json": "render.compare:compare_json",
        "markdown": "render.compare:compare_markdown",
        "junit": "render.compare:compare_junit",
        "html": "report:compare_page",
    },
}
COMPARE_PAGE = "html"  # the compare format rendered by the report (its own arguments)


def formats(kind: str) -> tuple[str, ...]:
    """The format names of one kind of output, in the table's order."""
    return tuple(RENDERERS[kind])


def load(target: str) -> Any:
    """The object a `module:attribute` target names (the module imported now)."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(f"{__package__}.{module}"), attribute)


def renderer(kind: str, fmt: str) -> Any:
    """The function that renders `kind` as `fmt` (a name of `formats(kind)`)."""
    return load(RENDERERS[kind][fmt])
