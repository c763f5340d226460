"""Run the C ProfileProto reader (analyzer/_tfprof.c) under AddressSanitizer + UBSan on
mutated profiles (not part of pytest: slow).

Seeds: the committed tfprof profile (fixtures/sources/tfprof/profile_4). Each iteration
truncates it, flips, inserts or overwrites bytes (tests/test_native_decoder._mutations)
and calls `runs()`, which must return its columns or raise ValueError (the source turns
that into one line naming the file), nothing else. Any memory error or undefined
behaviour aborts with the sanitizer's report.

    python tests/fuzz_tfprof_reader.py [--iterations 20000] [--seed 7]
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests import sanitized  # noqa: E402

SEED = ROOT / "fixtures" / "sources" / "tfprof" / "profile_4"


def fuzz(so: Path, iterations: int, seed: int) -> None:
    from tests.test_native_decoder import _mutations

    module = sanitized.load("_tfprof", so)
    data = SEED.read_bytes()
    module.runs(data)  # the seed itself reads
    rng = random.Random(seed)
    read = refused = 0
    for _ in range(iterations):
        start = rng.randrange(len(data) - 4096) if len(data) > 8192 and rng.random() < 0.5 \
            else 0
        window = data[start:] if start else data
        for mutated in _mutations(window, rng, 1):
            try:
                module.runs(mutated)
                read += 1
            except ValueError:
                refused += 1
    print(f"{iterations} mutated profiles: {read} read, {refused} refused with ValueError; "
          "no sanitizer report")


def main() -> int:
    return sanitized.fuzz_main("_tfprof", __file__, __doc__, fuzz, iterations=20_000)


if __name__ == "__main__":
    sys.exit(main())
