"""The `analyze` script (runlens.cli:run) ends the process without the interpreter's
teardown (cli_options.exit_without_teardown): what it prints, its exit status and the
cache it writes in the background must be those of an ordinary exit."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import FIXTURES, run_cli

SCRIPT = "import sys; from runlens.cli import run; sys.argv[0] = 'analyze'; run()"


def _script(args: list[str], cache_dir) -> subprocess.CompletedProcess:
    env = dict(os.environ, RUNLENS_CACHE_DIR=str(cache_dir))
    return subprocess.run([sys.executable, "-c", SCRIPT, *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=120)


def test_script_prints_the_view_and_finishes_its_cache(tmp_path):
    run = FIXTURES / "rnn_while"
    done = _script(["ops", run], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    # The same bytes as the command run in-process, which exits the ordinary way.
    assert done.stdout == run_cli(["ops", run]).output
    # The cache was written in a background thread: complete before the process ended.
    keys = list(tmp_path.rglob("key.json"))
    assert len(keys) == 1
    data = keys[0].parent
    assert sorted(p.name for p in data.iterdir() if p.is_dir() and p.name.startswith("data-"))
    warm = _script(["ops", run], tmp_path)
    assert warm.returncode == 0 and warm.stdout == done.stdout


def test_script_keeps_exit_codes_and_one_line_errors(tmp_path):
    missing = _script(["ops", tmp_path / "nothing"], tmp_path)
    assert missing.returncode == 2
    assert missing.stderr.count("\n") == 1 and "no such file or directory" in missing.stderr
    usage = _script(["ops", "--no-such-flag"], tmp_path)
    assert usage.returncode == 2 and "No such option" in usage.stderr
    assert _script(["--version"], tmp_path).returncode == 0
