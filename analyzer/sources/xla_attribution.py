"""Which HLO instruction ran each device event of an XLA program (GPU kernels, memsets,
memcpys; docs/xplane.md "Device events of XLA programs").

The rule, per event of a program (`program_id`, else the `hlo_module` name) whose HLO the
profile holds:
1. `hlo_op` names an instruction of the module: that one ("hlo_op"). This is every
   event outside XLA command buffers.
2. inside a command buffer (`hlo_op` names the buffer, `command_buffer_N`): the kernels of
   one buffer launch (one `correlation_id`), in the order they ran, are aligned with the
   module's launch order (xla_align: kernel names, reused kernels' base names, library
   calls by position) between the launches of the events of rule 1 that came before and
   after it ("kernel name" where the kernel's own name is the instruction's, else
   "schedule").
3. an event rule 2 leaves unplaced whose name is an instruction's kernel name: that one
   ("kernel name").
Else the event is unattributed. Alignments are cached per (program, window, kernels), so
a step's buffers are aligned once per distinct buffer, not per step: the cost is linear in
events plus one alignment per distinct launch.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..proto import hlo_pb2
from .hlo_schedule import Launches, base_name, kernel_name, launch_order
from .xla_align import MAX_CELLS, MEMORY, align, scores

HLO_OP, NAME, SCHEDULE, NONE = 0, 1, 2, 3
# One body's launch runs at most about one kernel per launch (flx_scan: 27 kernels on 32
# launches forward, 91 on 111 backward); a whole loop of N trips about N times that.
LOOP_RATIO = 1.5
HOW = ("op stat", "kernel name", "schedule", "unattributed")  # "op stat": hlo_op, TF annotation


class Module:
    """What attribution needs of one XLA module: its instruction names, and (built when
    first asked: only modules that ran command buffers need it) its launch order."""

    def __init__(self, program: int, name: str, instructions: set[str],
                 proto: hlo_pb2.HloModuleProto) -> None:
        self.program, self.name, self.instructions = program, name, instructions
        self._proto: hlo_pb2.HloModuleProto | None = proto
        self._launches: Launches | None = None
        self.position: dict[str, int] = {}  # instruction -> launch index
        self.by_kernel: dict[str, str] = {}  # kernel name -> instruction
        self.unique_at: dict[str, int] = {}  # kernel name of one launch only -> its index

    @property
    def launches(self) -> Launches:
        if self._launches is None:
            assert self._proto is not None
            self._launches = launch_order(self._proto)
            self._proto = None
            self.position = {n: i for i, n in enumerate(self._launches.names)}
            self.by_kernel = {kernel_name(n): n for n in self.instructions}
            counts = Counter(self._launches.kernels)
            self.unique_at = {k: i for i, k in enumerate(self._launches.kernels)
                              if counts[k] == 1}
        return self._launches


@dataclass
class Events:
    """One device's events of XLA programs, as columns (codes index the name lists)."""

    kernel: np.ndarray  # code into kernels
    kernels: list[str]
    hlo_op: np.ndarray  # code into hlo_ops ("" where none)
    hlo_ops: list[str]
    program: np.ndarray  # -1 where none
    corr: np.ndarray  # -1 where none
    start: np.ndarray


def attribute(ev: Events, modules: dict[int, Module]
              ) -> tuple[np.ndarray, np.ndarray, list[tuple[int, str]]]:
    """(target per event: an index into the returned (program, instruction) list, or -1;
    how per event: HLO_OP, NAME, SCHEDULE or NONE; the targets)."""
    n = len(ev.kernel)
    target = np.full(n, -1, np.int64)
    how = np.full(n, NONE, np.int64)
    targets: list[tuple[int, str]] = []
    index: dict[tuple[int, str], int] = {}

    def target_of(program: int, inst: str) -> int:
        key = (program, inst)
        got = index.get(key)
        if got is None:
            got = index[key] = len(targets)
            targets.append(key)
        return got

    cache: dict[tuple, np.ndarray] = {}
    for program in np.unique(ev.program).tolist():
        # A uint64 program_id over 2**63 reads back negative from the int64 columns.
        module = modules.get(program) or modules.get(program + (1 << 64))
        if module is None:
            continue
        rows = np.flatnonzero(ev.program == program)
        rows = rows[np.lexsort((ev.start[rows], ev.corr[rows]))]  # launch order
        _exact(ev, module, rows, target, how, target_of)
        _buffers(ev, module, rows, target, how, target_of, cache)
    return target, how, targets


def _exact(ev: Events, module: Module, rows: np.ndarray, target: np.ndarray,
           how: np.ndarray, target_of) -> None:  # type: ignore[no-untyped-def]
    """Rule 1, per distinct hlo_op text: one pass over the rows (a selection per distinct
    text was quadratic: 23 s of 42 for a module of 333,333 kernels)."""
    distinct, inverse = np.unique(ev.hlo_op[rows], return_inverse=True)
    found = np.array([target_of(module.program, ev.hlo_ops[code])
                      if ev.hlo_ops[code] in module.instructions else -1
                      for code in distinct.tolist()], np.int64)
    got = found[inverse.reshape(-1)]
    sel = got >= 0
    target[rows[sel]] = got[sel]
    how[rows[sel]] = HLO_OP


