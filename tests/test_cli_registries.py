"""The CLI names what the engine's registries hold: analyzer/registries.py is the one
table of sources and of renderers (names -> targets imported on use, so that `analyze
--help` imports none of them); every target exists, every --format choice is a renderer
of that kind and every renderer is offered, --source names every source, and every view
has its command."""

from __future__ import annotations

import inspect
import subprocess
import sys

import click
import pytest

from runlens import cli
from runlens.analyzer import registries
from runlens.analyzer.analysis.views import VIEWS
from runlens.analyzer.sources import registered


def _choices(command: str, option: str = "fmt") -> set[str]:
    cmd = cli.main.commands[command]
    (param,) = [p for p in cmd.params if p.name == option]
    assert isinstance(param.type, click.Choice)
    return set(param.type.choices)


@pytest.mark.parametrize("kind", sorted(registries.RENDERERS))
def test_every_renderer_target_is_a_function(kind):
    for fmt in registries.formats(kind):
        assert inspect.isfunction(registries.renderer(kind, fmt)), (kind, fmt)


def test_view_formats_are_the_view_renderers():
    for kind in VIEWS:
        assert _choices(kind) == set(registries.formats("view")), kind


def test_other_formats_are_their_renderers():
    assert _choices("advise") == set(registries.formats("findings"))
    assert _choices("summary") == set(registries.formats("summary"))
    assert set(registries.formats("critical_path")) <= _choices("graph")
    assert _choices("compare") == set(registries.formats("compare"))
    assert registries.COMPARE_PAGE in registries.formats("compare")


def test_every_source_target_is_that_source_in_detection_order():
    assert [s.kind for s in registered()] == list(registries.SOURCES)


def test_source_help_names_every_source():
    param = next(p for p in cli.main.commands["ops"].params if p.name == "source")
    assert all(kind in param.help for kind in registries.SOURCES)


def test_every_view_has_a_command():
    assert set(VIEWS) <= set(cli.main.commands)


def test_help_imports_no_renderer_source_or_polars():
    code = ("import sys; from runlens import cli; "
            "sys.argv = ['analyze', '--help']\n"
            "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
            "bad = [m for m in sys.modules if m.startswith(('polars', 'runlens.analyzer.render.', "
            "'runlens.analyzer.sources.'))]\n"
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip().splitlines()[-1]
    assert out == "[]"
