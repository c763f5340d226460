"""Build one of runlens's C modules under AddressSanitizer + UBSan, and run a fuzz script
with the sanitizer runtimes preloaded (CPython itself is not built with them). Shared by
tests/fuzz_*.py (run by hand, not by pytest)."""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def build(module: str, out_dir: Path) -> Path:
    """analyzer/<module>.c compiled with the sanitizers into out_dir."""
    so = out_dir / f"{module}_sanitized.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", "-g", "-fsanitize=address,undefined",
         "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer", "-std=c99",
         f"-I{sysconfig.get_paths()['include']}", str(ROOT / "analyzer" / f"{module}.c"),
         "-o", str(so)],
        check=True)
    return so


def load(module: str, so: Path) -> ModuleType:
    """The sanitized build as a module named `module` (call in the preloaded child)."""
    loader = importlib.machinery.ExtensionFileLoader(module, str(so))
    spec = importlib.util.spec_from_loader(module, loader)
    assert spec is not None
    built = importlib.util.module_from_spec(spec)
    loader.exec_module(built)
    return built


def rerun_sanitized(module: str, script: str, args: list[str]) -> int:
    """Build `module`, then run `script` again with `args` + ["--_so", SO] in a child
    whose sanitizer runtimes are preloaded; its exit code (non-zero on any report)."""
    with tempfile.TemporaryDirectory() as tmp:
        so = build(module, Path(tmp))
        libs = [subprocess.run(["gcc", f"-print-file-name={lib}"], capture_output=True,
                               text=True, check=True).stdout.strip()
                for lib in ("libasan.so", "libubsan.so")]
        env = {**os.environ, "LD_PRELOAD": " ".join(libs), "ASAN_OPTIONS": "detect_leaks=0"}
        return subprocess.run([sys.executable, script, *args, "--_so", str(so)],
                              env=env, cwd=ROOT).returncode


def fuzz_main(module: str, script: str, doc: str | None, fuzz: Callable[[Path, int, int], None],
              iterations: int) -> int:
    """The command line of a fuzz script that mutates inputs of one C module:
    `[--iterations N] [--seed S]`. Rebuilds the module sanitized and runs `script` again
    preloaded, where `fuzz(so, iterations, seed)` runs; the child's exit code."""
    ap = argparse.ArgumentParser(description=(doc or script).splitlines()[0])
    ap.add_argument("--iterations", type=int, default=iterations)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--_so", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._so:  # the child, with the sanitizer runtimes preloaded
        fuzz(args._so, args.iterations, args.seed)
        return 0
    return rerun_sanitized(module, script, [
        "--iterations", str(args.iterations), "--seed", str(args.seed)])
