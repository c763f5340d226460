"""Effect-size floors of the CI gate: how far a metric must move, with 95% confidence, to
be called at all (docs/ci.md, "Effect-size floors, measured").

The lower end of a regression's 95% interval (normalized Hodges-Lehmann change, new/base
- 1) must reach its metric's floor. Each floor is the largest lower end seen at 10 steps a
side between separate same-config processes (8 runs of each of two models, every ordered
pair, 4 draws; spikes capped) x 1.25, rounded up to the next 10%; rates measured on other
runs (docs/ci.md). With several base runs a metric's floor comes from their spread
(analyzer.gate.baseruns).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .baseruns import run_floors, run_spread
from .samples import OP_TIME, STEP_TIME

NOISE_FLOOR = 0.01  # a metric must be at least this share of the median step to be called
# ... and this many microseconds per step: the trace has 1 us resolution, and tiny ops
# jump between ~1 and ~10 us between processes of the same code (an MLP's dense2/MatMul:
# median 1 us in two runs, 9 us in two others; docs/ci.md).
NOISE_FLOOR_US = 20.0
STEP_FLOORS = {STEP_TIME: 0.50, OP_TIME: 0.10}
# The wall span of a step gates only with --no-normalize (dedicated hardware). On a shared
# machine it holds idle time that contention stretches: same-config transformer runs of
# two capture sessions differed by up to 140% in median step time, op time (spikes
# capped) by at most 10%. A step slower by op work is caught on op time (docs/ci.md).
WALL_GATES_SHARED = False
SCOPE_FLOORS = ((0.10, 0.50), (0.03, 0.50), (NOISE_FLOOR, 1.20))  # (share >=, floor)
# A scope of >= 3% whose time is mostly divided by its own size class (no nodes of the
# same kernel and size outside it, analyzer.gate.machinefactor) keeps the floor chosen for
# that method: a regression there moves the factor it is divided by, and so does a
# process that runs one kernel slower (tf_base_a: every optimizer update 3x slower).
SCOPE_FLOOR_NO_PEERS = 0.60
PEERS_ENOUGH = 0.5  # share of a scope's time divided by its peers' speed
# Op types sum one kernel over the whole model: the six attention softmaxes together
# (op type Softmax) moved more between processes than any one scope did.
OP_FLOORS = ((0.10, 0.70), (0.03, 0.70), (NOISE_FLOOR, 1.20))


def floor_for(kind: str, share: float, name: str = STEP_TIME) -> float | None:
    """The effect-size floor of a metric, or None when it is too small to be called."""
    if kind == "step":
        return STEP_FLOORS.get(name, max(STEP_FLOORS.values()))
    for least, floor in OP_FLOORS if kind == "op" else SCOPE_FLOORS:
        if share >= least:
            return floor
    return None


@dataclass
class Floors:
    """Each metric's floor (None: too small to be called), where it came from, and with
    several base runs the spread of their medians (NaN otherwise)."""

    floors: list[float | None]
    lone: list[bool]  # a scope held to SCOPE_FLOOR_NO_PEERS (few peers)
    floor_from: str  # "size class" or "k base runs"
    spread: np.ndarray

    def labels(self, k_runs: int) -> list[str | None]:
        """What the report says each floor came from."""
        return [None if f is None else self.floor_from + (", no peer nodes" if lo and
                                                          k_runs < 2 else "")
                for f, lo in zip(self.floors, self.lone, strict=True)]


def metric_floors(keys: list[tuple[str, str]], share: np.ndarray, size_us: np.ndarray,
                  peers: np.ndarray, b: np.ndarray, b_runs: np.ndarray,
                  k_runs: int) -> Floors:
    """The floors stage: by size class (share of the step, at least NOISE_FLOOR_US), a
    scope without peers at SCOPE_FLOOR_NO_PEERS, or with k >= 2 base runs from their
    spread wherever the size class lets the metric be called at all."""
    floors = [floor_for(m[0], float(sh), m[1]) if m[0] == "step" or us >= NOISE_FLOOR_US
              else None for m, sh, us in zip(keys, share, size_us, strict=True)]
    lone = [f is not None and m[0] == "scope" and f < SCOPE_FLOOR_NO_PEERS
            and pe < PEERS_ENOUGH for f, m, pe in zip(floors, keys, peers, strict=True)]
    floors = [SCOPE_FLOOR_NO_PEERS if lo else f for f, lo in zip(floors, lone, strict=True)]
    spread = np.full(len(keys), np.nan)
    if k_runs < 2 or not b.shape[1]:
        return Floors(floors, lone, "size class", spread)
    spread = run_spread(b, b_runs)
    by_class = np.array([np.nan if f is None else f for f in floors])
    by_runs = run_floors([m[0] for m in keys], spread, by_class, share)
    floors = [None if f is None else float(r) for f, r in zip(floors, by_runs, strict=True)]
    return Floors(floors, lone, f"{k_runs} base runs", spread)
