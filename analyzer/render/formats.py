"""The output formats of each command: the one list the CLI offers (`--format`) and the
renderers' registries are checked against (tests/test_cli_registries.py). Names only, so
that `analyze --help` does not import the renderers (polars)."""

from __future__ import annotations

VIEW = ("text", "json", "csv", "speedscope", "pprof")  # render/views.py RENDERERS
FINDINGS = ("text", "json")  # render/findings.py RENDERERS (analyze advise)
CRITICAL_PATH = ("text", "json")  # render/critical_path.py RENDERERS (graph --critical-path)
SUMMARY = ("text", "json")  # render/summary.py RENDERERS
COMPARE_PAGE = "html"  # analyzer/report's compare_page, not a RENDERERS entry
COMPARE = ("text", "json", "markdown", "junit", COMPARE_PAGE)  # render/compare.py + html
