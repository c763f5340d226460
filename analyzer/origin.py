"""Where a Run came from: the data folders of its parts' source caches, where its
products (analyzer.products) may be kept, and what narrowed it since (a choice of steps).

Its own module, below the model and the caches, because the Run holds one and the
product cache reads one: neither has to import the other.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path


def _known(folder: Path | None) -> Future:
    done: Future = Future()
    done.set_result(folder)
    return done


@dataclass(frozen=True)
class Origin:
    """Where a Run's products may be kept: its parts' source caches (each a Future of the
    data folder: a cache being written in the background gives it when written; None: no
    cache), and what narrowed the run since (`narrow`)."""

    parts: tuple[Future, ...]
    narrowed: tuple[str, ...] = ()
    # What keeps the data folders from being removed while the Run lives (cache leases).
    holds: tuple[object, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def of(cls, folders: list[Future | Path], holds: tuple[object, ...] = ()) -> Origin:
        return cls(tuple(f if isinstance(f, Future) else _known(f) for f in folders),
                   holds=holds)

    def narrow(self, what: str) -> Origin:
        """The origin of a Run cut from this one (`what` says how, uniquely)."""
        return Origin(self.parts, (*self.narrowed, what), self.holds)

    def folders(self, wait: bool) -> list[Path] | None:
        """The parts' data folders; None when one has no cache, or (unless `wait`) is
        still being written."""
        found = []
        for part in self.parts:
            if not (wait or part.done()):
                return None
            try:
                folder = part.result()
            except Exception:  # noqa: BLE001 - the cache was not written: reported there
                return None
            if folder is None:
                return None
            found.append(folder)
        return found
