"""Which while loop each HLO computation runs in, with its trip count.

JAX's `scan`, `fori_loop` and `while_loop` (flax's `nn.scan` over layers) become XLA
while loops: the ops of the loop's body run once per trip in every run of the module.
The user reads the loop as its scope (`Model/layers`) and its trip count (6 layers) as a
fact of its own, not as `while/body` in every scope name (analysis/jaxscopes.py folds
those away). XLA records the count it proved in the while's backend_config
(`known_trip_count`, hlo_schedule.trip_count); nested loops multiply.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..proto import hlo_pb2
from .hlo_schedule import trip_count


@dataclass(frozen=True)
class Loop:
    name: str  # the innermost while instruction's name, unique in its module
    trips: int  # trips per run of the module (nested loops multiplied); 0: not known


def loops_of(module: hlo_pb2.HloModuleProto) -> dict[int, Loop]:
    """computation id -> the loop it runs in (its body or condition, or what they call),
    for computations inside a while loop. Walks from the entry computation (from every
    computation when the module names none); each computation once, so a cyclic or
    malformed module ends."""
    comps = {c.id: c for c in module.computations}
    out: dict[int, Loop] = {}
    seen: set[int] = set()
    roots = ([module.entry_computation_id] if module.entry_computation_id in comps
             else list(comps))
    stack: list[tuple[int, Loop | None]] = [(r, None) for r in reversed(roots)]
    while stack:
        comp_id, loop = stack.pop()
        if comp_id in seen or comp_id not in comps:
            continue
        seen.add(comp_id)
        if loop is not None:
            out[comp_id] = loop
        for inst in comps[comp_id].instructions:
            inner = loop
            if inst.opcode == "while":
                trips = trip_count(inst)
                outer = loop.trips if loop is not None else 1
                inner = Loop(inst.name, trips * outer if trips and outer else 0)
            for called in inst.called_computation_ids:
                stack.append((called, inner))
    return out
