"""JAX's HLO metadata: which framework op (named-scope path, op type, source line) each
HLO instruction of a program came from.

JAX writes a `/host:metadata` plane whose event metadata hold one serialized
`xla.HloProto` per compiled program (stat "Hlo Proto"; "program_id"). Its instructions'
OpMetadata carries `op_name` (the `jax.named_scope` path, e.g.
"jit(train_step)/jit(main)/dense1/dot_general"), `op_type` and a source line (directly,
or through the module's stack frame index). Only that subset of the proto is vendored
(analyzer/proto/hlo.proto, xla_data.proto); the rest is skipped as unknown fields. Each
module's launch order (hlo_schedule) lets xla_attribution place device events.
JAX leaves `op_type` empty: an op's type is then its primitive (the op name's last part,
`dot_general`), else the HLO opcode.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from google.protobuf.message import DecodeError

from ..proto import hlo_pb2, xla_data_pb2, xplane_pb2
from .hlo_collectives import Share, collective_shares
from .hlo_infer import fused_opcode, inferred_metadata, inferred_name
from .hlo_loops import loops_of
from .hlo_work import ModuleWork
from .xla_attribution import Module


class HloOp(NamedTuple):  # (a frozen dataclass: 1.2 us per instruction to make, 3x this)
    op_name: str  # the framework op: named-scope path, or the instruction's name
    op_type: str
    frames: tuple[tuple[str, int, str], ...]  # (file, line, function), outermost first
    # A collective: its time shared among the scopes of its operands (hlo_collectives);
    # op_name/op_type are then the first share's.
    shares: tuple[Share, ...] = ()
    # The while loop the instruction runs in (hlo_loops): "<program>:<while>", and its
    # trips per run of the module (0: not known); "" outside loops.
    loop: str = ""
    loop_trips: int = 0


def _frames(meta: xla_data_pb2.OpMetadata, index: hlo_pb2.StackFrameIndexProto
            ) -> tuple[tuple[str, int, str], ...]:
    out: list[tuple[str, int, str]] = []
    frame_id, seen = meta.stack_frame_id, 0
    while 0 < frame_id <= len(index.stack_frames) and seen < 256:
        frame = index.stack_frames[frame_id - 1]
        loc_id = frame.file_location_id
        if 0 < loc_id <= len(index.file_locations):
            loc = index.file_locations[loc_id - 1]
            file = (index.file_names[loc.file_name_id - 1]
                    if 0 < loc.file_name_id <= len(index.file_names) else "")
            func = (index.function_names[loc.function_name_id - 1]
                    if 0 < loc.function_name_id <= len(index.function_names) else "")
            out.append((file, loc.line, func))
        frame_id, seen = frame.parent_frame_id, seen + 1
    if not out and meta.source_file:
        out.append((meta.source_file, meta.source_line, ""))
    return tuple(reversed(out))  # the innermost frame was first


# JAX primitives that only wrap others (a call, remat, custom derivatives, SPMD): an
# instruction named by one ran as something else (a copy or a transpose of remat2's
# outputs, a broadcast of closed_call's), which is its type. (`while` and `cond` stay:
# the loop's and the branch's own instructions.)
_WRAPPERS = frozenset({"remat", "remat2", "checkpoint", "closed_call", "core_call",
                       "eval_jaxpr", "pjit", "custom_jvp_call", "custom_vjp_call",
                       "custom_vjp_call_jaxpr", "shard_map", "pmap", "xla_pmap"})


def _op_type(meta: xla_data_pb2.OpMetadata, inst: hlo_pb2.HloInstructionProto,
             comps: dict[int, hlo_pb2.HloComputationProto]) -> str:
    if meta.op_type:
        return meta.op_type
    last = meta.op_name.rsplit("/", 1)[-1].split("[")[0] if meta.op_name else ""
    if last in _WRAPPERS:
        return fused_opcode(inst, comps)
    return (last if last and last.replace("_", "a").replace("-", "a").isalnum()
            else inst.opcode)


@dataclass
class Programs:
    """The HLO of every program on a metadata plane."""

    ops: dict[tuple[int, str], HloOp]  # (program_id, instruction name) -> its framework op
    modules: dict[int, Module]  # program_id -> launch order (xla_attribution)
    by_name: dict[str, int]  # module name -> program_id (events without program_id)
    warnings: list[str]
    work: dict[int, ModuleWork] = field(default_factory=dict)  # program_id -> (hlo_work)


def read_programs(plane: xplane_pb2.XPlane) -> Programs:
    """Every HloProto of the metadata plane (stat "Hlo Proto"), keyed by its program_id
    stat (else the module's id): what the device events' `program_id` names."""
    stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
    out = Programs({}, {}, {}, [])
    for meta in plane.event_metadata.values():
        proto, program = None, 0
        for stat in meta.stats:
            name = stat_names.get(stat.metadata_id)
            if name == "Hlo Proto":
                proto = stat.bytes_value
            elif name == "program_id":
                program = stat.int64_value or stat.uint64_value
        if proto is None:
            continue
        try:
            module = hlo_pb2.HloProto.FromString(proto).hlo_module
        except (DecodeError, RuntimeError) as e:
            out.warnings.append(f"HLO metadata of {meta.name!r} unreadable ({e})")
            continue
        program = program or module.id or meta.id
        index = module.stack_frame_index
        names = set()
        frames: dict[tuple[int, str, int], tuple[tuple[str, int, str], ...]] = {}
        inferred = inferred_metadata(module)
        comps = {c.id: c for c in module.computations}
        loops = loops_of(module)
        for comp in module.computations:
            shares = collective_shares(comp)
            loop = loops.get(comp.id)
            for inst in comp.instructions:
                name = inst.name
                names.add(name)
                source = inferred.get(name)
                # no scope of its own: its neighbours' (hlo_infer)
                m = inst.metadata if source is None else source
                where = (m.stack_frame_id, m.source_file, m.source_line)
                if where not in frames:  # instructions share their ops' stacks
                    frames[where] = _frames(m, index)
                share = shares.get(name, ())
                # a collective shared among its operands' scopes names them; an op without
                # a name of its own takes its neighbours' (inferred), else its own
                ran = fused_opcode(inst, comps) if source is not None and not share else ""
                out.ops[(program, name)] = HloOp(
                    op_name=share[0][0] if share else (
                        inferred_name(m, ran) if ran else m.op_name or name),
                    op_type=share[0][1] if share else ran or _op_type(m, inst, comps),
                    frames=frames[where], shares=share,
                    loop=f"{program}:{loop.name}" if loop else "",
                    loop_trips=loop.trips if loop else 0,
                )
        out.modules[program] = Module(program, module.name, names, module)
        out.work[program] = ModuleWork(module)
        out.by_name.setdefault(module.name, program)
    return out


def program_ops(plane: xplane_pb2.XPlane) -> tuple[dict[tuple[int, str], HloOp], list[str]]:
    """(program_id, HLO instruction name) -> HloOp, for every program on the metadata
    plane; and a warning per HloProto that could not be read."""
    got = read_programs(plane)
    return got.ops, got.warnings
