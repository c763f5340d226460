"""A fleet's profile run: N copies of a real multi-device profile, each under its own
host name, read by `analyze summary|ops|scopes --engine E` (docs/fleet.md).

    python benchmarks/fleet.py                      # N = 8, 32, 128; engines local, ray
    python benchmarks/fleet.py --hosts 8,32 --engines sequential,local
    python benchmarks/fleet.py --hosts 8,32 --commands summary,ops,scopes

Engines: local and ray (`--engine`), and sequential: the same command with --no-cache,
which reads the hosts one after another in the driver, as before engines (8 and 32 hosts
only: its driver holds every host's events).

The host file is ../shared/data/xplane's TF2 BERT profile (3.0 MB: /host:CPU and 8 GPU
planes, kernels on two of them). Each command runs cold (a fresh --cache-dir) in a process
of its own; measured: its wall time, the driver's peak RSS (getrusage of the driver
process itself, not its pool's processes nor Ray's) and the largest worker's peak RSS
(local engine: the pool's processes, its children).

Ray's part never leaves loopback: the script runs itself again inside `unshare -n` (a
network namespace with loopback only; needs root or user namespaces) and starts one local
Ray there (its temp dir a short folder under /tmp, removed after), which the commands
join through RAY_ADDRESS, as on a cluster. The files and caches are under a temporary
folder, removed after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOST_FILE = (REPO.parent / "shared" / "data" / "xplane"
             / "tensorflow__profiler__GPU-multi-worker__34.83.195.179_6003.xplane.pb")
IN_NETNS = "RUNLENS_FLEET_NETNS"

# The driver, in a process of its own: `analyze ARGS`, then its own and its children's
# peak RSS (KiB, Linux) as one JSON line on fd 3's file.
DRIVER = """
import json, os, resource, sys
from runlens.cli import main
sys.argv = ["analyze", *sys.argv[2:]]  # after -c's "-"
try:
    main()
except SystemExit as e:
    code = e.code or 0
else:
    code = 0
with open(os.environ["FLEET_OUT"], "w") as f:
    json.dump({"exit": code,
               "driver_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
               "workers_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}, f)
"""


def make_fleet(base: Path, hosts: int) -> Path:
    run = base / f"fleet{hosts}" / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    for i in range(hosts):
        shutil.copyfile(HOST_FILE, run / f"host{i:04d}.xplane.pb")
    return base / f"fleet{hosts}"


def one(fleet: Path, engine: str, work: Path, env: dict[str, str], command: str,
        hosts: int) -> dict:
    cache = Path(tempfile.mkdtemp(dir=work, prefix="cache"))
    out = work / "driver.json"
    args = [command, str(fleet), "--format", "json", "--cache-dir", str(cache)]
    args += ["--min-micros", "0"] if command == "scopes" else []
    args += ["--engine", engine] if engine != "sequential" else ["--no-cache"]
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", DRIVER, "-", *args], capture_output=True,
                          text=True, env={**env, "FLEET_OUT": str(out)})
    wall = time.perf_counter() - start
    shutil.rmtree(cache, ignore_errors=True)
    measured = json.loads(out.read_text())
    if measured["exit"] != 0:
        raise SystemExit(f"{engine} on {fleet}: exit {measured['exit']}: {done.stderr[-500:]}")
    if command == "summary":
        assert len(json.loads(done.stdout)["summary"]["workers"]) == hosts
    return {"command": command, "engine": engine, "hosts": hosts, "wall_s": round(wall, 2),
            "driver_mb": round(measured["driver_kib"] / 1024),
            "largest_child_mb": round(measured["workers_kib"] / 1024),
            "load": os.getloadavg()[0]}


def start_ray(temp: str) -> str:
    import ray

    context = ray.init(_temp_dir=temp, _node_ip_address="127.0.0.1", include_dashboard=False,
                       log_to_driver=False, logging_level="error")
    return str(context.address_info["gcs_address"])


def per_host_cost(work: Path) -> float:
    """One host's task alone (read with one thread, cache written, pieces made): its own
    seconds, best of 3, each cold (a fresh cache folder): the cost docs/fleet.md scales."""
    from runlens.analyzer import engines, sources

    fleet = make_fleet(work / "one", 1)
    reader = sources.detect(fleet)
    part = reader.parts(fleet, sources.Selection())[0]
    best = []
    for _ in range(3):
        cache = tempfile.mkdtemp(dir=work, prefix="cache")
        task = engines.HostTask(reader.kind, part, cache, ("summary",))
        best.append(engines.run_tasks("local", [task])[0].seconds)
    shutil.rmtree(work / "one")
    return min(best)


def bench(hosts: list[int], engines: list[str], commands: list[str]) -> list[dict]:
    rows = []
    work = Path(tempfile.mkdtemp(prefix="/tmp/rlfleet"))
    ray_temp = tempfile.mkdtemp(prefix="/tmp/rl") if "ray" in engines else None
    # Ray keeps its token in ~/.ray: a home of its own, under the work folder
    os.environ["HOME"] = str(work)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    try:
        cost = per_host_cost(work)
        print(f"# one host's task ({HOST_FILE.stat().st_size / 1e6:.1f} MB): {cost:.2f} s",
              flush=True)
        if ray_temp:
            env["RAY_ADDRESS"] = start_ray(ray_temp)
            env.update((k, v) for k, v in os.environ.items() if k.startswith("RAY_"))
        for n in hosts:
            fleet = make_fleet(work, n)
            for command in commands:
                for engine in engines:
                    if engine == "sequential" and n > 32:  # the driver holds every host
                        continue
                    rows.append(one(fleet, engine, work, env, command, n))
                    print(json.dumps(rows[-1]), flush=True)
            shutil.rmtree(fleet)
    finally:
        if ray_temp:
            import ray

            ray.shutdown()
            shutil.rmtree(ray_temp, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="8,32,128")
    parser.add_argument("--engines", default="local,ray")
    parser.add_argument("--commands", default="summary",
                        help="analyze commands to time, comma-separated (summary, ops, "
                             "scopes: the ones made of per-host pieces)")
    args = parser.parse_args()
    engines = args.engines.split(",")
    if "ray" in engines and not os.environ.get(IN_NETNS):  # again, loopback only
        shell = 'ip link set lo up && exec "$0" "$@"'
        sys.exit(subprocess.run(["unshare", "-n", "sh", "-c", shell, sys.executable,
                                 *sys.argv], env={**os.environ, IN_NETNS: "1"}).returncode)
    print(f"# {os.cpu_count()} cores, load average {os.getloadavg()}", flush=True)
    commands = args.commands.split(",")
    rows = bench([int(n) for n in args.hosts.split(",")], engines, commands)
    by = {(r["command"], r["engine"], r["hosts"]): r for r in rows}
    for command, engine in [(c, e) for c in commands for e in engines]:
        if (command, engine, 8) in by and (command, engine, 32) in by:
            a, b = by[(command, engine, 8)], by[(command, engine, 32)]
            print(f"# {command} {engine}: 32 vs 8 hosts: time "
                  f"{b['wall_s'] / a['wall_s']:.2f}x "
                  f"(target <= 4.4x), driver RSS {b['driver_mb'] / a['driver_mb']:.2f}x "
                  "(target <= 1.5x)")
    print(f"# load average after {os.getloadavg()}")


if __name__ == "__main__":
    main()
