"""runlens installs one top-level name, `runlens` (runlens.analyzer, runlens.checkers,
runlens.cli, runlens.cli_options), so that it never collides with another package's
`cli` or `analyzer`. The repository root is that package (pyproject.toml's package-dir):
no links, the engine imports itself relatively, so a module can be imported by one name
only (two names would mean two modules with two checker registries)."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
OLD_NAMES = ("analyzer", "checkers", "cli", "cli_options")
# Import statements in a one-line program (`python -c "import sys, runlens.analyzer; ..."`).
IN_STRING = re.compile(r"(?:^|[;\n])[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import\b"
                       r"|import[ \t]+([\w.]+(?:[ \t]*,[ \t]*[\w.]+)*))")


def _tree_python_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                          "*.py", "*.pyi"], cwd=ROOT, capture_output=True, check=True).stdout
    paths = [ROOT / p for p in out.decode().split("\0") if p]
    return [p for p in paths if p.is_file() and not p.is_symlink()]


def _imported(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in `path`: its statements, and those in
    its string constants (code run by `python -c`)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for m in IN_STRING.finditer(node.value):
                names = [m[1]] if m[1] else [n.strip() for n in m[2].split(",")]
                out += [(node.lineno, n) for n in names]
    return out


def test_no_module_in_the_tree_imports_an_old_top_level_name():
    found = [f"{path.relative_to(ROOT)}:{line}: {name}"
             for path in _tree_python_files() for line, name in _imported(path)
             if name.split(".")[0] in OLD_NAMES]
    assert not found, "old top-level names (use runlens.analyzer...):\n" + "\n".join(found)


def _engine_python_files() -> list[Path]:
    return [p for p in _tree_python_files()
            if p.relative_to(ROOT).parts[0] in ("analyzer", "checkers", "cli.py", "cli_options.py")]


def test_the_engine_imports_itself_relatively():
    """Inside the package no import names `runlens` (or an old top-level name): the tree
    on disk is the package, whatever it is installed as."""
    found = [f"{path.relative_to(ROOT)}:{line}: {name}"
             for path in _engine_python_files() for line, name in _imported(path)
             if name.split(".")[0] in ("runlens", *OLD_NAMES)]
    assert not found, "absolute imports of the package inside it:\n" + "\n".join(found)


def test_no_symlink_in_the_tree():
    out = subprocess.run(["git", "ls-files", "-s", "-z"], cwd=ROOT, capture_output=True,
                         check=True).stdout.decode()
    links = [e.split("\t", 1)[1] for e in out.split("\0") if e.startswith("120000 ")]
    assert links == []


def test_pyproject_names_every_package_of_the_tree():
    """The packages are listed (not found, so that tests/ and fixtures/ stay out of the
    wheel): the list must hold every folder of analyzer/ and checkers/ with an __init__.py,
    and the data-only folders whose files are shipped (package-data: the report's vendor/),
    which setuptools otherwise installs with a deprecation warning."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {"runlens": "."}
    on_disk = {"runlens"} | {
        "runlens." + ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("analyzer", "checkers") for p in (ROOT / top).rglob("__init__.py")
        if "__pycache__" not in p.parts}
    data_only = {name for name in config["package-data"] if name not in on_disk}
    for name in data_only:
        assert (ROOT / Path(*name.split(".")[1:])).is_dir(), name
    assert set(config["packages"]) == on_disk | data_only


def _checkout(dest: Path) -> None:
    """The tree's files as a fresh clone would hold them (no build/, no built modules), so
    the wheel is built from what is committed, not from leftovers."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, out.decode().split("\0")):
        src, dst = ROOT / rel, dest / rel
        if not src.is_file():
            continue  # deleted, not yet committed
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """runlens's wheel, built from a copy of this tree as `pip install .` builds it."""
    if shutil.which("gcc") is None:
        pytest.fail("gcc is needed to build the wheel's C modules (the dev setup has it)")
    tree, out = tmp_path_factory.mktemp("tree"), tmp_path_factory.mktemp("wheel")
    _checkout(tree)
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                          "--no-build-isolation", "-w", str(out), str(tree)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    (built,) = out.glob("runlens-*.whl")
    return built


def test_a_wheel_holds_only_the_runlens_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"runlens"}
    # the root's modules: the package and its command line, not the build script
    assert {n for n in names if n.count("/") == 1 and n.startswith("runlens/")} == {
        "runlens/__init__.py", "runlens/cli.py", "runlens/cli_gate.py",
        "runlens/cli_options.py"}
    for expected in ("runlens/__init__.py", "runlens/cli.py", "runlens/cli_options.py",
                     "runlens/analyzer/load.py", "runlens/checkers/base.py",
                     "runlens/analyzer/proto/step_stats.proto",
                     "runlens/analyzer/proto/step_stats_pb2.pyi",
                     "runlens/analyzer/_stepstats.pyi",
                     "runlens/analyzer/report/vendor/echarts.min.js"):
        assert expected in names
    for module in ("_stepstats", "_xplane", "_tfprof", "_jsonrows"):  # built with gcc
        assert any(re.fullmatch(rf"runlens/analyzer/{module}\.[^/]*\.so", n) for n in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert re.search(r"^analyze = runlens\.cli:run$", text, re.MULTILINE)


CHILD = """
import functools, json, os, sys
from runlens import cli
from runlens.analyzer import ingest, load
from runlens.analyzer.ingest import rundir as rundir_reader
try:
    cli.main(["advise", "--no-cache", "--format", "json", sys.argv[1]])
except SystemExit as e:
    code = e.code
# Ingest in spawned processes: the pool's children unpickle the run-dir reader's
# function by its installed name.
os.environ["RUNLENS_PURE_PYTHON"] = "1"
rundir_reader.PARALLEL_MIN_BYTES = 0
pools = []
in_processes = rundir_reader._ingest_in_processes
rundir_reader._ingest_in_processes = lambda *a: pools.append(in_processes(*a)) or pools[-1]
run = load.load_run(sys.argv[2], jobs=2, use_cache=False)
old = sorted(m for m in sys.modules if m.split(".")[0] in %r)
print()  # advise's JSON ends without a newline
print(json.dumps({"code": code, "old": old, "file": load.__file__, "pool": pools[0] is not None,
                  "native": ingest._stepstats is not None, "rows": run.nodes.height}))
"""


def test_the_installed_wheel_runs_under_its_own_names(wheel, tmp_path):
    """Unpacked where nothing else is on the path (not the repository), `analyze advise`
    and a multi-process ingest run, and no module was imported by an old name."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    fixtures = ROOT / "fixtures" / "runs"
    res = subprocess.run([sys.executable, "-c", CHILD % (OLD_NAMES,), str(fixtures / "cnn"),
                          str(fixtures / "rnn_while")], cwd=tmp_path, capture_output=True,
                         text=True, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["code"] == 0, res.stderr
    assert out["old"] == []
    assert Path(out["file"]).is_relative_to(site)
    assert out["native"] and out["pool"] and out["rows"] > 0
