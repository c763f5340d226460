"""XLA programs built with the protobuf classes, as JAX writes them into a GPU profile: an
HloModuleProto on the `/host:metadata` plane (stat "Hlo Proto", "program_id") and one
kernel per fusion on a `/device:GPU:0` stream line (stats hlo_op, hlo_module, program_id,
correlation_id). Used by tests/test_faults_hlo.py (valid and malformed modules),
tests/fuzz_sources.py (--hlo) and benchmarks/hlo_module.py (10^5-10^6 instructions).

The module: an entry computation of a parameter f32[D,D] and `fusions` fusions in a chain,
each calling its own fused computation (a parameter and `dot(p, p)`), 3 x fusions + 1
instructions in all; fusion i's framework op is `block{i % 100}/dot_general`. Each
fusion's work: out = in = D*D*4 bytes, 2*D^3 float ops.
"""

from __future__ import annotations

import random

from runlens.analyzer.proto import hlo_pb2, xla_data_pb2, xplane_pb2

F32 = xla_data_pb2.PrimitiveType.F32
PROGRAM = 7
ENTRY = 1


def _shape(shape: xla_data_pb2.ShapeProto, dims: list[int]) -> None:
    shape.element_type = F32
    shape.dimensions.extend(dims)


def module(fusions: int, d: int = 64) -> hlo_pb2.HloModuleProto:
    """The module of the docstring (`fusions` fusions of D x D dots)."""
    m = hlo_pb2.HloModuleProto(name="jit_step", id=PROGRAM, entry_computation_id=ENTRY,
                               entry_computation_name="main")
    entry = m.computations.add(name="main", id=ENTRY)
    param = entry.instructions.add(name="p0", opcode="parameter", id=1)
    _shape(param.shape, [d, d])
    previous = 1
    for i in range(fusions):
        comp_id = 100 + i
        fused = m.computations.add(name=f"fused_dot.{i}", id=comp_id)
        p = fused.instructions.add(name=f"param.{i}", opcode="parameter", id=1)
        _shape(p.shape, [d, d])
        dot = fused.instructions.add(name=f"dot.{i}", opcode="dot", id=2)
        _shape(dot.shape, [d, d])
        dot.operand_ids.extend([1, 1])
        dot.dot_dimension_numbers.lhs_contracting_dimensions.append(1)
        dot.dot_dimension_numbers.rhs_contracting_dimensions.append(0)
        fused.root_id = 2
        inst_id = 2 + i
        fusion = entry.instructions.add(name=f"dot_fusion.{i}", opcode="fusion", id=inst_id,
                                        fusion_kind="kOutput")
        _shape(fusion.shape, [d, d])
        fusion.operand_ids.append(previous)
        fusion.called_computation_ids.append(comp_id)
        fusion.metadata.op_name = f"jit(step)/block{i % 100}/dot_general"
        fusion.metadata.op_type = "dot_general"
        previous = inst_id
    entry.root_id = previous
    return m


def fusion_names(m: hlo_pb2.HloModuleProto) -> list[str]:
    return [i.name for c in m.computations if c.id == ENTRY for i in c.instructions
            if i.opcode == "fusion"]


def space(m: hlo_pb2.HloModuleProto, kernels: list[str] | None = None,
          hlo_proto: bytes | None = None) -> bytes:
    """A serialized XSpace: `m` (or the raw `hlo_proto` bytes) on the metadata plane and
    one kernel event per name of `kernels` (default: every fusion of the entry) on a GPU
    stream, each naming its instruction by hlo_op."""
    kernels = fusion_names(m) if kernels is None else kernels
    xs = xplane_pb2.XSpace()
    meta = xs.planes.add(id=1, name="/host:metadata")
    meta.stat_metadata[1].CopyFrom(xplane_pb2.XStatMetadata(id=1, name="Hlo Proto"))
    meta.stat_metadata[2].CopyFrom(xplane_pb2.XStatMetadata(id=2, name="program_id"))
    em = meta.event_metadata[PROGRAM]
    em.id, em.name = PROGRAM, m.name
    proto = hlo_proto if hlo_proto is not None else \
        hlo_pb2.HloProto(hlo_module=m).SerializeToString()
    em.stats.add(metadata_id=1, bytes_value=proto)
    em.stats.add(metadata_id=2, int64_value=PROGRAM)
    gpu = xs.planes.add(id=2, name="/device:GPU:0")
    for sid, name in enumerate(("hlo_op", "hlo_module", "program_id", "correlation_id"), 1):
        gpu.stat_metadata[sid].CopyFrom(xplane_pb2.XStatMetadata(id=sid, name=name))
    gpu.stat_metadata[5].CopyFrom(xplane_pb2.XStatMetadata(id=5, name=m.name))
    line = gpu.lines.add(id=14, name="Stream #14(Compute)", timestamp_ns=1_000_000)
    refs: dict[str, int] = {}
    for i, kernel in enumerate(kernels):
        ref = refs.get(kernel)
        if ref is None:  # the instruction's name, referenced as real profiles do
            ref = refs[kernel] = 10 + len(refs)
            gpu.stat_metadata[ref].CopyFrom(xplane_pb2.XStatMetadata(id=ref, name=kernel))
            gpu.event_metadata[ref].CopyFrom(xplane_pb2.XEventMetadata(
                id=ref, name=kernel.replace(".", "_")))
        event = line.events.add(metadata_id=ref, offset_ps=i * 2_000_000,
                                duration_ps=1_000_000)
        event.stats.add(metadata_id=1, ref_value=ref)
        event.stats.add(metadata_id=2, ref_value=5)
        event.stats.add(metadata_id=3, int64_value=PROGRAM)
        event.stats.add(metadata_id=4, uint64_value=i + 1)
    return xs.SerializeToString()


