"""Fault generators and checks shared by tests/test_faults.py (CI: a few hundred seeded
cases) and tests/fuzz_faults.py (by hand: thousands). Each family damages a copy of a
real fixture the way a crash, a disk or a hostile user would, and `check_*` says whether
runlens kept its promises: one bad file never sinks the run (it is skipped with a
warning naming it, the other files give the same rows as before), a damaged cache means
"recompute" (same results, at most one warning), input errors are exit 2 in one line.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl

from runlens.analyzer import ingest
from runlens.analyzer.analysis.views import VIEWS, ViewOptions
from runlens.analyzer.load import load_run
from tests.wire_bytes import delimited

# The executions as read (no column derived from graphs, which a damaged but valid
# partition graph may legitimately change).
RAW_COLUMNS = ["step", "lane", "node_name", "timeline_label", "all_start_us",
               "op_start_rel_us", "op_end_rel_us", "all_end_rel_us", "mem_total_bytes",
               "output_bytes"]


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".runlens"))
    return dst


def raw_rows(run) -> pl.DataFrame:
    return run.nodes.select(RAW_COLUMNS).sort(RAW_COLUMNS)


# ----------------------------------------------------------------------------- step files


def graph_spans(raw: bytes) -> list[tuple[int, int]]:
    """Byte ranges (start, length) of a step file's distinct partition graphs."""
    from runlens.analyzer import _stepstats  # type: ignore[attr-defined]

    return [(a, b - a) for a, b in _stepstats.split_run_metadata(raw)[1]]


def damage_step(raw: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One damage of a step file's bytes: flips (half of them inside a partition graph,
    where a bad byte used to refuse the whole run), a truncation, or inserted garbage."""
    b = bytearray(raw)
    kind = rng.choice(["flip", "flip-graph", "flip-graph", "truncate", "insert", "zero"])
    if kind == "flip-graph":
        spans = [(a, n) for a, n in graph_spans(raw) if n]
        if spans:
            a, n = rng.choice(spans)
            for _ in range(rng.randint(1, 3)):
                b[a + rng.randrange(n)] ^= 1 << rng.randrange(8)
            return kind, bytes(b)
        kind = "flip"
    if kind == "flip":
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    elif kind == "truncate":
        del b[rng.randrange(len(b)):]
    elif kind == "insert":
        i = rng.randrange(len(b))
        b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    else:  # a block of zeros, as a crash can leave
        i = rng.randrange(len(b))
        n = rng.randint(1, 4096)
        b[i:i + n] = bytes(min(n, len(b) - i))
    return kind, bytes(b)


def check_step_fault(run_dir: Path, victim: Path, victim_step: int,
                     clean: pl.DataFrame) -> str:
    """Load the damaged run; the victim is read or skipped with a warning naming it, and
    every other step gives exactly its clean rows. Returns "read" or "skipped"."""
    run = load_run(run_dir, use_cache=False)
    rows = raw_rows(run)
    others = rows.filter(pl.col("step") != victim_step)
    assert others.equals(clean.filter(pl.col("step") != victim_step)), "other steps changed"
    if victim_step in set(rows.get_column("step").unique().to_list()):
        return "read"
    named = [w for w in run.warnings if str(victim) in w]
    assert len(named) == 1, f"no single warning names {victim}: {run.warnings}"
    assert "\n" not in named[0]
    return "skipped"


# ----------------------------------------------------------------------------- cache


def cache_files(run_dir: Path) -> list[Path]:
    from runlens.analyzer import cache

    loc = run_dir / ".runlens" / f"cache-v{cache.CACHE_VERSION}"
    data = json.loads((loc / cache.KEY_FILE).read_text())["data"]
    # and the products derived from them (analyzer/productcache.py), once computed
    return [loc / cache.KEY_FILE, *sorted((loc / data).glob("*.parquet")),
            *sorted((loc / data / "products").glob("*.product"))]


def damage_cache_file(path: Path, rng: random.Random) -> str:
    """One damage of a cache file: truncated, emptied, garbage, a bit flip, deleted, or
    (key.json) deep nesting and wrong types."""
    data = path.read_bytes()
    kinds = ["truncate", "empty", "garbage", "flip", "flip", "delete"]
    if path.name == "key.json":
        kinds += ["deep", "types"]
    kind = rng.choice(kinds)
    if kind == "truncate":
        path.write_bytes(data[:rng.randrange(max(1, len(data)))])
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "garbage":
        path.write_bytes(rng.randbytes(rng.randint(1, 4096)))
    elif kind == "flip":
        b = bytearray(data)
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(b))
    elif kind == "delete":
        path.unlink()
    elif kind == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    else:
        meta = json.loads(data)
        meta[rng.choice(["data", "frames", "warnings", "key"])] = rng.choice([5, True, None, "x"])
        path.write_text(json.dumps(meta))
    return kind


def view_rows(run) -> dict[str, pl.DataFrame]:
    """Every view with default options, and the executions (read lazily)."""
    out = {kind: fn(run, ViewOptions()).rows for kind, fn in VIEWS.items()}
    out["executions"] = run.executions
    return out


def same_views(a: dict[str, pl.DataFrame], b: dict[str, pl.DataFrame]) -> bool:
    return a.keys() == b.keys() and all(a[k].equals(b[k]) for k in a)


# ----------------------------------------------------------------------------- big files


def write_crafted(path: Path, kind: str, size: int) -> None:
    """A step file of `size` bytes that holds no real content: zeros, empty partition
    graphs, empty step_stats, or a StepStats of empty node stats."""
    if kind == "zeros":
        with open(path, "wb") as f:
            f.truncate(size)
        return
    if kind == "empty-graphs":
        path.write_bytes(b"\x1a\x00" * (size // 2))
        return
    if kind == "empty-step-stats":
        path.write_bytes(b"\x0a\x00" * (size // 2))
        return
    # one StepStats with one device of `size` bytes of empty NodeExecStats
    nodes = b"\x12\x00" * ((size - 16) // 2)
    dev = b"\x0a\x03cpu" + nodes
    path.write_bytes(delimited(1, delimited(1, dev)))  # StepStats.dev_stats in RunMetadata


def ingest_one(path: str) -> dict:
    """Ingest one step file; what happened (for a subprocess that measures itself)."""
    import resource
    import time

    t = time.perf_counter()
    batch = ingest.ingest_step_files([(path, 1, None)])
    seconds = time.perf_counter() - t
    # Peak RSS of this process image: VmHWM (Linux's ru_maxrss keeps the peak of the
    # process before exec, i.e. of the pytest process that forked this one).
    try:
        status = Path("/proc/self/status").read_text()
        peak = int(next(line.split()[1] for line in status.splitlines()
                        if line.startswith("VmHWM:"))) / 1024
    except (OSError, StopIteration):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "errors": batch.errors,
            "rows": 0 if batch.frames is None else batch.frames.nodes.height,
            "maxrss_mib": peak}


if __name__ == "__main__":  # python tests/faults.py FILE: ingest_one as JSON
    import sys

    print(json.dumps(ingest_one(sys.argv[1])))
    os._exit(0)


# Run as the other user: the CLI in-process over each command, [exit code, output] as JSON.
_AS_NOBODY = """
import json, site, sys
for folder in json.loads(sys.argv[1]):
    site.addsitedir(folder)
