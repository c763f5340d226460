"""Fuzz the C StepStats decoder under AddressSanitizer + UBSan (not part of pytest: slow).

Builds analyzer/_stepstats.c with -fsanitize=address,undefined into a temp dir, then feeds
it mutated StepStats from the committed fixtures (the mutations of
tests/test_native_decoder.py), and every fourth iteration a mutated whole step file to its
RunMetadata splitter. Any memory error or undefined behaviour aborts with the
sanitizer's report; a clean run prints how many inputs it decoded.

    python tests/fuzz_native_decoder.py [--iterations 150000] [--seed 7]

Needs gcc and the Python headers. tests/test_native_decoder.py checks, on fewer inputs,
that whatever the decoder accepts equals protobuf's parse.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests import sanitized  # noqa: E402

SEED_FIXTURES = ("plain_session", "cnn", "gpu_mnist", "rnn_while", "gpu_kittibox",
                 "memory_growth")


def fuzz(so: Path, iterations: int, seed: int) -> None:
    sys.path.insert(0, str(ROOT))
    from runlens.analyzer import ingest
    from runlens.analyzer.rundir import find_runs
    from tests.test_native_decoder import _mutations

    module = sanitized.load("_stepstats", so)
    seeds, files = [], []
    for name in SEED_FIXTURES:
        run = find_runs(ROOT / "fixtures" / "runs" / name)[0]
        raw = Path(next(iter(run.steps.values()))).read_bytes()
        seeds.append(bytes(ingest.split_run_metadata(raw)[0]))
        files.append(raw)
    rng = random.Random(seed)
    accepted = split = 0
    for i in range(iterations):
        data = rng.choice(seeds)
        if len(data) > 20_000:  # a window of the big steps keeps iterations fast
            start = rng.randrange(len(data) - 20_000)
            data = data[start:start + 20_000]
        for mutated in _mutations(data, rng, 1):
            decoder = module.Decoder()
            if decoder.add(mutated, 3):
                accepted += 1
                decoder.finish()
        if i % 4 == 0:  # the RunMetadata splitter, on whole step files
            for mutated in _mutations(rng.choice(files), rng, 1):
                try:
                    module.split_run_metadata(mutated)
                    split += 1
                except ValueError:
                    pass
    print(f"{iterations} mutated StepStats, {accepted} accepted; "
          f"{(iterations + 3) // 4} mutated RunMetadata, {split} split; no sanitizer report")


def main() -> int:
    return sanitized.fuzz_main("_stepstats", __file__, __doc__, fuzz, iterations=150_000)


if __name__ == "__main__":
    sys.exit(main())
