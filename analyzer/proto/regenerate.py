"""Regenerate (or check) the committed ``*_pb2.py`` / ``*_pb2.pyi`` modules.

Usage, from the repository root::

    python -m runlens.analyzer.proto.regenerate          # rewrite generated modules
    python -m runlens.analyzer.proto.regenerate --check  # exit 1 if any is stale

Every ``analyzer/proto/*.proto`` is copied into a temporary tree under its installed
path (``runlens/analyzer/proto/step_stats.proto``: the name each file is registered
under in protobuf's descriptor pool, which must not collide with TensorFlow's own
``tensorflow/core/...`` files) and compiled there with ``grpc_tools.protoc`` (``-I``
that tree). protoc writes absolute imports (``from runlens.analyzer.proto import
step_stats_pb2``); they are rewritten to relative ones (``from . import step_stats_pb2``),
as every import inside the package is. Files are compiled
in sorted order into a temporary directory and then compared with (or copied
over) the committed ones, so the result is deterministic for a given
grpcio-tools version. Only files whose content changed are rewritten.

The generated code embeds the protoc version that produced it (header comment
and a ``ValidateProtobufRuntimeVersion`` call), so regenerating with a different
grpcio-tools release changes the output. The ``protobuf>=`` lower bound in
pyproject.toml must be at least that gencode version.

This module needs grpcio-tools (dev extra) but neither TensorFlow nor the
generated modules.
"""

from __future__ import annotations

import argparse
import difflib
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
# Package path of the generated modules in the temporary tree: their installed name.
PACKAGE_REL = Path("runlens", PROTO_DIR.parent.name, PROTO_DIR.name)
_ABSOLUTE_IMPORT = re.compile(rb"^from runlens\.analyzer\.proto import ", re.MULTILINE)
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi")

_VERSION_HEADER = re.compile(r"^# Protobuf Python Version: (\S+)$", re.MULTILINE)


class RegenerateError(RuntimeError):
    """protoc is unavailable or failed."""


def proto_files() -> list[Path]:
    """The .proto sources, as paths relative to the temporary tree, in sorted order."""
    return sorted(PACKAGE_REL / p.name for p in PROTO_DIR.glob("*.proto"))


def committed_files() -> dict[str, bytes]:
    """Generated files currently in PROTO_DIR, keyed by file name."""
    return {
        p.name: p.read_bytes()
        for p in sorted(PROTO_DIR.iterdir())
        if p.is_file() and p.name.endswith(GENERATED_SUFFIXES)
    }


def _protoc_cmd() -> list[str]:
    return [sys.executable, "-m", "grpc_tools.protoc"]


def protoc_version() -> str:
    """e.g. ``"libprotoc 35.1"``."""
    res = subprocess.run([*_protoc_cmd(), "--version"], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RegenerateError(f"cannot run grpc_tools.protoc: {res.stderr.strip()}")
    return res.stdout.strip()


def generate() -> dict[str, bytes]:
    """Compile every .proto into a temp dir; return {file name: content}."""
    protos = proto_files()
    if not protos:
        raise RegenerateError(f"no .proto files in {PROTO_DIR}")
    with tempfile.TemporaryDirectory(prefix="runlens-protoc-") as tmp:
        src = Path(tmp, "src")
        (src / PACKAGE_REL).mkdir(parents=True)
        for p in protos:
            (src / p).write_bytes((PROTO_DIR / p.name).read_bytes())
        cmd = [
            *_protoc_cmd(),
            f"-I{src}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            *(p.as_posix() for p in protos),
        ]
        res = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise RegenerateError(
                f"protoc failed (exit {res.returncode}):\n{res.stderr}{res.stdout}"
            )
        out_dir = Path(tmp) / PACKAGE_REL
        generated = {
            p.name: _ABSOLUTE_IMPORT.sub(b"from . import ", p.read_bytes())
            for p in sorted(out_dir.iterdir())
            if p.is_file() and p.name.endswith(GENERATED_SUFFIXES)
        }
    expected = {p.stem + s for p in protos for s in GENERATED_SUFFIXES}
    if set(generated) != expected:
        raise RegenerateError(
            f"unexpected protoc output: got {sorted(generated)}, expected {sorted(expected)}"
        )
    return generated


def gencode_version(content: bytes) -> str | None:
    """The 'Protobuf Python Version' recorded in a generated _pb2.py, if any."""
    m = _VERSION_HEADER.search(content.decode("utf-8", "replace"))
    return m.group(1) if m else None


def diff_generated(generated: dict[str, bytes], committed: dict[str, bytes]) -> list[str]:
    """Human-readable problems; empty when the committed files are fresh."""
    problems: list[str] = []
    for name in sorted(set(generated) | set(committed)):
        new, old = generated.get(name), committed.get(name)
        if old is None:
            problems.append(f"missing: {PACKAGE_REL / name}")
        elif new is None:
            problems.append(f"stale (no matching .proto): {PACKAGE_REL / name}")
        elif new != old:
            diff = difflib.unified_diff(
                old.decode("utf-8", "replace").splitlines(),
                new.decode("utf-8", "replace").splitlines(),
                f"committed/{name}",
                f"generated/{name}",
                n=1,
                lineterm="",
            )
            lines = [ln if len(ln) <= 160 else ln[:157] + "..." for ln in diff]
            shown = "\n".join(lines[:40]) + ("\n..." if len(lines) > 40 else "")
            problems.append(f"out of date: {PACKAGE_REL / name}\n{shown}")
    if problems:
        old_v = {v for n, c in committed.items() if n.endswith(".py") and (v := gencode_version(c))}
        new_v = {v for n, c in generated.items() if n.endswith(".py") and (v := gencode_version(c))}
        if old_v and new_v and old_v != new_v:
            problems.append(
                f"note: committed modules were generated by protobuf {sorted(old_v)}, "
                f"this grpcio-tools generates {sorted(new_v)}; use the same "
                "grpcio-tools release (or regenerate and bump protobuf>= in pyproject.toml)."
            )
    return problems


def check() -> list[str]:
    """Problems with the committed generated files (empty list == fresh)."""
    return diff_generated(generate(), committed_files())


def write() -> list[str]:
    """Regenerate in place; return names of files written or removed."""
    generated = generate()
    committed = committed_files()
    changed: list[str] = []
    for name, content in generated.items():
        if committed.get(name) != content:
            (PROTO_DIR / name).write_bytes(content)
            changed.append(name)
    for name in sorted(set(committed) - set(generated)):
        (PROTO_DIR / name).unlink()
        changed.append(f"{name} (removed)")
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m runlens.analyzer.proto.regenerate", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not write; exit 1 if any generated file differs from what protoc produces",
    )
    args = parser.parse_args(argv)
    try:
        version = protoc_version()
        if args.check:
            problems = check()
            for p in problems:
                print(p, file=sys.stderr)
            if problems:
                print(
                    f"generated protobuf modules are stale ({version}); "
                    "run: python -m runlens.analyzer.proto.regenerate",
                    file=sys.stderr,
                )
                return 1
            print(f"generated protobuf modules are up to date ({version})")
            return 0
        changed = write()
    except RegenerateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name in changed:
        print(f"wrote {PACKAGE_REL / name}")
    print(f"{len(changed)} file(s) changed ({version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
