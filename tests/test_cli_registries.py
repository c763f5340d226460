"""The CLI names what the engine's registries hold: every --format choice has a renderer
and every renderer is offered (cli.py reads analyzer/render/formats.py, a list of names,
so that `analyze --help` does not import the renderers), and every view has its command."""

from __future__ import annotations

import click
from runlens import cli
from runlens.analyzer.analysis.views import VIEWS
from runlens.analyzer.render import compare as compare_render
from runlens.analyzer.render import critical_path, findings, formats, summary
from runlens.analyzer.render import views as view_render


def _choices(command: str, option: str = "fmt") -> set[str]:
    cmd = cli.main.commands[command]
    (param,) = [p for p in cmd.params if p.name == option]
    assert isinstance(param.type, click.Choice)
    return set(param.type.choices)


def test_view_formats_are_the_view_renderers():
    for kind in VIEWS:
        assert _choices(kind) == set(view_render.RENDERERS), kind


def test_other_formats_are_their_renderers():
    assert _choices("advise") == set(findings.RENDERERS)
    assert set(critical_path.RENDERERS) <= _choices("graph")
    # compare renders html through analyzer.report, the rest through its renderers
    assert _choices("compare") == set(compare_render.RENDERERS) | {"html"}


def test_every_view_has_a_command():
    assert set(VIEWS) <= set(cli.main.commands)


def test_format_lists_are_the_renderers():
    assert set(formats.VIEW) == set(view_render.RENDERERS)
    assert set(formats.FINDINGS) == set(findings.RENDERERS)
    assert set(formats.CRITICAL_PATH) == set(critical_path.RENDERERS)
    assert set(formats.COMPARE) == set(compare_render.RENDERERS) | {formats.COMPARE_PAGE}
    assert set(formats.SUMMARY) == set(summary.RENDERERS)
    assert _choices("summary") == set(formats.SUMMARY)
