"""Run the C XSpace decoder under AddressSanitizer + UBSan (not part of pytest: slow).

Builds analyzer/_xplane.c with -fsanitize=address,undefined into a temp dir and puts it in
place of the compiled module, then
1. runs tests/test_xplane.py through it (real profiles: every fixture, the public GPU one);
2. feeds it mutated inputs: lines and planes of the captured fixtures truncated, with bits
   flipped or bytes spliced, decoded with random wanted stats and kept-event bitmaps
   (`decode_line`, `decode_lines`, `split_plane`), and some whole mutated files through `read_file`
   (which must give frames or a one-line InputFileError, nothing else).
Any memory error or undefined behaviour aborts with the sanitizer's report.

    python tests/fuzz_xplane_decoder.py [--iterations 30000] [--seed 7] [--no-tests]

Needs gcc and the Python headers. Model: tests/fuzz_native_decoder.py (StepStats).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests import sanitized  # noqa: E402


def _install(so: Path) -> None:
    """The sanitized module as analyzer._xplane, before the sources import it."""
    module = sanitized.load("_xplane", so)
    sys.path.insert(0, str(ROOT))
    from runlens import analyzer

    sys.modules["runlens.analyzer._xplane"] = module
    analyzer._xplane = module  # type: ignore[attr-defined]
    from runlens.analyzer.sources import xplane_wire

    assert xplane_wire._xplane is module


def _mutate(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        what = rng.random()
        if what < 0.3 and out:
            del out[rng.randrange(len(out)):]  # truncated
        elif what < 0.8 and out:
            i = rng.randrange(len(out))
            out[i] ^= 1 << rng.randrange(8)  # a bit flipped
        elif out:
            i, j = sorted(rng.randrange(len(out)) for _ in range(2))
            out[i:i] = out[j: j + rng.randint(1, 40)]  # bytes spliced in
    return bytes(out)


def fuzz(iterations: int, seed: int) -> None:
    import numpy as np

    from runlens.analyzer.errors import InputFileError
    from runlens.analyzer.sources import xplane, xplane_wire
    from tests.xplane_run import CAPTURED, fixture_file

    native = xplane_wire._xplane
    files = [fixture_file(n).read_bytes() for n in CAPTURED]
    lines: list[tuple[bytes, tuple[int, ...]]] = []
    planes: list[bytes] = []
    for n in CAPTURED:
        for plane in xplane_wire.read_planes(fixture_file(n)):
            wanted = tuple(sorted(plane.stat_names))[:16]
            for offset, length in plane._lines:
                lines.append((bytes(plane._buf[offset: offset + length]), wanted))
    for data in files:
        planes += [data[s: s + n] for s, n in native.split_plane(data, 1, 100)[0]]
    rng = random.Random(seed)
    accepted = whole = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.xplane.pb"
        for it in range(iterations):
            raw, wanted = rng.choice(lines)
            if len(raw) > 20_000:  # a window keeps iterations fast
                start = rng.randrange(len(raw) - 20_000)
                raw = raw[start: start + 20_000]
            ids = tuple(rng.sample(wanted, rng.randint(0, min(len(wanted), 8))))
            keep = None if rng.random() < 0.5 else bytes(
                rng.randint(0, 1) for _ in range(rng.randint(0, 300)))
            try:
                native.decode_line(_mutate(raw, rng), ids, keep)
                accepted += 1
            except ValueError:
                pass
            try:
                native.split_plane(_mutate(rng.choice(planes), rng))
            except ValueError:
                pass
            try:  # an XSpace, its strings checked as UTF-8
                native.split_plane(_mutate(rng.choice(files), rng), 1, 100, 0b11100)
            except ValueError:
                pass
            # A batch of lines, with spans that may point anywhere in (or past) the buffer.
            buf = _mutate(rng.choice(files), rng)
            spans = np.array([(rng.randint(-5, len(buf) + 5), rng.randint(-5, 5000))
                              for _ in range(rng.randint(0, 6))], np.int64)
            try:
                native.decode_lines(buf, spans.tobytes(), ids, keep)
            except ValueError:
                pass
            n = rng.randint(0, 50)
            start = [rng.randint(-10, 10**6) for _ in range(n)]
            dur = [rng.randint(0, 10**5) for _ in range(n)]
            group = np.sort(np.array([rng.randint(0, 3) for _ in range(n)], np.int64))
            native.self_times(np.sort(np.array(start, np.int64)), np.array(dur, np.int64))
            native.self_times(np.array(start, np.int64), np.array(dur, np.int64), group)
            if it % 100 == 0:  # a whole mutated file: frames or one InputFileError
                path.write_bytes(_mutate(rng.choice(files), rng))
                try:
                    xplane.read_file(path, "w")
                except InputFileError:
                    pass
                whole += 1
    print(f"{iterations} mutated lines ({accepted} accepted), as many planes, "
          f"{whole} whole files: no sanitizer report")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=30_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--no-tests", action="store_true", help="only the fuzzing")
    ap.add_argument("--_so", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._so:  # the child, with the sanitizer runtimes preloaded
        _install(args._so)
        if not args.no_tests:
            import pytest

            code = pytest.main(["-q", "-x", "-p", "no:cacheprovider",
                                str(ROOT / "tests" / "test_xplane.py")])
            if code:
                return int(code)
        fuzz(args.iterations, args.seed)
        return 0
    return sanitized.rerun_sanitized("_xplane", __file__, [
        "--iterations", str(args.iterations), "--seed", str(args.seed),
        *(["--no-tests"] if args.no_tests else [])])

if __name__ == "__main__":
    sys.exit(main())
