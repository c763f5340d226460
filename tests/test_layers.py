"""The import direction of docs/architecture.md, checked on the source: every import of
the package's modules (at module level, inside functions and under TYPE_CHECKING alike)
goes down the layers or stays inside its own layer, and no group of modules imports
itself in a cycle. An import inside a function is still an import: hiding a cycle there
does not break it."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]

# Top to bottom. A module may import modules of its own layer and of the layers below.
# Packages of one layer that must not import each other are listed in INDEPENDENT.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("command line", ("runlens.cli", "runlens.cli_gate", "runlens.cli_options")),
    ("report", ("runlens.analyzer.report",)),
    ("advisor", ("runlens.checkers",)),
    ("render", ("runlens.analyzer.render",)),
    ("gate and timeline", ("runlens.analyzer.gate", "runlens.analyzer.timeline")),
    ("engines", ("runlens.analyzer.engines",)),
    ("analysis", ("runlens.analyzer.analysis",)),
    ("load and caches", ("runlens.analyzer.load", "runlens.analyzer.products",
                         "runlens.analyzer.productcache", "runlens.analyzer.cache")),
    ("sources", ("runlens.analyzer.sources",)),
    ("ingest", ("runlens.analyzer.ingest",)),
    ("model", ("runlens.analyzer.model", "runlens.analyzer.origin")),
    ("capture", ("runlens.analyzer.capture",)),
    ("foundation", ("runlens.analyzer.errors", "runlens.analyzer.schema",
                    "runlens.analyzer.units", "runlens.analyzer.registries",
                    "runlens.analyzer.rundir", "runlens.analyzer.samejob",
                    "runlens.analyzer.readfile", "runlens.analyzer.output",
                    "runlens.analyzer.digest", "runlens.analyzer.grouping",
                    "runlens.analyzer.background", "runlens.analyzer.proto",
                    "runlens.analyzer._stepstats", "runlens.analyzer._xplane",
                    "runlens.analyzer._tfprof", "runlens.analyzer._jsonrows")),
    ("packages", ("runlens", "runlens.analyzer")),  # empty __init__ files (exactly)
]
EXACT = {"packages"}  # layers whose names match whole module names, not prefixes
INDEPENDENT = [("runlens.analyzer.gate", "runlens.analyzer.timeline")]


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package: name -> (file, is a package)."""
    files = [ROOT / "__init__.py", ROOT / "cli.py", ROOT / "cli_options.py",
             *(ROOT / "analyzer").rglob("*.py"), *(ROOT / "checkers").rglob("*.py")]
    out = {}
    for path in files:
        if "__pycache__" in path.parts:
            continue
        parts = ["runlens", *path.relative_to(ROOT).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


MODULES = _modules()


def _imports(name: str) -> list[tuple[int, str]]:
    """(line, module) of every import of a runlens module in `name`, anywhere in it."""
    path, is_package = MODULES[name]
    package = name if is_package else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            for alias in node.names:  # `from . import x`: the submodule x, if it is one
                sub = f"{module}.{alias.name}"
                found.append((node.lineno, sub if sub in MODULES else module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return [(line, m) for line, m in found if m.split(".")[0] == "runlens"]


def _layer(module: str) -> int:
    best = None
    for i, (layer, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or (layer not in EXACT and module.startswith(prefix + ".")):
                if best is None or len(prefix) > best[1]:
                    best = (i, len(prefix))
    assert best is not None, f"{module}: in no layer of tests/test_layers.py"
    return best[0]


def _graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    for name in MODULES:
        graph.add_node(name)
        for line, target in _imports(name):
            if target != name:
                graph.add_edge(name, target, line=line)
    return graph


def test_every_module_has_a_layer():
    for name in MODULES:
        _layer(name)


def test_imports_go_down_the_layers():
    upward = [f"{a}:{data['line']} imports {b} ({LAYERS[_layer(b)][0]} is above "
              f"{LAYERS[_layer(a)][0]})"
              for a, b, data in _graph().edges(data=True) if _layer(b) < _layer(a)]
    assert not upward, "\n".join(sorted(upward))


def test_independent_packages_do_not_import_each_other():
    found = [f"{a} imports {b}" for a, b in _graph().edges
             for x, y in INDEPENDENT for p, q in ((x, y), (y, x))
             if a.startswith(p + ".") and b.startswith(q + ".")]
    assert not found, "\n".join(found)


def test_no_import_cycle():
    cycles = [sorted(c) for c in nx.strongly_connected_components(_graph()) if len(c) > 1]
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def test_checkers_do_not_use_the_renderers():
    """The advisor reads the analysis and formats numbers with analyzer.units, never
    render/ (which is above it)."""
    found = [f"{a} imports {b}" for a, b in _graph().edges
             if a.startswith("runlens.checkers") and b.startswith("runlens.analyzer.render")]
    assert not found, "\n".join(found)
