"""An XLA module as the device sees it: its instructions in launch order, and which kernel
names stand for which instruction.

XLA's GPU backend turns a module's scheduled entry computation (`HloModuleProto.schedule`)
into a sequence of thunks, in that order; a fusion becomes a kernel named after it with
every character other than [A-Za-z0-9_] replaced by `_` (`loop_add_fusion.12` ->
`loop_add_fusion_12`), except where its kernel is reused: fusions with identical fused
computations share the first one's compiled kernel and name (the transformer's six blocks
run `loop_add_fusion_5` six times). Such names keep the instruction's base (the name
without its number), so a kernel name places an event among the fusions of that base, and
its position in the launch order decides which. Library calls (custom-calls: cuBLAS,
cuDNN; custom fusions) run kernels named by the library, placed by position only.
While, conditional and call instructions launch their computations' thunks in place: the
launch order inlines those once, and keeps each computation's span: XLA makes a command
buffer of consecutive thunks of one computation (a loop body is one, launched once per
iteration), so a buffer's kernels are placed within the span of the computation its
named kernels belong to (xla_attribution); a loop body's span keeps the loop's known trip
count, so a loop run inside one buffer (the body's kernels many times in one launch) is
placed on the body repeated per iteration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..proto import hlo_pb2

# What runs no thunk: these never appear in the launch order.
_SILENT = frozenset({"parameter", "constant", "get-tuple-element", "tuple", "bitcast",
                     "after-all", "add-dependency", "opt-barrier", "domain"})
_INLINED = frozenset({"while", "conditional", "call", "async-start"})
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
_NUMBER = re.compile(r"_\d+$")
_FUSION_KIND = re.compile(rb'"kind"\s*:\s*"([^"]*)"')
_TRIPS = re.compile(rb'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"(\d+)"')

# What a launch runs: a kernel XLA names, library kernels, or a device-to-device copy
# (a `copy`, or a dynamic-slice / dynamic-update-slice fusion XLA runs as a memcpy: the
# profile shows `MemcpyD2D`, or inside command buffers CUDA's `memcpy128` kernels).
KERNEL, LIBRARY, COPY = 0, 1, 2
_COPY_NAME = re.compile(r"(^|_)(dynamic_slice|dynamic_update_slice)(_|$)")


def kernel_name(instruction: str) -> str:
    """The name XLA gives the kernel of a fusion (llvm_ir::SanitizeFunctionName)."""
    return _UNSAFE.sub("_", instruction)


def base_name(kernel: str) -> str:
    """A kernel name without its number: shared by the fusions a reused kernel stands for."""
    return _NUMBER.sub("", kernel)


@dataclass
class Launches:
    """One module's launch order and kernel-name tables (hlo_schedule's docstring)."""

    names: list[str] = field(default_factory=list)  # instruction names, in launch order
    kinds: list[int] = field(default_factory=list)  # KERNEL or LIBRARY per launch
    kernels: list[str] = field(default_factory=list)  # the kernel name per launch
    bases: list[str] = field(default_factory=list)
    known_kernels: set[str] = field(default_factory=set)  # every instruction's kernel name
    known_bases: set[str] = field(default_factory=set)
    # Per launch, the [first, end) launches of its computation (a loop body's, a branch's;
    # the entry's is the whole module): one command buffer runs one computation's thunks.
    spans: list[tuple[int, int]] = field(default_factory=list)
    # A while body's span -> the loop's trip count, where XLA knows it (> 1).
    trips: dict[tuple[int, int], int] = field(default_factory=dict)

    def add(self, inst: hlo_pb2.HloInstructionProto) -> None:
        library = inst.opcode == "custom-call" or _library_fusion(inst)
        kernel = kernel_name(inst.name)
        copy = inst.opcode == "copy" or (inst.opcode == "fusion"
                                          and _COPY_NAME.search(base_name(kernel)) is not None)
        self.names.append(inst.name)
        self.kinds.append(LIBRARY if library else COPY if copy else KERNEL)
        self.kernels.append(kernel)
        self.bases.append(base_name(kernel))
        self.spans.append((0, 0))  # launch_order sets it once its computation is walked


def _library_fusion(inst: hlo_pb2.HloInstructionProto) -> bool:
    """A custom fusion a library runs (cuDNN, cuBLAS, CUTLASS); Triton's kernels are named
    after their fusion like XLA's own."""
    if inst.opcode != "fusion" or inst.fusion_kind != "kCustom":
        return False
    kind = _FUSION_KIND.search(inst.backend_config)
    return not (kind and kind.group(1).startswith(b"__triton"))


def trip_count(inst: hlo_pb2.HloInstructionProto) -> int:
    """A while loop's trip count as XLA knows it (backend_config `known_trip_count`; a
    while's called computations are its body, then its condition), else 0."""
    m = _TRIPS.search(inst.backend_config)
    return int(m.group(1)) if m else 0


def launch_order(module: hlo_pb2.HloModuleProto) -> Launches:
    """The module's launches: the entry computation's schedule, while/conditional/call
    bodies inlined once (depth-first, each computation at most once); each launch with
    its computation's span."""
    comps = {c.id: c for c in module.computations}
    by_id = {i.id: i for c in module.computations for i in c.instructions}
    out = Launches()
    out.known_kernels = {kernel_name(i.name) for c in module.computations
                         for i in c.instructions}
    out.known_bases = {base_name(k) for k in out.known_kernels}
    entry = module.entry_computation_id or next(
        (c.id for c in module.computations if c.name == module.entry_computation_name), 0)
    seen: set[int] = set()

    def walk(comp_id: int, depth: int, trips: int = 0) -> None:
        if comp_id in seen or comp_id not in comps or depth > 64:
            return
        seen.add(comp_id)
        seq = module.schedule.sequences.get(comp_id)
        order = ([by_id[i] for i in seq.instruction_ids if i in by_id] if seq is not None
                 else list(comps[comp_id].instructions))
        first, own = len(out.names), []
        for inst in order:
            if inst.opcode in _INLINED:
                body = inst.called_computation_ids[0] if inst.opcode == "while" else None
                for called in inst.called_computation_ids:
                    walk(called, depth + 1, trip_count(inst) if called == body else 0)
            elif inst.opcode not in _SILENT:
                own.append(len(out.names))
                out.add(inst)
        for i in own:
            out.spans[i] = (first, len(out.names))
        if trips > 1 and own:
            out.trips[(first, len(out.names))] = trips

    walk(entry, 0)
    return out
