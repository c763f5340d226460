"""The local engine: one task per part in a pool of processes, one per core (never more
than the parts), each task reading with one thread, so the machine's cores are used once
(ingest's own threads and processes are for one part read alone)."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed

from . import Each, HostResult, HostTask, Progress, handed
from .hosttask import read_host


def run(tasks: list[HostTask], progress: Progress | None = None,
        each: Each | None = None) -> list[HostResult]:
    """Each task in a process of its own ("spawn": polars' threads do not survive a
    fork); results in the tasks' order."""
    workers = max(1, min(len(tasks), os.cpu_count() or 1))
    results: list[HostResult | None] = [None] * len(tasks)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = {pool.submit(read_host, task): i for i, task in enumerate(tasks)}
        for done, future in enumerate(as_completed(futures), start=1):
            i = futures[future]
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
