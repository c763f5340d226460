"""Generators and checks of the fault-injection cases of the newer readers (issue 25):
timeline JSON, trace.json.gz, loose RunMetadata, event files, xplane; used by
tests/test_faults_readers.py (CI: seeded, a few hundred cases) and tests/fuzz_sources.py
(by hand, at length).

Each case is an input that a crash, a copy or a hostile user may produce: a mutated copy
of a real fixture (byte and bit flips, truncations, insertions of bytes that start
groups, bad UTF-8 or overlong lengths, deletions) or a crafted value (numbers beyond
int64 or a double, wrong JSON types, lone surrogates, deep nesting). The promise: exit 0
or exit 2 with one line naming the file, never exit 3, a hang or a traceback; the C and
the protobuf xplane paths agree on each file (both refuse it, or both read the same
frames).
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "fixtures" / "sources"
XPLANES = sorted((ROOT / "fixtures" / "xplane").glob("*/plugins/profile/run1/*.xplane.pb"))
TIMELINE = SOURCES / "profilerhook" / "timeline-3.json"
TRACE = ROOT / "fixtures" / "tracejson" / "keras_fit" / "plugins" / "profile" / "run1" \
    / "worker0.trace.json.gz"
RUN_METADATA = SOURCES / "runmetadata" / "run_metadata_1.pb"
EVENTS = SOURCES / "profilerhook" / "events.out.tfevents.0.fixture"

# Bytes whose insertion tests the wire rules: a group start/end, bad UTF-8, an overlong
# length, a tag of field 0, wire types 6 and 7.
_SPECIALS = [b"\x0b", b"\x0c", b"\x4b\x4c", b"\xff", b"\xc0\x80", b"\xed\xa0\x80",
             b"\x2a\x01\xff", b"\x81\x80\x80\x80\x80\x00", b"\x00", b"\x06", b"\x07"]


def mutate(raw: bytes, rng: random.Random) -> tuple[str, bytes]:
    """(kind, a damaged copy of raw)."""
    b = bytearray(raw)
    kind = rng.choice(["flip", "bit", "truncate", "insert", "special", "delete"])
    if kind == "flip":
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    elif kind == "bit":
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del b[rng.randrange(len(b)):]
    elif kind == "insert":
        pos = rng.randrange(len(b) + 1)
        b[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 40)))
    elif kind == "special":
        pos = rng.randrange(len(b) + 1)
        b[pos:pos] = rng.choice(_SPECIALS)
    else:
        pos = rng.randrange(len(b))
        del b[pos:pos + rng.randint(1, 8)]
    return kind, bytes(b)


def mutate_file(raw: bytes, name: str, rng: random.Random) -> tuple[str, bytes]:
    """mutate, of the JSON inside a .gz half of the time (a flipped byte of the deflate
    stream is nearly always a CRC error: the parser would never see damage)."""
    if name.endswith(".gz") and rng.random() < 0.5:
        kind, text = mutate(gzip.decompress(raw), rng)
        return f"{kind}-inside", gzip.compress(text, mtime=0)
    return mutate(raw, rng)


# ----------------------------------------------------------------------------- JSON


def _x_events(doc: Any) -> list[dict]:
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]


def _set(key: str, value: Any, where: str = "") -> Callable[[Any, random.Random], None]:
    def edit(doc: Any, rng: random.Random) -> None:
        event = rng.choice(_x_events(doc))
        (event.setdefault("args", {}) if where == "args" else event)[key] = value
    return edit


BIG = "__1e400__"  # written as the bare number 1e400 (json.dumps cannot)
# Crafted values of the campaign and more: each in one event of a real trace.
JSON_CRAFTS: dict[str, Callable[[Any, random.Random], None]] = {
    "ts-1e400": _set("ts", BIG), "ts-1e30": _set("ts", 1e30), "ts-nan": _set("ts", "NaN"),
    "ts-str": _set("ts", "x"), "ts-list": _set("ts", [1]), "ts-neg-big": _set("ts", -2**63),
    "dur-1e30": _set("dur", 1e30), "dur-int-huge": _set("dur", 2**70),
    "tid-neg": _set("tid", -2**63), "tid-big": _set("tid", 2**64), "tid-null": _set("tid", None),
    "pid-neg": _set("pid", -2**63), "pid-list": _set("pid", [1]),
    "name-list": _set("name", [], "args"), "name-dict": _set("name", {}, "args"),
    "op-int": _set("op", 5, "args"), "input-list": _set("input0", [1], "args"),
    "args-list": _set("args", []), "args-null": _set("args", None),
    "event-name-list": _set("name", []), "surrogate": _set("name", "\ud800", "args"),
    "surrogate-name": _set("name", "\udfff"),
}


def json_doc(raw: bytes, gz: bool) -> Any:
    return json.loads(gzip.decompress(raw) if gz else raw)


def json_bytes(doc: Any, gz: bool) -> bytes:
    text = json.dumps(doc).replace(f'"{BIG}"', "1e400").encode()
    return gzip.compress(text, mtime=0) if gz else text


def deep(gz: bool) -> bytes:
    text = b'{"traceEvents":' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    return gzip.compress(text, mtime=0) if gz else text


# ----------------------------------------------------------------------------- outcomes


def cli_outcome(args: list[str]) -> tuple[int, str]:
    """Exit code and output of the CLI in this process (as tests/conftest's run_cli)."""
    from click.testing import CliRunner

    from runlens.cli import main

    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def check_cli(args: list[str], path: Path) -> str:
    """'read' or 'refused' (one line naming `path`); AssertionError otherwise."""
    code, output = cli_outcome(args)
    assert code in (0, 2), (args, code, output[-600:])
    assert "Traceback" not in output, output[-600:]
    if code == 0:
        return "read"
    lines = output.strip().splitlines()
    assert len(lines) == 1 and path.name in lines[0], output[-600:]
    return "refused"


FRAMES = ("executions", "keys", "threads", "allocations", "step_spans", "graph_nodes", "code")


def xplane_outcome(path: Path, native: bool) -> tuple[str, Any]:
    """("read", its frames) or ("refused", the message) of read_file on one path."""
    from runlens.analyzer.errors import InputFileError
    from runlens.analyzer.sources.xplane import read_file

    try:
        result = read_file(path, "w", native=native, jobs=1)
    except InputFileError as e:
        return "refused", str(e)
    return "read", {k: result.frames[k] for k in FRAMES}


def xplane_agree(path: Path) -> str:
    """Both paths on one file: 'read' or 'refused' when they agree (the same frames when
    both read it); AssertionError naming the difference otherwise."""
    c, c_out = xplane_outcome(path, native=True)
    p, p_out = xplane_outcome(path, native=False)
    assert c == p, (c, p, c_out if c == "refused" else p_out)
    if c == "read":
        for name in FRAMES:
            a, b = c_out[name], p_out[name]
            assert a.equals(b) if isinstance(a, pl.DataFrame) else a == b, name
    return c
