"""Place the kernels of one command-buffer launch on a module's launch order.

A monotone alignment (dynamic programming, O(kernels x launches)): kernels in the order
they ran, launches in schedule order; each kernel goes to one launch at or after the
previous kernel's, or stays unplaced. Scores: the kernel's own name equal to the launch's
kernel name 10; the same base name (a reused kernel) 6; a library kernel (a name XLA did
not give) on a library launch (custom-call, custom fusion) 6; a memset/memcpy (the
profiler's, or CUDA's `memcpy128` kernels of a graph's memcpy node) on a copy launch
(`copy`, a dynamic-slice fusion run as a memcpy) 6, on a library launch 4, elsewhere 1; a
further kernel of the launch just used 5 less (less than a reused kernel's base-name
score on a fresh launch, so the kernel identical fusions share spreads over them: on
cnn_wide2, 3 less put stage3's weight transposes on stage2's fusion, and on flx_scan left
5.2% of device time unattributed, 2.5% with 5); a kernel left unplaced -2; a launch left
without kernel 0 (copies, no-op fusions). Anything else cannot be placed there. The best
total wins; ties go to the earliest launch. (cuBLAS's workspace memset before its gemm is
placed with the gemm by the caller, xla_attribution.)
"""

from __future__ import annotations

import numpy as np

from .hlo_schedule import COPY, LIBRARY, Launches, base_name

NEG = -(1 << 40)
EXACT, BASE, LIB, MEM_LIB, MEM_ANY, REPEAT, SKIP = 10, 6, 6, 4, 1, 5, 2
MEM_COPY = 6
# Memory operations: the profiler's memcpy/memset activities, and CUDA's own copy kernels
# inside graphs (`memcpy128`, `memcpy32_post`: a memcpy node run as a kernel).
MEMORY = ("Memset", "Memcpy", "memset", "memcpy")
MAX_CELLS = 1 << 22  # above this (two 32 MB tables), kernels are placed by name only


def scores(kernels: list[str], launches: Launches, lo: int, hi: int) -> np.ndarray:
    """Score of kernel i on launch lo + j (NEG: cannot go there)."""
    window_k = np.array(launches.kernels[lo:hi], dtype=object)
    window_b = np.array(launches.bases[lo:hi], dtype=object)
    kinds = np.array(launches.kinds[lo:hi], dtype=np.int64)
    library = kinds == LIBRARY
    memory = np.where(kinds == COPY, MEM_COPY, np.where(library, MEM_LIB, MEM_ANY))
    out = np.full((len(kernels), hi - lo), NEG, np.int64)
    for i, k in enumerate(kernels):
        if k in launches.known_kernels or base_name(k) in launches.known_bases:
            out[i, window_b == base_name(k)] = BASE
            out[i, window_k == k] = EXACT
        elif k.startswith(MEMORY):
            out[i] = memory
        else:
            out[i, library] = LIB
    return out


def align(score: np.ndarray) -> np.ndarray:
    """Each kernel's launch (column of `score`), -1 where unplaced (module docstring)."""
    n, m = score.shape
    if not n:
        return np.zeros(0, np.int64)
    if not m:
        return np.full(n, -1, np.int64)
    # M[i, j]: best with kernel i on launch j; P[i, j + 1]: best after kernel i with every
    # kernel so far on launches <= j (P[i, 0]: all unplaced).
    M = np.full((n, m), NEG, np.int64)
    P = np.full((n + 1, m + 1), 0, np.int64)
    P[0] = 0
    for i in range(n):
        fresh = P[i, :m]  # the previous kernels on launches < j
        again = np.where(M[i - 1] > NEG // 2, M[i - 1] - REPEAT, NEG) if i else NEG
        best = np.maximum(fresh, again)
        M[i] = np.where(score[i] > NEG // 2, score[i] + best, NEG)
        placed = np.maximum.accumulate(M[i])
        P[i + 1, 0] = P[i, 0] - SKIP
        P[i + 1, 1:] = np.maximum(placed, P[i, 1:] - SKIP)
    out = np.full(n, -1, np.int64)
    i, j, on_launch = n - 1, m, False  # from P[n, m]
    while i >= 0:
        if not on_launch:  # P[i + 1, j]: kernel i on a launch < j, or unplaced
            found = np.flatnonzero(M[i, :j] == P[i + 1, j]) if j else None
            if found is None or not len(found):
                i -= 1
                continue
            j, on_launch = int(found[0]), True  # the earliest launch
        out[i] = j
        repeat = i > 0 and M[i - 1, j] > NEG // 2 and \
            M[i, j] == score[i, j] + M[i - 1, j] - REPEAT
        i -= 1
        on_launch = bool(repeat)  # else the earlier kernels are on launches < j
    return out
