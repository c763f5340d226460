"""Every plane of one XSpace file read: the metadata plane's programs (HLO modules) first,
then the host planes (xplane_read) and the GPU/TPU device planes (xplane_device), which
attribute device events to those programs' instructions. Above both readers, so neither
imports the other."""

from __future__ import annotations

from .xplane_collectives import split_shares, wait_lanes
from .xplane_device import gpu_wanted, read_gpu, read_tpu
from .xplane_hlo import Programs, read_programs
from .xplane_read import _DEVICE_PLANE, Extra, Ops, _read_host, host_batches
from .xplane_wire import Plane


def read_planes(planes: list[Plane], jobs: int = 2) -> tuple[Ops, Extra]:
    """The op executions and markers/memory of every plane (`jobs` lines decoded at once)."""
    programs = Programs({}, {}, {}, [])
    ops, extra = Ops(), Extra(programs=programs)
    if any(plane.name == "/host:metadata" for plane in planes):
        _begin(planes, jobs)
    for plane in planes:
        if plane.name == "/host:metadata":
            found = read_programs(plane.meta)
            programs.ops.update(found.ops)
            programs.modules.update(found.modules)
            programs.by_name.update(found.by_name)
            programs.work.update(found.work)
            extra.warnings += found.warnings
    for plane in planes:
        if plane.name.startswith("/host:") and plane.name != "/host:metadata":
            _read_host(plane, ops, extra, programs.ops, jobs)
        elif m := _DEVICE_PLANE.match(plane.name):
            read = read_gpu if m.group(1) == "GPU" else read_tpu
            read(plane, f"/device:{m.group(1)}:{m.group(2)}", ops, extra, jobs, programs)
    wait_lanes(ops)  # a replica's wait on its collective's lane (device)
    split_shares(ops)  # a combined collective's executions: one per scope it served
    return ops, extra


def _begin(planes: list[Plane], jobs: int) -> None:
    """Start decoding the first planes' lines (as many planes as `jobs`, host and GPU) in
    threads while the metadata plane's HLO is read: on the 500-step H200 profile the
    GPU plane's one 21 MB line is ~40 ms of decoding (more on a busy machine) that the
    reader waited for after the HLO. (More planes at once would hold more decoded columns
    at once.)"""
    begun = 0
    for plane in planes:
        if begun >= jobs:
            return
        if plane.name.startswith("/host:") and plane.name != "/host:metadata":
            wanted, keep = host_batches(plane)
            begun += plane.begin(wanted, jobs, keep)
        elif (m := _DEVICE_PLANE.match(plane.name)) and m.group(1) == "GPU":
            begun += plane.begin(gpu_wanted(plane), jobs)
