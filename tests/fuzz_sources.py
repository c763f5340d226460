"""Fuzz every source with mutated copies of its fixture (not part of pytest: slow).

Each fixture file of fixtures/sources is truncated, overwritten at random bytes, grown by
random bytes or has characters replaced; `analyze summary` (detected) and `analyze ops
--source KIND` must exit 0 or 2, never 3, and never print a traceback.

    python tests/fuzz_sources.py [--iterations 40] [--seed 1]

tests/test_sources.py checks the truncated case of every kind.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from click.testing import CliRunner  # noqa: E402
from runlens.cli import main as cli_main  # noqa: E402

SRC = ROOT / "fixtures" / "sources"
FILES = [(SRC / "profilerhook" / "timeline-3.json", "timeline"),
         (SRC / "runmetadata" / "run_metadata_1.pb", "runmetadata"),
         (SRC / "runmetadata" / "run_metadata_2.pbtxt", "runmetadata"),
         (SRC / "profilerhook" / "events.out.tfevents.0.fixture", "events"),
         (SRC / "tfprof" / "profile_4", "tfprof"),
         (ROOT / "fixtures" / "tracejson" / "keras_fit" / "plugins" / "profile" / "run1"
          / "worker0.trace.json.gz", "tracejson")]


def mutate(raw: bytes, i: int, rng: random.Random) -> bytes:
    b = bytearray(raw)
    if i % 4 == 0:
        return bytes(b[: rng.randrange(len(b))])
    if i % 4 == 1:
        for _ in range(rng.randrange(1, 20)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if i % 4 == 2:
        pos = rng.randrange(len(b))
        b[pos:pos] = bytes(rng.randrange(256) for _ in range(50))
        return bytes(b)
    return raw.replace(b"1", b"x", 5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    bad = runs = 0
    with tempfile.TemporaryDirectory() as tmp:
        for f, kind in FILES:
            raw = f.read_bytes()
            for i in range(a.iterations):
                target = Path(tmp) / f"{kind}{f.suffix}-{i}" / f.name
                target.parent.mkdir()
                target.write_bytes(mutate(raw, i, rng))
                for args in (["summary", "--no-cache", str(target)],
                             ["ops", "--no-cache", "--source", kind, str(target)]):
                    result = CliRunner().invoke(cli_main, args)
                    runs += 1
                    if result.exit_code not in (0, 2) or "Traceback" in result.output:
                        bad += 1
                        print(kind, f.name, i, result.exit_code, result.output[-300:])
    print(f"{runs} runs, {bad} bad")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