from click.testing import CliRunner
from runlens.cli import main
results = [CliRunner().invoke(main, args) for args in json.loads(sys.argv[2])]
print(json.dumps([[r.exit_code, r.output] for r in results]))
"""


def _interpreter_for(user: str) -> str:
    """A Python of this one's version that `user` may run: this one where its files are
    readable by others, else the system's (this one may live in root's home)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, getattr(sys, "_base_executable", ""),
                      f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        try:
            if candidate and subprocess.run([candidate, "-c", "import json, site"], user=user,
                                            capture_output=True, cwd="/").returncode == 0:
                return candidate
        except OSError:  # not executable by `user`
            continue
    raise AssertionError(f"no {version} that {user} may run (the dev setup has /usr/bin's)")


def cli_as_nobody(commands: list[list[str]], cache_home: Path) -> list[list]:
    """[exit code, output] of each `analyze` command run as the user `nobody` (as root a
    permission cannot bite), in a subprocess started as nobody (not a fork of this process,
    whose JAX and polars threads a fork would leave in an unknown state). It sees this
    environment's packages through their site folders (readable by others)."""
    import pwd

    nobody = pwd.getpwnam("nobody")
    folders = [p for p in sys.path if p.endswith("-packages") and Path(p).is_dir()]
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home), "HOME": str(cache_home)}
    env.pop("RUNLENS_CACHE_DIR", None)  # root's temp folder: nobody may not write there
    env.pop("PYTHONPATH", None)
    done = subprocess.run([_interpreter_for("nobody"), "-c", _AS_NOBODY, json.dumps(folders),
                           json.dumps(commands)], user=nobody.pw_uid, group=nobody.pw_gid,
                          extra_groups=[], env=env, capture_output=True, text=True, cwd="/")
    assert done.returncode == 0, f"the subprocess as nobody failed: {done.stderr[-2000:]}"
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(results) == len(commands), "the child failed"
    return results
