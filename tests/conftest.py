"""Shared test helpers: the committed fixtures and one way to run the CLI."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Module- and session-scoped fixtures load runs before any function fixture runs: their
# caches go to one folder of this process (each xdist worker its own), not beside the data.
os.environ["RUNLENS_CACHE_DIR"] = tempfile.mkdtemp(prefix="runlens-tests-cache-")
atexit.register(shutil.rmtree, os.environ["RUNLENS_CACHE_DIR"], True)

ROOT = Path(__file__).resolve().parents[1]
COMPARE = ROOT / "fixtures" / "compare"
# The transformer's compare fixtures: three same-config processes and block3's MLP wider.
TF_RUNS = ("tf_base_a", "tf_base_b", "tf_base_c", "tf_wide_block3")
FIXTURES = ROOT / "fixtures" / "runs"
FIXTURE_NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "steps").is_dir())
# Captured by our hook from TensorFlow (graph.pb, op_log.pb, >= 5 steps); the others are
# real GPU traces converted from tf.timeline (fixtures/from_timeline.py): steps only.
CAPTURED = [n for n in FIXTURE_NAMES if (FIXTURES / n / "graph.pb").is_file()]


@pytest.fixture(params=FIXTURE_NAMES)
def fixture_dir(request) -> Path:
    return FIXTURES / request.param


@pytest.fixture(params=CAPTURED)
def captured_dir(request) -> Path:
    return FIXTURES / request.param


@pytest.fixture
def run_copy(tmp_path):
    """A writable copy of a committed fixture (tests must never touch fixtures/)."""

    def make(name: str) -> Path:
        dst = tmp_path / name
        shutil.copytree(FIXTURES / name, dst, ignore=shutil.ignore_patterns(".runlens"))
        return dst

    return make


@pytest.fixture(autouse=True)
def _isolated_user_cache(tmp_path, tmp_path_factory, monkeypatch):
    """Cache writes go to the test's tmp dir, never to ~/.cache, the committed fixtures or
    ../shared (RUNLENS_CACHE_DIR: nothing beside the data). A test of the cache beside a
    run takes it off (`monkeypatch.delenv`) on a copy in its tmp dir."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    monkeypatch.setenv("RUNLENS_CACHE_DIR", str(tmp_path_factory.mktemp("runlens-cache")))
    monkeypatch.delenv("COLUMNS", raising=False)  # text output as piped, whatever the shell


@pytest.fixture
def cache_beside_data(_isolated_user_cache, monkeypatch):
    """The cache where users get it, beside the data (RUNLENS_CACHE_DIR unset): for the
    tests of its placement, which work on copies in their tmp dir."""
    monkeypatch.delenv("RUNLENS_CACHE_DIR")


def run_cli(args: list[str], expect_exit: int = 0):
    """Run `analyze ARGS` in-process; assert the exit code and that no traceback leaked."""
    from runlens.cli import main

    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    output = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert result.exit_code == expect_exit, f"exit {result.exit_code}: {output}"
    assert "Traceback" not in output
    return result


@pytest.fixture(scope="session")
def tf():
    """Per-step samples of each of TF_RUNS (read once per test process)."""
    from runlens.analyzer.gate.compare import samples_from_run
    from runlens.analyzer.load import load_run

    return {name: samples_from_run(load_run(COMPARE / name, use_cache=False), name)
            for name in TF_RUNS}


def run_training(script: Path, mode: str, logdir: Path, first: int, last: int, steps: int
                 ) -> subprocess.CompletedProcess:
    """A real training process (tests/capture_*_train.py) profiling steps first..last of
    `steps`, in its own interpreter: a capture helper must never break it."""
    result = subprocess.run([sys.executable, str(script), mode, str(logdir), str(first),
                             str(last), str(steps)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return result
