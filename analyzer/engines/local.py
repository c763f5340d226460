"""The local engine: one task per part in a pool of processes, one per core (never more
than the parts), each task reading with its share of the cores (one when there are at
least as many parts as cores), so the machine's cores are used once, not once by the
pool and again by ingest's own threads and processes inside each part."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed

from . import Each, HostResult, HostTask, Progress, handed
from .hosttask import read_host


def run(tasks: list[HostTask], progress: Progress | None = None,
        each: Each | None = None) -> list[HostResult]:
    """Each task in a process of its own ("spawn": polars' threads do not survive a
    fork); results in the tasks' order."""
    cores = os.cpu_count() or 1
    workers = max(1, min(len(tasks), cores))
    share = max(1, cores // max(1, len(tasks)))
    tasks = [dataclasses.replace(task, jobs=share) for task in tasks]
    results: list[HostResult | None] = [None] * len(tasks)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = {pool.submit(read_host, task): i for i, task in enumerate(tasks)}
        for done, future in enumerate(as_completed(futures), start=1):
            # dropped from the dict: the future (and the host's pieces it holds) is freed
            # once handed (as_completed lets go of the futures it has given)
            i = futures.pop(future)
            try:
                result = future.result()
            except Exception as e:  # noqa: BLE001 - the process died (killed, out of memory)
                part = tasks[i].part
                result = HostResult(part.worker, str(part.path),
                                    f"{part.path}: its task failed ({type(e).__name__})",
                                    b"", (), 0.0, "")
            results[i] = handed(i, result, each)
            if progress:
                progress(done, len(tasks))
    return [r for r in results if r is not None]
