"""The fault campaign of issue 17 at length (by hand; tests/test_faults.py runs a few
hundred of the same cases in CI). Results: docs/robustness.md.

    python tests/fuzz_faults.py [--step-cases 1000] [--cache-cases 200] [--big-mb 200]
                                [--readers 8] [--seed 1]

Families (generators and checks in tests/faults.py):
- step: damaged step files (byte flips, half inside partition graphs; truncations; zeros;
  inserted garbage) of every fixture, with and without the manifest's sizes; each is
  read or skipped with one warning naming it, every other step keeps its rows;
- cache: damaged cache files (truncated, emptied, garbage, bit flips, deleted; key.json
  deeply nested or wrong-typed); views equal a fresh ingest, at most one warning, the
  next load reads a healed cache;
- big: crafted files of zeros and of empty repeated fields (partition graphs,
  step_stats, node stats), each ingested in a subprocess: seconds and peak RSS;
- concurrency: reader processes holding lazily read caches while writers replace them.
Any broken promise stops the campaign with the case that broke it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runlens.analyzer import cache  # noqa: E402
from runlens.analyzer.load import load_run  # noqa: E402
from runlens.analyzer.rundir import find_runs  # noqa: E402
from tests import faults  # noqa: E402
from tests.conftest import FIXTURE_NAMES, FIXTURES  # noqa: E402
from tests.test_faults import _READER, _WRITER  # noqa: E402


def step_campaign(tmp: Path, cases: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    outcomes: dict[str, int] = {}
    runs = {}
    for name in FIXTURE_NAMES:
        for manifest in (True, False):
            run_dir = faults.copy_run(FIXTURES / name, tmp / f"{name}-{manifest}")
            if not manifest and (run_dir / "manifest.json").exists():
                (run_dir / "manifest.json").unlink()
            steps = find_runs(run_dir)[0].steps
            if len(steps) > 1:
                runs[run_dir] = (steps, faults.raw_rows(load_run(run_dir, use_cache=False)))
    for _ in range(cases):
        run_dir = rng.choice(sorted(runs))
        steps, clean = runs[run_dir]
        step, path = rng.choice(sorted(steps.items()))
        original = Path(path).read_bytes()
        kind, damaged = faults.damage_step(original, rng)
        Path(path).write_bytes(damaged)
        try:
            outcome = faults.check_step_fault(run_dir, Path(path), step, clean)
        except BaseException:
            print(f"BROKEN: {run_dir.name} {path} {kind}", file=sys.stderr)
            raise
        finally:
            Path(path).write_bytes(original)
        outcomes[f"{kind}:{outcome}"] = outcomes.get(f"{kind}:{outcome}", 0) + 1
    return outcomes


def cache_campaign(tmp: Path, cases: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    kinds: dict[str, int] = {}
    run_dirs = [faults.copy_run(FIXTURES / n, tmp / f"cache-{n}") for n in ("mlp", "cnn")]
    fresh = {d: faults.view_rows(load_run(d, use_cache=False)) for d in run_dirs}
    for d in run_dirs:
        load_run(d)
        cache.wait()
    for _ in range(cases):
        run_dir = rng.choice(run_dirs)
        victim = rng.choice(faults.cache_files(run_dir))
        kind = faults.damage_cache_file(victim, rng)
        label = f"{victim.name}:{kind}"
        try:
            run = load_run(run_dir)
            assert faults.same_views(faults.view_rows(run), fresh[run_dir]), "other results"
            assert len([w for w in run.warnings if "cache" in w]) <= 1, run.warnings
            cache.wait()
            healed = load_run(run_dir)
            assert not [w for w in healed.warnings if "cache" in w], healed.warnings
            assert callable(healed._frames["executions"]), "not read from the cache"
        except BaseException:
            print(f"BROKEN: {run_dir.name} {label}", file=sys.stderr)
            raise
        kinds[label] = kinds.get(label, 0) + 1
    return kinds


def big_campaign(tmp: Path, mb: int) -> list[dict]:
    out = []
    for kind in ("zeros", "empty-graphs", "empty-step-stats", "empty-node-stats"):
        path = tmp / f"step-{kind}.pb"
        faults.write_crafted(path, kind, mb * 1024 * 1024)
        proc = subprocess.run([sys.executable, str(ROOT / "tests" / "faults.py"), str(path)],
                              capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        result = json.loads(proc.stdout)
        assert result["rows"] == 0 and len(result["errors"]) == 1, result
        out.append({"kind": kind, "mb": mb, "seconds": round(result["seconds"], 2),
                    "peak_rss_mib": round(result["maxrss_mib"]),
                    "message": result["errors"][0].split(": ", 1)[1]})
        path.unlink()
    return out


def concurrency_campaign(tmp: Path, readers: int) -> dict[str, int]:
    run_dir = faults.copy_run(FIXTURES / "mlp", tmp / "concurrent")
    load_run(run_dir)
    cache.wait()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writers = max(1, readers // 3)
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(run_dir), "10"], env=env,
                              stderr=subprocess.PIPE, text=True) for _ in range(writers)]
    procs += [subprocess.Popen([sys.executable, "-c", _READER, str(run_dir), "20"], env=env,
                               stderr=subprocess.PIPE, text=True) for _ in range(readers)]
    failed = 0
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0 or "warning" in err:
            failed += 1
            print(f"BROKEN: a process exited {p.returncode}: {err[-2000:]}", file=sys.stderr)
    assert not failed
    return {"writer processes": writers, "reader processes": readers,
            "loads read": readers * 20, "caches written": writers * 10}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step-cases", type=int, default=1000)
    ap.add_argument("--cache-cases", type=int, default=200)
    ap.add_argument("--big-mb", type=int, default=200)
    ap.add_argument("--readers", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    os.environ.setdefault("XDG_CACHE_HOME", tempfile.mkdtemp(prefix="runlens-fuzz-cache-"))
    with tempfile.TemporaryDirectory(prefix="runlens-fuzz-") as tmp_s:
        tmp = Path(tmp_s)
        for name, run in (
            ("step", lambda: step_campaign(tmp, args.step_cases, args.seed)),
            ("cache", lambda: cache_campaign(tmp, args.cache_cases, args.seed)),
            ("big", lambda: big_campaign(tmp, args.big_mb)),
            ("concurrency", lambda: concurrency_campaign(tmp, args.readers)),
        ):
            t = time.perf_counter()
            result = run()
            print(json.dumps({"family": name, "seconds": round(time.perf_counter() - t, 1),
                              "result": result}, indent=1), flush=True)
    print("no promise broken")
    return 0


if __name__ == "__main__":
    sys.exit(main())
