"""The timeline's memory counters: bytes allocated per allocator since the step began (the
rise within the step, analysis.stepmemory), cumulative within each step, thinned to a
maximum number of points per step."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import polars as pl

from ..grouping import group_codes, representatives
from ..model import Run
from . import trace_events
from .jsonfrag import jstr
from .jsonrows import Texts
from .model import Part


def counters(run: Run, steps: list[int] | None, points: int
              ) -> tuple[pl.DataFrame, Texts]:
    """Bytes allocated per allocator from the allocation records, cumulative within each step
    (a step's records start from what it allocates), one value per timestamp; a step with
    more than `points` of them keeps the maximum of each of `points` time buckets and the
    last value. `name` indexes the allocator names (JSON strings) returned with the frame."""
    key = ["worker", "allocator_name", "step"]
    keep = pl.col("alloc_us") > 0
    if steps is not None:
        keep &= pl.col("step").is_in(steps)
    a = run.allocations.lazy().select(*key, "alloc_us", "alloc_bytes").filter(keep).collect()
    if not a.height:
        return pl.DataFrame(schema={"worker": pl.String, "step": pl.Int64, "name": pl.Int64,
                                    "ts": pl.Int64, "value": pl.Int64}), Texts([])
    code, k = group_codes(a, key)
    t, v = a["alloc_us"].to_numpy(), a["alloc_bytes"].to_numpy()
    o = np.lexsort((t, code))
    code, t, v = code[o], t[o], v[o]
    fresh = np.r_[True, code[1:] != code[:-1]]  # the first record of its key
    total = np.cumsum(v)
    value = total - (total - v)[np.flatnonzero(fresh)][np.cumsum(fresh) - 1]
    # The value after the last record of each timestamp.
    last = np.r_[fresh[1:] | (t[1:] != t[:-1]), True]
    rows, code, t, value = o[last], code[last], t[last], value[last]
    count = np.bincount(code, minlength=k)
    names = a[representatives(code, k)].select(name=jstr(pl.col("allocator_name")))["name"]
    c = a[rows].select("worker", "allocator_name", "step").with_columns(
        alloc_us=pl.Series(t, dtype=pl.Int64), value=pl.Series(value, dtype=pl.Int64),
        name=pl.Series(code, dtype=pl.Int64), _n=pl.Series(count[code]))
    if c.height and int(count.max()) > points:
        t0, t1 = pl.col("alloc_us").min().over(key), pl.col("alloc_us").max().over(key)
        bucket = (pl.col("alloc_us") - t0) * points // (t1 - t0 + 1)
        many = c.filter(pl.col("_n") > points)
        peaks = many.group_by(*key, "name", bucket.alias("b")).agg(
            alloc_us=pl.col("alloc_us").min(), value=pl.col("value").max())
        lasts = many.group_by(*key, "name").agg(pl.col("alloc_us").last(),
                                                 pl.col("value").last())
        cols = [*key, "name", "alloc_us", "value"]
        c = pl.concat([c.filter(pl.col("_n") <= points).select(cols), peaks.select(cols),
                       lasts.select(cols)])
        c = c.unique([*key, "alloc_us"], keep="first", maintain_order=True)
    return c.select("worker", "step", "name", ts="alloc_us", value="value"), Texts(names)


def counter_part(c: Future[tuple[pl.DataFrame, Texts]]) -> Part:
    """The counter events, from counters()' frame (with pid) and names, still being built."""
    return Part("counter", c, lambda made: trace_events.counter_rows(*made))
