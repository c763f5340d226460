"""Collectives of an HLO module, shared back to the ops whose data they carry.

XLA combines the all-reduces of a step's gradients into one instruction (its combiner
passes: one all-reduce of a tuple, named after one of its parts, e.g. JAX's
`jit(train)/shard_map/(psum_invariant:transpose(jvp(CNN))/conv2/psum_invariant)` or
plain `.../psum`). Charged to that name, one collective's time lands in a made-up scope
and op type. Instead each collective instruction is shared among its operands by their
bytes, and each share goes to the scope of the operand's producer (the op whose result
it reduces: `transpose(jvp(CNN))/conv1/conv_general_dilated` -> scope
`.../transpose(jvp(CNN))/conv1`), as a node `<scope>/<opcode>` of op type `<opcode>`
(`all-reduce`): the collective category of the views (analyzer/analysis/collectives.py).

A producer is found through the operand: a `get-tuple-element` of a tuple-shaped
collective is that collective's operand of the same index, a collective is its own
operands (XLA chains them: a pmean after the invariant psum of shard_map's transpose),
an instruction without an op name (a layout copy XLA added) its first operand; at most
a few steps, else the collective's own op name decides.
"""

from __future__ import annotations

import re

from ..proto import hlo_pb2
from .hlo_work import shape_bytes

# XLA's collective opcodes (and their async halves: `-start`/`-done`).
COLLECTIVE_OPCODES = frozenset({
    "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "ragged-all-to-all",
    "collective-permute", "collective-broadcast", "send", "recv", "send-done",
    "recv-done", "all-reduce-start", "all-reduce-done", "all-gather-start",
    "all-gather-done", "collective-permute-start", "collective-permute-done",
})
_FOLLOW = frozenset({"get-tuple-element", "bitcast", "copy", "reshape", "transpose",
                     "tuple", "copy-start", "copy-done"})
_DEPTH = 8
Share = tuple[str, str, float]  # (node name, op type, fraction of the instruction's time)


def _scope(op_name: str) -> str:
    """The scope of an op name: without its last part (the primitive), and without a
    part XLA's combiner made up (`(psum_invariant:...` and what follows)."""
    parts = op_name.split("/")
    for i, part in enumerate(parts):
        if part.startswith("("):
            return "/".join(parts[:i])
    return "/".join(parts[:-1])


def _base(opcode: str) -> str:
    return re.sub(r"-(start|done)$", "", opcode)


class _Module:
    """One computation's instructions by id, and the producers of their operands."""

    def __init__(self, comp: hlo_pb2.HloComputationProto) -> None:
        self.by_id = {i.id: i for i in comp.instructions}

    def producers(self, inst_id: int, index: int | None = None, depth: int = 0
                  ) -> list[tuple[str, float]]:
        """(scope, weight) of what instruction `inst_id` (element `index` of it when it
        is a tuple) carries: its own scope, else what it passes on."""
        inst = self.by_id.get(inst_id)
        if inst is None or depth > _DEPTH:
            return []
        opcode = inst.opcode
        if opcode == "get-tuple-element":
            return self.producers(inst.operand_ids[0], inst.tuple_index, depth + 1) \
                if inst.operand_ids else []
        if opcode in COLLECTIVE_OPCODES or opcode == "tuple":
            ids = list(inst.operand_ids)
            if index is not None and index < len(ids):
                ids = [ids[index]]
            out: list[tuple[str, float]] = []
            for o in ids:
                out += self.producers(o, None, depth + 1)
            return out
        scope = _scope(inst.metadata.op_name) if inst.metadata.op_name else ""
        if scope and opcode not in _FOLLOW:
            return [(scope, 1.0)]
        if inst.operand_ids and opcode != "parameter":
            found = self.producers(inst.operand_ids[0], None, depth + 1)
            if found:
                return found
        return [(scope, 1.0)] if scope else []


def collective_shares(comp: hlo_pb2.HloComputationProto
                      ) -> dict[str, tuple[Share, ...]]:
    """Instruction name -> its shares, for every collective of `comp`: one per scope its
    operands came from, weighted by the operands' bytes (equal where unknown)."""
    module: _Module | None = None
    out: dict[str, tuple[Share, ...]] = {}
    for inst in comp.instructions:
        if inst.opcode not in COLLECTIVE_OPCODES:
            continue
        module = module or _Module(comp)
        kind = _base(inst.opcode)
        weights: dict[str, float] = {}
        for o in inst.operand_ids:
            op = module.by_id.get(o)
            size = (shape_bytes(op.shape) if op is not None else None) or 1.0
            found = module.producers(o)
            for scope, w in found:
                weights[scope] = weights.get(scope, 0.0) + size * w / sum(
                    x[1] for x in found)
        if not weights:
            weights = {_scope(inst.metadata.op_name): 1.0}
        total = sum(weights.values())
        out[inst.name] = tuple(
            (f"{scope}/{kind}" if scope else kind, kind, w / total)
            for scope, w in sorted(weights.items()))
    return out
