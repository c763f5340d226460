"""Output paths (issue 25): `-o` writes atomically only to a regular file or a new path,
through a symlink to its target, streams to a FIFO or a character device, and anything it
cannot write is one line, exit 2, never a traceback; it never replaces a link, a FIFO or a
device (analyzer/output.py)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest

from tests import faults
from tests.conftest import FIXTURES, run_cli


def _report(path: Path | str, expect: int = 0) -> str:
    return run_cli(["report", FIXTURES / "mlp", "-o", path, "--no-cache"],
                   expect_exit=expect).output


def test_output_through_a_symlink_writes_its_target_and_keeps_the_link(tmp_path):
    target = tmp_path / "target.html"
    target.write_text("old")
    target.chmod(0o640)
    link = tmp_path / "link.html"
    link.symlink_to(target.name)
    _report(link)
    assert link.is_symlink() and target.read_text().startswith("<!doctype html>")
    assert target.stat().st_mode & 0o777 == 0o640  # the replaced file's permissions
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to("made.json")
    run_cli(["baseline", "save", FIXTURES / "mlp", "-o", dangling])
    assert dangling.is_symlink() and json.loads((tmp_path / "made.json").read_text())
    assert not list(tmp_path.glob(".*.tmp"))


def test_output_to_a_fifo_streams_and_leaves_the_fifo(tmp_path):
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    run_cli(["timeline", FIXTURES / "mlp", "-o", fifo, "--no-cache"])
    reader.join(timeout=60)
    assert json.loads(got[0])["traceEvents"]
    assert fifo.is_fifo()


@pytest.mark.parametrize("args", [["report", "-o"], ["timeline", "-o"],
                                  ["baseline", "save", "-o"],
                                  ["compare", "--format", "junit", "-o"]])
def test_output_to_devices_streams_or_is_one_line_exit_2(args):
    """/dev/null is written through (it was replaced by a file as root before); /dev/full
    is exit 2 with the reason; '-' is standard output."""
    def cmd(out: str) -> list:
        head, tail = args[:-1], [args[-1], out]
        runs = [FIXTURES / "mlp"] * (2 if args[0] == "compare" else 1)
        if args[0] == "baseline":
            return [*head, *runs, *tail]
        return [head[0], *runs, *head[1:], *tail]

    run_cli(cmd("/dev/null"))
    assert Path("/dev/null").is_char_device()
    full = run_cli(cmd("/dev/full"), expect_exit=2).output.strip().splitlines()
    assert full[-1].startswith("analyze: error: /dev/full: cannot write (No space left")
    assert Path("/dev/full").is_char_device()
    assert len(run_cli(cmd("-")).stdout) > 100


def test_output_that_cannot_be_written_is_one_line_exit_2(tmp_path):
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "adir").mkdir()
    for path in (tmp_path / "loop", tmp_path / "nowhere" / "x.html", tmp_path / "adir"):
        output = _report(path, expect=2)
        assert len(output.strip().splitlines()) == 1 and path.name in output


def test_report_into_a_directory_the_user_cannot_write_is_exit_2(tmp_path):
    """It was exit 3 (PermissionError). As root the permission cannot bite: the check runs
    as `nobody` (tests/faults.py cli_as_nobody), as tests/test_faults.py does."""
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        assert "Permission denied" in _report(locked / "r.html", expect=2)
        return
    # pytest's tmp folders are root's alone: a world-readable one under /tmp
    tmp_path = Path(tempfile.mkdtemp(prefix="runlens-h25-"))
    tmp_path.chmod(0o755)
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "mlp", run, ignore=shutil.ignore_patterns(".runlens"))
    (tmp_path / "locked").mkdir(mode=0o755)
    args = ["report", str(run), "-o", str(tmp_path / "locked" / "r.html"), "--no-cache"]
    (got,) = faults.cli_as_nobody([args], tmp_path / "nobody-cache")
    shutil.rmtree(tmp_path, ignore_errors=True)
    assert got[0] == 2, got
    assert "r.html" in got[1] and "Permission denied" in got[1] and "Traceback" not in got[1]