def _buffers(ev: Events, module: Module, rows: np.ndarray, target: np.ndarray,
             how: np.ndarray, target_of, cache: dict) -> None:  # type: ignore[no-untyped-def]
    """Rules 2 and 3: each command-buffer launch (a run of unplaced events with one
    correlation id) aligned between the launch positions of its placed neighbours."""
    placed = how[rows] == HLO_OP
    if placed.all():
        return
    launches = module.launches
    m = len(launches.names)
    at_code = np.array([module.position.get(t, -1) for t in ev.hlo_ops], np.int64)
    pos = np.where(placed, at_code[ev.hlo_op[rows]], -1)
    anchor = placed & (pos >= 0)
    idx = np.arange(len(rows))
    before = np.maximum.accumulate(np.where(anchor, idx, -1))
    after = np.minimum.accumulate(np.where(anchor, idx, len(rows))[::-1])[::-1]
    free = np.flatnonzero(~placed)
    corr = ev.corr[rows[free]]
    cut = np.flatnonzero((np.diff(free) != 1) | (np.diff(corr) != 0)) + 1
    for group in np.split(free, cut):
        lo = int(pos[before[group[0]]]) + 1 if before[group[0]] >= 0 else 0
        hi = int(pos[after[group[-1]]]) if after[group[-1]] < len(rows) else m
        # No launch between its neighbours: the module's next run began in between.
        window = [(lo, m), (0, hi)] if hi <= lo else [(lo, hi)]
        kernels = ev.kernel[rows[group]]
        # (a step's launch is its previous step's again: its narrowed window too)
        seen = ("seen", module.program, tuple(window), kernels.tobytes())
        got = cache.get(seen)
        if got is None:
            codes, counts = np.unique(kernels, return_counts=True)
            window = _within_computation(window, dict(zip(
                [ev.kernels[k] for k in codes.tolist()], counts.tolist(), strict=True)), module)
            key = (module.program, tuple(window), kernels.tobytes())
            got = cache.get(key)
            if got is None:
                got = cache[key] = _targets([ev.kernels[k] for k in kernels.tolist()], module,
                                            window, target_of)
            cache[seen] = got
        target[rows[group]], how[rows[group]] = got


def _within_computation(window: list[tuple[int, int]], kernels: dict[str, int],
                        module: Module) -> list[tuple[int, int]]:
    """The window narrowed to the span of the computation a buffer launch's kernels name
    (hlo_schedule: a command buffer runs thunks of one computation: a loop body's buffer,
    launched once per iteration, stays in the body). The computation is the one most of
    its kernels that name a single launch belong to (ties: the first); a window that
    misses it is replaced by it. A loop body's buffer that ran more kernels (memsets
    aside) than LOOP_RATIO times the body's launches ran the whole loop (XLA's while
    command): the body's span once per trip. (A kernel's name repeating is no sign: XLA
    reuses one kernel for identical fusions.) `kernels`: the launch's kernel names and
    how often each ran."""
    spans = Counter(module.launches.spans[module.unique_at[k]] for k in kernels
                    if k in module.unique_at)
    if not spans:
        return window
    lo, hi = spans.most_common(1)[0][0]
    if (lo, hi) == (0, len(module.launches.names)):
        return window
    trips = module.launches.trips.get((lo, hi), 0)
    ran = sum(n for k, n in kernels.items() if not k.startswith(("Memset", "memset")))
    if trips > 1 and ran > LOOP_RATIO * (hi - lo):
        return [(lo, hi)] * trips  # the whole loop in one launch: the body once per trip
    inside = [(max(a, lo), min(b, hi)) for a, b in window if max(a, lo) < min(b, hi)]
    return inside or [(lo, hi)]


def _targets(kernels: list[str], module: Module, window: list[tuple[int, int]],
             target_of) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    """(target, how) of one buffer launch's kernels: rule 2, else rule 3, else none."""
    launches = module.launches
    target = np.full(len(kernels), -1, np.int64)
    how = np.full(len(kernels), NONE, np.int64)
    for i, j in enumerate(_place(kernels, launches, window).tolist()):
        if j >= 0:
            target[i] = target_of(module.program, launches.names[j])
            how[i] = NAME if launches.kernels[j] == kernels[i] else SCHEDULE
        elif kernels[i] in module.by_kernel:
            target[i] = target_of(module.program, module.by_kernel[kernels[i]])
            how[i] = NAME
    return target, how


def _place(kernels: list[str], launches: Launches, window: list[tuple[int, int]]
           ) -> np.ndarray:
    """Each kernel's launch index in the module (-1: unplaced), by xla_align over the
    window (two spans when the window wraps to the module's next run)."""
    spans = [np.arange(a, b) for a, b in window]
    cols = np.concatenate(spans) if spans else np.zeros(0, np.int64)
    if not len(cols) or len(kernels) * len(cols) > MAX_CELLS:
        return np.full(len(kernels), -1, np.int64)
    # A library call's workspace memset goes with the library kernel that follows it.
    lead = _leading_memsets(kernels, launches)
    rest = np.flatnonzero(~lead)
    kept = [kernels[i] for i in rest.tolist()]
    score = np.concatenate([scores(kept, launches, a, b) for a, b in window], axis=1)
    at = align(score)
    placed = np.full(len(kernels), -1, np.int64)
    placed[rest] = np.where(at >= 0, cols[np.clip(at, 0, len(cols) - 1)], -1)
    for i in np.flatnonzero(lead)[::-1].tolist():
        placed[i] = placed[i + 1]
    return placed


def _leading_memsets(kernels: list[str], launches: Launches) -> np.ndarray:
    """Which kernels are a memset right before a library kernel (cuBLAS clears its
    workspace, then runs the gemm: one call, one launch)."""
    out = np.zeros(len(kernels), bool)
    for i in range(len(kernels) - 2, -1, -1):
        nxt = kernels[i + 1]
        library = (nxt not in launches.known_kernels and base_name(nxt) not in
                   launches.known_bases and not nxt.startswith(MEMORY))
        if kernels[i].startswith(("Memset", "memset")) and (library or out[i + 1]):
            out[i] = True
    return out
