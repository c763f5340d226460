"""Fuzz every source at length (not part of pytest: slow): tests/test_faults_readers.py
runs the same families, seeded and short, in CI.

Families (generators: tests/faults_readers.py):
- mutated copies of a fixture of each reader (byte and bit flips, truncations, inserted
  bytes and wire specials, deletions), read by `analyze summary` (detected) and
  `analyze ops --source KIND`: exit 0 or 2 (one line naming the file), never 3, never a
  traceback;
- crafted JSON values (tests/faults_readers.JSON_CRAFTS) in a random event of a
  timeline and of a trace.json.gz, the same check;
- mutated .xplane.pb files read by the C decoder and by the protobuf walk: both refuse
  or both read the same frames;
- malformed HLO metadata of a GPU profile (tests/hlo_modules.fuzzed: shapes with
  negative or huge dimensions, missing or wrong entry computations, computations calling
  each other in cycles, dangling ids, odd windows, tuples nested deep, bad gemm configs,
  schedules and stack frames, a quarter also mutated as bytes): `analyze ops`, exit 0
  (those facts unknown) or 2, never 3.

    python tests/fuzz_sources.py [--iterations 100] [--xplane 1500] [--hlo 1000]
                                 [--seed 1] [--budget 600]

`--budget` (seconds) is shared by the families in proportion to their counts; a family
out of time stops and says how many it ran. Prints one line per family and exits 1 if
any promise broke.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import faults_readers as fr  # noqa: E402

SRC = ROOT / "fixtures" / "sources"
FILES = [(fr.TIMELINE, "timeline"), (fr.RUN_METADATA, "runmetadata"),
         (SRC / "runmetadata" / "run_metadata_2.pbtxt", "runmetadata"),
         (fr.EVENTS, "events"), (SRC / "tfprof" / "profile_4", "tfprof"),
         (fr.TRACE, "tracejson"), (fr.XPLANES[0], "xplane")]


def _outcome(args: list[str], path: Path) -> str:
    code, output = fr.cli_outcome(args)
    if "Traceback" in output or code not in (0, 2):
        return f"exit {code}"
    if code == 2 and (len(output.strip().splitlines()) != 1 or path.name not in output):
        return "exit 2, not one line naming the file"
    return f"exit {code}"


def mutated(tmp: Path, iterations: int, rng: random.Random, deadline: float) -> bool:
    ok = True
    for f, kind in FILES:
        raw = f.read_bytes()
        seen: Counter[str] = Counter()
        for i in range(iterations):
            if time.monotonic() > deadline:
                break
            _, data = fr.mutate_file(raw, f.name, rng)
            target = tmp / f"{kind}-{f.suffix}-{i}" / f.name
            target.parent.mkdir()
            target.write_bytes(data)
            for args in (["summary", "--no-cache", str(target)],
                         ["ops", "--no-cache", "--source", kind, str(target)]):
                seen[_outcome(args, target)] += 1
        ok &= _report(f"mutated {f.name} ({kind})", seen)
    return ok


def crafted(tmp: Path, iterations: int, rng: random.Random, deadline: float) -> bool:
    ok = True
    for source, gz, name in ((fr.TIMELINE, False, "timeline-3.json"),
                             (fr.TRACE, True, "host.trace.json.gz")):
        seen: Counter[str] = Counter()
        for i in range(iterations):
            if time.monotonic() > deadline:
                break
            case = rng.choice(sorted(fr.JSON_CRAFTS))
            doc = fr.json_doc(source.read_bytes(), gz)
            fr.JSON_CRAFTS[case](doc, rng)
            target = tmp / f"crafted-{gz}-{i}" / name
            target.parent.mkdir()
            target.write_bytes(fr.json_bytes(doc, gz))
            seen[_outcome(["summary", "--no-cache", str(target)], target)] += 1
        ok &= _report(f"crafted JSON values in {name}", seen)
    return ok


def xplane(tmp: Path, iterations: int, rng: random.Random, deadline: float) -> bool:
    files = [p.read_bytes() for p in fr.XPLANES]
    seen: Counter[str] = Counter()
    for i in range(iterations):
        if time.monotonic() > deadline:
            break
        kind, data = fr.mutate(files[i % len(files)], rng)
        path = tmp / f"x{i}.xplane.pb"
        path.write_bytes(data)
        try:
            seen[f"both {fr.xplane_agree(path)}"] += 1
        except AssertionError as e:
            seen["exit disagree"] += 1
            print(f"  disagree ({kind}): {str(e)[:200]}")
        except Exception as e:  # noqa: BLE001 - an internal error: exit 3 in the CLI
            seen["exit 3"] += 1
            print(f"  internal error ({kind}): {type(e).__name__}: {str(e)[:200]}")
        path.unlink()
    return _report("mutated .xplane.pb, C decoder vs protobuf walk", seen)


def hlo(tmp: Path, iterations: int, rng: random.Random, deadline: float) -> bool:
    from tests.hlo_modules import fuzzed

    seen: Counter[str] = Counter()
    for i in range(iterations):
        if time.monotonic() > deadline:
            break
        kinds, data = fuzzed(rng)
        path = tmp / f"h{i}.xplane.pb"
        path.write_bytes(data)
        outcome = _outcome(["ops", "--no-cache", str(path)], path)
        seen[outcome] += 1
        if outcome not in ("exit 0", "exit 2"):
            said = fr.cli_outcome(["ops", "--no-cache", str(path)])[1]
            print(f"  {outcome} ({kinds}): {said[-300:]}")
        path.unlink()
    return _report("malformed HLO metadata in a GPU profile", seen)


def _report(what: str, seen: Counter[str]) -> bool:
    bad = sum(n for k, n in seen.items() if k not in ("exit 0", "exit 2", "both read",
                                                      "both refused"))
    print(f"{what}: {sum(seen.values())} runs, " +
          ", ".join(f"{k}: {n}" for k, n in sorted(seen.items())) +
          (f"  <-- {bad} broke a promise" if bad else ""))
    return not bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=100, help="per fixture file")
    ap.add_argument("--xplane", type=int, default=1500, help="mutated xplane files")
    ap.add_argument("--hlo", type=int, default=1000, help="malformed HLO modules")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--budget", type=float, default=600.0, help="seconds, in all")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    start = time.monotonic()
    weights = [len(FILES) * a.iterations * 2, 2 * a.iterations, a.xplane, a.hlo]
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for family, count, weight in ((mutated, a.iterations, weights[0]),
                                      (crafted, a.iterations, weights[1]),
                                      (xplane, a.xplane, weights[2]),
                                      (hlo, a.hlo, weights[3])):
            share = a.budget * weight / sum(weights)
            t = time.monotonic()
            ok &= family(Path(tmp), count, rng, t + share)
            print(f"  ({time.monotonic() - t:.1f} s)")
    print(f"{time.monotonic() - start:.1f} s in all")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
