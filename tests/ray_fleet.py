"""Run by tests/test_engines.py under `unshare -n` (a network namespace with loopback
only): starts one local Ray (its temp dir given, short), then for each fleet folder gives
`analyze summary` and `analyze ops` (--format json --engine ray) and the engine's own
results (which Ray task read which host), as one JSON line on stdout. Never meant to be
run outside a namespace: it refuses when an interface other than loopback is up."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def _loopback_only() -> bool:
    """/proc/net/dev lists this namespace's interfaces (/sys/class/net is the mount's)."""
    lines = Path("/proc/net/dev").read_text().splitlines()[2:]
    return [line.split(":")[0].strip() for line in lines] == ["lo"]


def main() -> None:
    temp, *fleets = sys.argv[1:]
    if not _loopback_only():
        sys.exit("ray_fleet.py: not in a loopback-only network namespace")
    import ray
    from click.testing import CliRunner

    from runlens.analyzer import engines, registries, sources
    from runlens.cli import main as cli

    ray.init(_temp_dir=temp, _node_ip_address="127.0.0.1", include_dashboard=False,
             num_cpus=2, log_to_driver=False, logging_level="error")
    out = {}
    for fleet in fleets:
        result = CliRunner().invoke(cli, ["summary", fleet, "--format", "json",
                                          "--engine", "ray"])
        reader = sources.detect(fleet)
        parts = reader.parts(Path(fleet), sources.Selection())
        tasks = [engines.HostTask(reader.kind, p, os.environ.get("RUNLENS_CACHE_DIR"))
                 for p in parts]
        results = engines.run_tasks("ray", tasks)
        ops = CliRunner().invoke(cli, ["ops", fleet, "--format", "json", "--engine", "ray"])
        out[fleet] = {"exit": result.exit_code, "stdout": result.stdout,
                      "ops_exit": ops.exit_code, "ops": ops.stdout,
                      "stderr": result.stderr,
                      "ran_by": [r.ran_by for r in results],
                      "errors": [r.error for r in results],
                      "engines": list(registries.ENGINES)}
    ray.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
