"""Array helpers of the XSpace reader (xplane_read, xplane_device): self times of nested
events, distinct values and rows of small integer codes, lookups by sorted ids. Numpy
only, no per-event Python where the C decoder (`_xplane`) or a vectorised form does it."""

from __future__ import annotations

import numpy as np

from . import xplane_wire


def self_times(start: np.ndarray, dur: np.ndarray, line: np.ndarray | None = None
               ) -> np.ndarray:
    """Each event's duration less the durations of the events directly nested in it
    (events of one line nest properly, as TraceMe scopes do; `line`: the line of each
    event when they come from several, which never nest in one another)."""
    group = np.zeros(len(start), np.int64) if line is None else line
    same = group[1:] == group[:-1]
    if len(start) < 2 or bool(np.all((group[1:] > group[:-1]) | (same & (start[1:] > start[:-1])))):
        order = np.arange(len(start))  # already in time order (a line usually is)
    else:
        order = np.lexsort((-dur, start, group))
    s, d = np.ascontiguousarray(start[order]), np.ascontiguousarray(dur[order])
    g = np.ascontiguousarray(group[order])
    end = s + d
    if len(s) < 2 or (bool(np.all(s[1:] >= end[:-1])) and bool(np.all(d >= 0))):
        return dur.copy()  # nothing nests (the common case): self time = duration
    if xplane_wire._xplane is not None:
        out = np.frombuffer(xplane_wire._xplane.self_times(s, d, g), np.int64)
    else:
        out = d.copy()
        stack: list[int] = []
        for i in range(len(s)):
            if i and g[i] != g[i - 1]:
                stack = []
            while stack and s[i] >= end[stack[-1]]:
                stack.pop()
            if stack:
                out[stack[-1]] -= d[i]
            stack.append(i)
    result = np.empty_like(out)
    result[order] = out
    return result


def factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct values, each value's number among them): by a table where the values
    span a small range (ids, codes: no sort), else by np.unique."""
    if not len(values):
        return values, np.zeros(0, np.int64)
    lo, hi = int(values.min()), int(values.max())
    if hi - lo < max(4 * len(values), 1 << 16):
        present = np.zeros(hi - lo + 1, bool)
        present[values - lo] = True
        number = np.cumsum(present) - 1
        return np.flatnonzero(present) + lo, number[values - lo]
    uniq, inverse = np.unique(values, return_inverse=True)
    return uniq, inverse.ravel()


def distinct_rows(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of small-valued code columns: (the first row index of each distinct
    combination, the combination number of every row), by one 1-D unique."""
    key = np.zeros(len(columns[0]), np.int64)
    for c in columns:
        uniq, rank = factorize(c)
        key = key * max(len(uniq), 1) + rank
    uniq, inverse = factorize(key)
    first = np.zeros(len(uniq), np.int64)
    first[inverse[::-1]] = np.arange(len(key))[::-1]
    return first, inverse


def lookup(ids: np.ndarray, table: np.ndarray, keys: np.ndarray, default: int) -> np.ndarray:
    """table[position of each key in the sorted `ids`], `default` where absent: by a
    dense table indexed by id where ids are small (metadata ids are), else searchsorted."""
    if not len(ids):
        return np.full(len(keys), default, np.int64)
    if 0 <= ids[0] and ids[-1] < (1 << 22):
        dense = np.full(int(ids[-1]) + 2, default, table.dtype)
        dense[ids] = table
        return dense[np.clip(keys, 0, len(dense) - 1)] if len(keys) else keys
    pos = np.clip(np.searchsorted(ids, keys), 0, len(ids) - 1)
    return np.where(ids[pos] == keys, table[pos], default)
