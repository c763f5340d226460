"""A scope for the HLO instructions XLA made without one: each takes the framework op
name of the instructions it computes, feeds from or feeds (docs/xplane.md "Ops XLA named").

XLA's passes add instructions with no `OpMetadata.op_name` (XLA:CPU's max-pool backward
runs `wrapped_reduce-window`, `wrapped_iota`, `wrapped_broadcast`; layout changes run
as `input_transpose_fusion.N`, `copy.N`), and give others the name of the argument they
read (`state[0]['stage3']['conv1']`: JAX names a parameter by its pytree path). Shown
under their own names, they sit beside the user's scopes as rows no user wrote. Each
takes the op name with the most scopes among (ties: the first of) its fused computation's
(the root's, else the one most fused instructions carry), its users' (what it feeds: a
layout transpose is its consumer's input) and its operands' (what feeds it), in that
order; repeated so that a chain of such
instructions takes its neighbours' (at most ROUNDS). The most scopes, because XLA's
helpers often compute JAX's scope-less constants (`jit(f)/jvp()/broadcast_in_dim`) for
an op of the user's (the max-pool gradient's `select_and_scatter`).
The name is that op's scope with what ran as the leaf (the fused root's opcode:
`reduce-window`, not `fusion` nor the instruction's name, which another compilation
numbers differently), marked `INFERRED` (`jit(f)/jvp(CNN)/relu/reduce-window (inferred)`),
so that the scope view shows it under the user's scope and says it was inferred; the op
type is that opcode, the code frames those of the op it took the scope from.
"""

from __future__ import annotations

from collections import Counter

from ..proto import hlo_pb2, xla_data_pb2

INFERRED = " (inferred)"
ROUNDS = 8


def scoped(op_name: str) -> bool:
    """Whether an op name is a scope path (JAX's `jit(f)/...`, TF's `dense/MatMul`), not
    empty or an argument's pytree path (`state[0]['conv1']`, `args[0]`)."""
    return "/" in op_name and not op_name.endswith(INFERRED)


def _needs_scope(inst: hlo_pb2.HloInstructionProto) -> bool:
    name = inst.metadata.op_name
    return inst.opcode != "parameter" and (not name or ("/" not in name and "[" in name))


def _fused_source(inst: hlo_pb2.HloInstructionProto,
                  comps: dict[int, hlo_pb2.HloComputationProto]
                  ) -> xla_data_pb2.OpMetadata | None:
    """The metadata a fusion's fused computation names it by: its root's, else the most
    common scoped one (ties: first seen)."""
    if inst.opcode != "fusion" or not inst.called_computation_ids:
        return None
    fused = comps.get(inst.called_computation_ids[0])
    if fused is None:
        return None
    metas = [i.metadata for i in fused.instructions if scoped(i.metadata.op_name)]
    root = next((i.metadata for i in fused.instructions if i.id == fused.root_id), None)
    if root is not None and scoped(root.op_name):
        return root
    if not metas:
        return None
    top = Counter(m.op_name for m in metas).most_common(1)[0][0]
    return next(m for m in metas if m.op_name == top)


def fused_opcode(inst: hlo_pb2.HloInstructionProto,
                 comps: dict[int, hlo_pb2.HloComputationProto]) -> str:
    """What a fusion computes (its fused root's opcode), else the instruction's opcode."""
    if inst.opcode == "fusion" and inst.called_computation_ids:
        fused = comps.get(inst.called_computation_ids[0])
        if fused is not None:
            by_id = {i.id: i for i in fused.instructions}
            root = by_id.get(fused.root_id)
            if root is not None and root.opcode == "tuple" and root.operand_ids:
                root = by_id.get(root.operand_ids[0], root)  # a multi-output fusion
            if root is not None:
                return root.opcode
    return inst.opcode


def _depth(op_name: str) -> int:
    """How many scopes an op name has: its path elements but the op and empty transform
    wrappers (`jvp()`: JAX's name for work outside any scope of the user's)."""
    return sum(1 for part in op_name.split("/")[:-1] if not part.endswith("()"))


def _deepest(metas: list[xla_data_pb2.OpMetadata]) -> xla_data_pb2.OpMetadata | None:
    """The candidate with the most scopes; ties go to the first (fused, users, operands)."""
    best = None
    for meta in metas:
        if best is None or _depth(meta.op_name) > _depth(best.op_name):
            best = meta
    return best


def inferred_metadata(module: hlo_pb2.HloModuleProto
                      ) -> dict[str, xla_data_pb2.OpMetadata]:
    """instruction name -> the metadata it takes its scope (and code frames) from, for the
    instructions of `module` that have no scope of their own and a neighbour that has."""
    comps = {c.id: c for c in module.computations}
    out: dict[str, xla_data_pb2.OpMetadata] = {}
    for comp in module.computations:
        instructions = comp.instructions
        todo = [i for i in instructions if _needs_scope(i)]
        if not todo:  # most computations (2 in 3 of a transformer's): nothing to infer
            continue
        users: dict[int, list[int]] = {}
        for i in instructions:
            for o in i.operand_ids:
                users.setdefault(o, []).append(i.id)
        # (this computation's instructions only: an operand id of another is not in it)
        known = {i.id: i.metadata for i in instructions if scoped(i.metadata.op_name)}
        for _ in range(ROUNDS):
            left = []
            for inst in todo:
                fused = _fused_source(inst, comps)
                near = [known[n] for n in (*users.get(inst.id, ()), *inst.operand_ids)
                        if n in known]
                meta = _deepest([fused, *near] if fused is not None else near)
                if meta is None:
                    left.append(inst)
                    continue
                known[inst.id] = meta
                out[inst.name] = meta
            if len(left) == len(todo):
                break
            todo = left
    return out


def inferred_name(meta: xla_data_pb2.OpMetadata, opcode: str) -> str:
    """The op name of an instruction that took `meta`'s scope: the scope, then what ran
    (`fused_opcode`), not the instruction's name, which the next compilation may number
    differently (compare matches ops by name)."""
    return f"{meta.op_name.rsplit('/', 1)[0]}/{opcode}{INFERRED}"
