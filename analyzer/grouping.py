"""Generic numpy grouping: dense integer codes for the distinct values (or rows) of
columns, without a Python call per row. The timeline and the dataflow graph number
nodes, executions and outputs with these (one implementation)."""

from __future__ import annotations

import numpy as np
import polars as pl


def dense(key: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense ids 0..k-1 for the distinct values of an int64 array (in value order), k."""
    if not key.size:
        return key.astype(np.int64), 0
    lo, hi = int(key.min()), int(key.max())
    if hi - lo < 4 * key.size + 4096:
        present = np.zeros(hi - lo + 1, bool)
        present[key - lo] = True
        ids = np.cumsum(present) - 1
        return ids[key - lo], int(ids[-1]) + 1
    values, inverse = np.unique(key, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64), int(values.size)


def group_codes(frame: pl.DataFrame, cols: list[str]) -> tuple[np.ndarray, int]:
    """A dense code per row for the distinct values of `cols` (exact: strings are numbered
    through polars categoricals; null is a value of its own), and the number of codes."""
    return combine([int_codes(frame.get_column(c), local=True) for c in cols], frame.height)


def combine(columns: list[np.ndarray], n: int | None = None) -> tuple[np.ndarray, int]:
    """A dense code per row for the distinct rows of integer columns, and their number."""
    key, size = np.zeros(columns[0].size if n is None else n, np.int64), 1
    for values in columns:
        lo = int(values.min(initial=0))
        width = int(values.max(initial=0)) - lo + 1
        if width == 1:
            continue
        if size * width >= 1 << 62:  # too wide for one int64: number what there is so far
            key, size = dense(key)
            if size * width >= 1 << 62:
                values, width = dense(values)
                lo = 0
        key, size = key * width + (values - lo), size * width
    return dense(key)


def shared_codes(*columns: pl.Series) -> np.ndarray:
    """Int64 codes of the values of several columns, one after the other, comparable
    across them (a categorical's codes are only comparable within one cast in polars 2)."""
    return int_codes(pl.concat([c.cast(pl.String) if c.dtype == pl.Categorical else c
                                for c in columns]))


def int_codes(s: pl.Series, local: bool = False) -> np.ndarray:
    """A column as int64: strings by their categorical codes (comparable within the
    column only), null as -1. `local`: a column of one value (the worker, nearly always)
    may be all zeros, without numbering.

    Series operations: an eager DataFrame.select on the run's wide frames costs ~5 ms
    before it does anything (polars 2.1)."""
    if local and s.len() and s.dtype == pl.String and not s.null_count() and (s == s[0]).all():
        return np.zeros(s.len(), np.int64)
    if s.dtype == pl.String:
        s = s.cast(pl.Categorical).to_physical()
    if s.null_count():
        s = s.cast(pl.Int64).fill_null(-1)
    return np.asarray(s.to_numpy(), np.int64)


def representatives(code: np.ndarray, k: int) -> np.ndarray:
    """A row of each code (all rows of a code hold the same key)."""
    rep = np.zeros(k, np.int64)
    rep[code] = np.arange(code.size)
    return rep