# ----------------------------------------------------------------------------- malformed


def _comp(m: hlo_pb2.HloModuleProto, comp_id: int) -> hlo_pb2.HloComputationProto:
    return next(c for c in m.computations if c.id == comp_id)


def _set_dims(shape: xla_data_pb2.ShapeProto, dims: list[int]) -> None:
    del shape.dimensions[:]
    shape.dimensions.extend(dims)


def _huge_conv(m: hlo_pb2.HloModuleProto) -> None:
    """Fused computation 102's dot becomes a 1-d convolution whose kernel is 2^40 wide (one
    array entry per kernel position would be 8 TB)."""
    fused = _comp(m, 102)
    conv = fused.instructions[1]
    conv.opcode = "convolution"
    conv.ClearField("dot_dimension_numbers")
    _set_dims(fused.instructions[0].shape, [1, 2**40, 4])  # input NWC
    _set_dims(conv.shape, [1, 2**40, 4])
    kernel = fused.instructions.add(name="k.2", opcode="parameter", id=3)
    _shape(kernel.shape, [2**40, 4, 4])  # WIO
    del conv.operand_ids[:]
    conv.operand_ids.extend([1, 3])
    d = conv.convolution_dimension_numbers
    d.input_batch_dimension, d.input_feature_dimension = 0, 2
    d.input_spatial_dimensions.append(1)
    d.kernel_input_feature_dimension, d.kernel_output_feature_dimension = 1, 2
    d.kernel_spatial_dimensions.append(0)
    d.output_batch_dimension, d.output_feature_dimension = 0, 2
    d.output_spatial_dimensions.append(1)
    conv.window.dimensions.add(size=2**40, stride=1, padding_low=2**40 - 1,
                               padding_high=0, window_dilation=1, base_dilation=1)


def malformed(case: str) -> hlo_pb2.HloModuleProto:
    """A 3-fusion module with one defect (docs/robustness.md): which facts it leaves
    unknown is what tests/test_faults_hlo.py checks."""
    m = module(3)
    entry = _comp(m, ENTRY)
    if case == "no-entry":  # neither the id nor the name names a computation
        m.entry_computation_id, m.entry_computation_name = 999, "nowhere"
    elif case == "self-call":  # fused computation 100 fuses itself
        dot = _comp(m, 100).instructions[1]
        dot.opcode = "fusion"
        dot.called_computation_ids.append(100)
    elif case == "cycle":  # 101 -> 102 -> 101, through a call and a fusion
        a, b = _comp(m, 101).instructions[1], _comp(m, 102).instructions[1]
        a.opcode, b.opcode = "call", "fusion"
        a.called_computation_ids.append(102)
        b.called_computation_ids.append(101)
    elif case == "overflow":  # fusion 0 and its dot: 2^80 elements, beyond int64
        _set_dims(entry.instructions[1].shape, [2**40, 2**40])
        for inst in _comp(m, 100).instructions:
            _set_dims(inst.shape, [2**40, 2**40])
    elif case == "negative":  # fusion 1 and its dot's operand: a dimension of -5
        _set_dims(entry.instructions[2].shape, [-5, 64])
        _set_dims(_comp(m, 101).instructions[0].shape, [-5, 64])
    elif case == "huge-conv":
        _huge_conv(m)
    elif case == "dangling-ids":  # operands and callees that name nothing
        entry.instructions[1].operand_ids.append(12345)
        entry.instructions[2].called_computation_ids.append(777)
    elif case == "deep":  # 20,000 fusions nested (valid, but no recursion survives it)
        _deep(m, 20_000)
    else:
        raise ValueError(case)
    return m


def _deep(m: hlo_pb2.HloModuleProto, depth: int) -> None:
    """Fused computation 100 calls a chain of `depth` computations, the last one a dot."""
    inner = _comp(m, 100).instructions[1]
    inner.opcode = "fusion"
    inner.called_computation_ids.append(100_000)
    for k in range(depth):
        comp = m.computations.add(name=f"nest.{k}", id=100_000 + k)
        p = comp.instructions.add(name=f"np.{k}", opcode="parameter", id=1)
        _shape(p.shape, [64, 64])
        inst = comp.instructions.add(name=f"n.{k}", opcode="fusion" if k < depth - 1
                                     else "dot", id=2)
        _shape(inst.shape, [64, 64])
        inst.operand_ids.extend([1, 1])
        if k < depth - 1:
            inst.called_computation_ids.append(100_001 + k)
        else:
            inst.dot_dimension_numbers.lhs_contracting_dimensions.append(1)


