"""Work beside the caller, in threads or processes, with one rule for its errors.

- Work whose result someone awaits (`Background.submit`, `map`, `ahead`,
  `map_in_processes`): an exception raised in it is raised again where its result is
  taken, as if the work had run there.
- Work nobody awaits (`Background.detach`): an exception raised in it is reported once,
  as one warning (`warnings.warn`, RuntimeWarning, naming the work), never lost silently
  and never raised into whatever the caller does meanwhile. `Background.wait` waits for
  such work without raising.

Threads pay where the work releases the GIL (the C decoders, Parquet writes, file reads);
`map_in_processes` is for pure-Python work that holds it.
"""

from __future__ import annotations

import itertools
import threading
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def report(name: str, error: BaseException) -> None:
    """How an error in work nobody awaits is said: one warning naming the work."""
    warnings.warn(f"runlens: {name} failed in the background "
                  f"({type(error).__name__}: {error})", RuntimeWarning, stacklevel=2)


class Background:
    """A pool of `workers` threads (started when first used), named `name` (threads show
    it; warnings name the work with it). As a context manager, its threads are joined on
    exit; a long-lived one (a module's writer) is joined when the interpreter exits."""

    def __init__(self, workers: int = 1, name: str = "runlens") -> None:
        self.workers = max(1, workers)
        self.name = name
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._detached: list[Future] = []

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.workers,
                                                thread_name_prefix=self.name)
            return self._pool

    def submit(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> Future[R]:
        """fn(*args) in a thread; its `result()` returns its value or raises its error."""
        return self._executor().submit(fn, *args, **kwargs)

    def detach(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
        """fn(*args) in a thread, nobody awaiting it: an error is `report`ed (one warning)."""
        future = self.submit(fn, *args, **kwargs)
        what = getattr(fn, "__name__", self.name)

        def done(f: Future) -> None:
            error = None if f.cancelled() else f.exception()
            if error is not None:
                report(f"{self.name} ({what})", error)

        future.add_done_callback(done)
        with self._lock:
            self._detached.append(future)
        return future

    def wait(self) -> None:
        """Until the detached work submitted so far is done (its errors are reported, not
        raised)."""
        while True:
            with self._lock:
                if not self._detached:
                    return
                future = self._detached.pop(0)
            try:
                future.result()
            except BaseException:  # noqa: BLE001 - reported by its done callback
                pass

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        """fn over items in the pool's threads, results in order; an item's error is raised
        where its result is taken."""
        return self._executor().map(fn, items)

    def ahead(self, fn: Callable[[T], R], items: Iterable[T], depth: int) -> Iterator[R]:
        """fn over items, results in order, the next `depth` computed in threads while the
        caller works on one: at most `depth + 1` results exist at once. The first `depth`
        are submitted at this call, not when the first result is asked for."""
        pending: deque[Future[R]] = deque()
        it = iter(items)
        for item in itertools.islice(it, max(depth, 1)):
            pending.append(self.submit(fn, item))
        return self._in_order(pending, fn, it)

    def _in_order(self, pending: deque[Future[R]], fn: Callable[[T], R], it: Iterator[T]
                  ) -> Iterator[R]:
        """`ahead`'s results, each next item submitted as one is taken."""
        while pending:
            result = pending.popleft().result()
            for item in itertools.islice(it, 1):
                pending.append(self.submit(fn, item))
            yield result

    def close(self) -> None:
        """Wait for the work submitted so far and stop the threads."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def __enter__(self) -> Background:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def map_in_processes(fn: Callable[[T], R], items: list[T], workers: int,
                     consume: Callable[[Iterator[R]], list[R]] = list) -> list[R] | None:
    """fn over items in a pool of spawned processes, results in order, as `consume` takes
    them (e.g. reporting progress); an item's error is raised where `consume` takes its
    result. None when no pool can run here (no /dev/shm; a script without
    `if __name__ == "__main__"`, which the spawn start method needs): do it serially."""
    import multiprocessing  # only here: the threads' users never start processes
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    try:
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(workers, len(items)), mp_context=ctx) as pool:
            return consume(pool.map(fn, items))
    except (BrokenProcessPool, OSError, RuntimeError):
        return None