CASES = ("no-entry", "self-call", "cycle", "overflow", "negative", "huge-conv",
         "dangling-ids", "deep")


# ----------------------------------------------------------------------------- fuzz

_DIMS = (-1, -(2**63), 0, 1, 3, 2**31, 2**40, 2**62, 2**63 - 1)
_OPCODES = ("dot", "convolution", "fusion", "call", "while", "custom-call", "parameter",
            "async-start", "conditional", "tuple")


def _random_edit(m: hlo_pb2.HloModuleProto, rng: random.Random) -> str:
    """One structural defect, anywhere in `m`: what it was."""
    insts = [i for c in m.computations for i in c.instructions]
    inst = rng.choice(insts)
    comp_ids = [c.id for c in m.computations] + [0, 999, -1]
    kind = rng.choice(["dims", "entry", "callee", "operand", "opcode", "contracting",
                       "window", "tuple", "gemm", "schedule", "frames"])
    if kind == "dims":
        shape = inst.shape
        _set_dims(shape, [rng.choice(_DIMS) for _ in range(rng.randint(0, 4))])
        shape.element_type = rng.choice([F32, F32, xla_data_pb2.PrimitiveType.TUPLE, 999])
    elif kind == "entry":
        m.entry_computation_id = rng.choice(comp_ids)
        m.entry_computation_name = rng.choice(["main", "", "nowhere"])
    elif kind == "callee":
        inst.called_computation_ids.append(rng.choice(comp_ids))
    elif kind == "operand":
        inst.operand_ids.append(rng.choice([i.id for i in insts] + [0, -5, 2**62]))
    elif kind == "opcode":
        inst.opcode = rng.choice(_OPCODES)
    elif kind == "contracting":
        inst.dot_dimension_numbers.lhs_contracting_dimensions.append(
            rng.choice([-1, 0, 1, 7, 2**40]))
    elif kind == "window":  # a fused dot made a convolution of odd shapes and window
        fused = rng.choice([c for c in m.computations if c.id != ENTRY])
        inst = fused.instructions[-1]
        for i in fused.instructions:
            _set_dims(i.shape, [rng.choice(_DIMS) for _ in range(2)])
        inst.opcode = "convolution"
        inst.window.dimensions.add(size=rng.choice(_DIMS), stride=rng.choice(_DIMS),
                                   padding_low=rng.choice(_DIMS),
                                   window_dilation=rng.choice(_DIMS),
                                   base_dilation=rng.choice(_DIMS))
        d = inst.convolution_dimension_numbers
        d.input_spatial_dimensions.append(rng.choice([0, 1]))
        d.kernel_spatial_dimensions.append(rng.choice([0, 1]))
        d.output_spatial_dimensions.append(rng.choice([0, 1]))
    elif kind == "tuple":  # tuples nested deep
        shape = inst.shape
        for _ in range(rng.randint(1, 60)):
            shape.element_type = xla_data_pb2.PrimitiveType.TUPLE
            shape = shape.tuple_shapes.add()
        _set_dims(shape, [rng.choice(_DIMS)])
    elif kind == "gemm":
        inst.opcode, inst.custom_call_target = "custom-call", "__cublas$gemm"
        inst.backend_config = rng.choice([b"{", b"[]", b'{"gemm_backend_config": 5}',
                                          b'{"gemm_backend_config": {"dot_dimension_numbers":'
                                          b' {"lhs_contracting_dimensions": ["x", 99]}}}'])
    elif kind == "schedule":
        seq = m.schedule.sequences[rng.choice(comp_ids)]
        seq.instruction_ids.extend(rng.choice([i.id for i in insts] + [77]) for _ in range(3))
    else:
        inst.metadata.stack_frame_id = rng.choice([1, 2, 2**30, -1])
        m.stack_frame_index.stack_frames.add(file_location_id=rng.choice([0, 1, 9]),
                                             parent_frame_id=rng.choice([0, 1, 2]))
    return kind


def fuzzed(rng: random.Random) -> tuple[str, bytes]:
    """(what was done, a serialized XSpace): a 4-fusion module with 1-4 structural defects,
    a byte-level mutation of its HloProto on top a quarter of the time."""
    m = module(4, d=rng.choice([1, 8, 64]))
    kinds = [_random_edit(m, rng) for _ in range(rng.randint(1, 4))]
    proto = hlo_pb2.HloProto(hlo_module=m).SerializeToString()
    if rng.random() < 0.25:
        from tests.faults_readers import mutate

        kind, proto = mutate(proto, rng)
        kinds.append(f"bytes-{kind}")
    return "+".join(kinds), space(m, hlo_proto=proto)
