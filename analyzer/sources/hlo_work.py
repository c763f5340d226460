"""The work of an HLO instruction, from its module's HloProto: the bytes it writes (its
shape), the bytes it reads (its operands' shapes) and the float ops of its matrix
products and convolutions (docs/xplane.md "Work of HLO instructions").

Float ops, as XLA's HloCostAnalysis counts the two ops that dominate a training step
(2 per multiply-add):
- dot: 2 x the output's elements x the product of the lhs contracting dimensions;
- convolution: 2 x batch x output features x the filter's input features (already
  divided by the feature groups) x, per spatial dimension, the (kernel, output) position
  pairs that read an input element rather than padding (XLA's count: a 3x3 SAME
  convolution of 16x16 has 46, not 48, per dimension). XLA:GPU runs convolutions as
  cuDNN custom calls in three directions, each with the forward convolution's window and
  dimension numbers: forward (operands input, filter; result output), backward input
  (output gradient, filter; input gradient), backward filter (input, output gradient;
  filter gradient). Each does the forward's multiply-adds, so the count is taken on the
  forward's shapes. (XLA's GpuHloCostAnalysis takes operand 0 as the input whatever the
  direction: a strided convolution's backward input comes out 1/stride^2 of its forward,
  tests/test_hlo_work.py);
- a cuBLAS gemm custom call: as a dot, its dimension numbers in its backend config;
- a fusion: the sum over its fused computation (a triton gemm fusion's dot).
Other instructions' float ops are 0 (elementwise work is not counted). Bytes: a tuple's
elements summed, but a custom call's tuple is (result, scratch): its result only.

A malformed module (docs/robustness.md) leaves facts unknown (None), never an error: a
shape with a negative dimension or more than 2^63 elements, a convolution window no
real one has, a computation that calls itself through fusions or calls.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from math import prod

import numpy as np

from ..proto import hlo_pb2, xla_data_pb2

_T = xla_data_pb2.PrimitiveType
# Bits per element (sub-byte types packed).
ELEMENT_BITS = {
    _T.PRED: 8, _T.S8: 8, _T.U8: 8, _T.S16: 16, _T.U16: 16, _T.F16: 16, _T.BF16: 16,
    _T.S32: 32, _T.U32: 32, _T.F32: 32, _T.S64: 64, _T.U64: 64, _T.F64: 64, _T.C64: 64,
    _T.C128: 128, _T.S4: 4, _T.U4: 4, _T.S2: 2, _T.U2: 2, _T.S1: 1, _T.U1: 1,
    _T.F8E5M2: 8, _T.F8E4M3FN: 8, _T.F8E4M3B11FNUZ: 8, _T.F8E5M2FNUZ: 8, _T.F8E4M3FNUZ: 8,
    _T.F8E4M3: 8, _T.F8E3M4: 8, _T.F8E8M0FNU: 8, _T.F4E2M1FN: 4, _T.TOKEN: 0,
}
CONV_FORWARD = ("__cudnn$convForward", "__cudnn$convBiasActivationForward",
                "__cudnn$convBackwardInput", "__cudnn$convBackwardFilter")
GEMMS = ("__cublas$gemm", "__cublas$lt$matmul", "__cublas$lt$matmul$f8")


@dataclass(frozen=True)
class Work:
    """One execution's work; None where a shape's type is not known."""

    out_bytes: float | None
    in_bytes: float | None
    float_ops: float | None


def _total(sizes: list[float | None]) -> float | None:
    known = [s for s in sizes if s is not None]
    return sum(known) if len(known) == len(sizes) else None


def shape_bytes(shape: xla_data_pb2.ShapeProto, result_only: bool = False) -> float | None:
    """Bytes of an array shape, or of a tuple's elements (`result_only`: its first)."""
    if shape.element_type == _T.TUPLE:
        parts = shape.tuple_shapes[:1] if result_only else shape.tuple_shapes
        return _total([shape_bytes(s) for s in parts])
    bits = ELEMENT_BITS.get(shape.element_type)
    count = elements(shape.dimensions)
    if bits is None or count is None:
        return None
    return count * bits / 8


MAX_ELEMENTS = 2**63 - 1  # XLA's shapes count their elements in int64


def elements(dims: Iterable[int]) -> int | None:
    """The product of `dims`; None when one is negative or it is beyond int64 (a
    malformed shape: its facts are unknown)."""
    total = 1
    for d in dims:
        if d < 0:
            return None
        total *= d
        if total > MAX_ELEMENTS:
            return None
    return total


def _array(shape: xla_data_pb2.ShapeProto) -> xla_data_pb2.ShapeProto:
    return shape.tuple_shapes[0] if shape.element_type == _T.TUPLE and shape.tuple_shapes \
        else shape


_MAX_KERNEL = 1 << 20  # one array entry per kernel position
_MAX_EXTENT = 1 << 31  # kernel x dilation + output x stride stays far inside int64


def _valid_positions(window: xla_data_pb2.WindowDimension, kernel: int, output: int,
                     base: int) -> int | None:
    """(kernel, output) position pairs of one spatial dimension that read an input element
    (not padding, not a base-dilation hole): XLA's HloCostAnalysis count, in closed form
    per kernel position (no base dilation), else by enumeration where that is small.
    None for a window no real convolution has (its numbers would overflow int64)."""
    stride, dilation = max(window.stride, 1), max(window.window_dilation, 1)
    if kernel <= 0 or output <= 0 or base <= 0:
        return 0
    if kernel > _MAX_KERNEL or max(output, base, stride, dilation, window.base_dilation,
                                   abs(window.padding_low)) > _MAX_EXTENT:
        return None
    k = np.arange(kernel, dtype=np.int64)
    shift = k * dilation - window.padding_low  # input index of output 0
    dil = max(window.base_dilation, 1)
    if dil == 1:  # 0 <= o * stride + shift < base
        lo = np.maximum(-(shift // stride), 0)  # ceil(-shift / stride)
        hi = np.minimum((base - 1 - shift) // stride, output - 1)
        return int(np.maximum(hi - lo + 1, 0).sum())
    if kernel * output > 10_000_000:
        return kernel * output  # a shape no real convolution has: count every pair
    at = np.arange(output, dtype=np.int64)[None, :] * stride + shift[:, None]
    return int(((at % dil == 0) & (at >= 0) & (at // dil < base)).sum())


def conv_flops(inst: hlo_pb2.HloInstructionProto,
               operands: list[xla_data_pb2.ShapeProto]) -> float | None:
    """2 x batch x output features x filter input features x the valid (kernel, output)
    positions of each spatial dimension, on the forward convolution's shapes."""
    result = _array(inst.shape)
    target = inst.custom_call_target
    if len(operands) < 2:
        return 0.0
    if target == "__cudnn$convBackwardInput":
        x, kernel, y = result, operands[1], operands[0]
    elif target == "__cudnn$convBackwardFilter":
        x, kernel, y = operands[0], result, operands[1]
    else:
        x, kernel, y = operands[0], operands[1], result
    d = inst.convolution_dimension_numbers
    xs, ks, ys = list(x.dimensions), list(kernel.dimensions), list(y.dimensions)
    spatial = list(zip(d.input_spatial_dimensions, d.kernel_spatial_dimensions,
                       d.output_spatial_dimensions, strict=False))
    used = [(d.kernel_input_feature_dimension, ks), (d.output_batch_dimension, ys),
            (d.output_feature_dimension, ys)] + [
        (i, xs) for i, _, _ in spatial] + [(k, ks) for _, k, _ in spatial] + [
        (o, ys) for _, _, o in spatial]
    if any(not 0 <= i < len(dims) for i, dims in used) \
            or len(inst.window.dimensions) != len(spatial):
        return 0.0
    if any(elements(dims) is None for dims in (xs, ks, ys)):
        return None
    each = [_valid_positions(w, ks[k], ys[o], xs[i])
            for w, (i, k, o) in zip(inst.window.dimensions, spatial, strict=True)]
    if any(p is None for p in each):
        return None
    return 2.0 * ys[d.output_batch_dimension] * ys[d.output_feature_dimension] \
        * ks[d.kernel_input_feature_dimension] * float(prod(each))  # type: ignore[arg-type]


def dot_flops(lhs: xla_data_pb2.ShapeProto, result: xla_data_pb2.ShapeProto,
              contracting: Iterable[int]) -> float | None:
    """2 x output elements x the product of the lhs contracting dimensions (None: a
    malformed shape)."""
    dims = list(lhs.dimensions)
    wanted = [int(i) for i in contracting]
    if any(not 0 <= i < len(dims) for i in wanted):
        return 0.0
    out, inner = elements(_array(result).dimensions), elements(dims[i] for i in wanted)
    if out is None or inner is None or elements(dims) is None:
        return None
    return 2.0 * out * inner


def _gemm_contracting(inst: hlo_pb2.HloInstructionProto) -> list[int] | None:
    try:
        config = json.loads(inst.backend_config or b"{}")
        dnums = config.get("gemm_backend_config", {}).get("dot_dimension_numbers", {})
        return [int(i) for i in dnums.get("lhs_contracting_dimensions", [])]
    except (ValueError, AttributeError, TypeError):
        return None


class ModuleWork:
    """The work of the instructions of one HloModuleProto, each computed once."""

    def __init__(self, module: hlo_pb2.HloModuleProto) -> None:
        self.module = module  # indexed when first asked (only programs that ran are)
        self._index: tuple[dict, dict, dict] | None = None
        self._flops: dict[int, float | None] = {}  # computation id -> its float ops
        self._work: dict[str, Work | None] = {}

    def _indexed(self) -> tuple[dict, dict, dict]:
        if self._index is None:
            comps = self.module.computations
            self._index = ({c.id: c for c in comps},
                           {(c.id, i.id): i.shape for c in comps for i in c.instructions},
                           {i.name: (c.id, i) for c in comps for i in c.instructions})
        return self._index

    @property
    def computations(self) -> dict[int, hlo_pb2.HloComputationProto]:
        return self._indexed()[0]

    @property
    def shapes(self) -> dict[tuple[int, int], xla_data_pb2.ShapeProto]:
        return self._indexed()[1]

    @property
    def by_name(self) -> dict[str, tuple[int, hlo_pb2.HloInstructionProto]]:
        return self._indexed()[2]

    def named(self, name: str) -> tuple[Work | None, bool]:
        """(the work of instruction `name`, None if the module has none so named; whether
        it is of the entry computation: run once per run of the program)."""
        found = self.by_name.get(name)
        if found is None:
            return None, False
        if name not in self._work:
            self._work[name] = self.of(*found)
        return self._work[name], found[0] == self.module.entry_computation_id

    def of(self, computation: int, inst: hlo_pb2.HloInstructionProto) -> Work:
        operands = [self.shapes.get((computation, o)) for o in inst.operand_ids]
        known = [s for s in operands if s is not None]
        custom = inst.opcode == "custom-call"
        out = shape_bytes(inst.shape, result_only=custom)
        in_bytes = _total([shape_bytes(s) for s in known])
        return Work(out, in_bytes, self.flops(computation, inst, known))

    def flops(self, computation: int, inst: hlo_pb2.HloInstructionProto,
              operands: list[xla_data_pb2.ShapeProto]) -> float | None:
        if inst.opcode == "convolution" or inst.custom_call_target in CONV_FORWARD:
            return conv_flops(inst, operands)
        if inst.opcode == "dot" and operands:
            return dot_flops(operands[0], inst.shape,
                             inst.dot_dimension_numbers.lhs_contracting_dimensions)
        if inst.custom_call_target in GEMMS and operands:
            contracting = _gemm_contracting(inst)
            return dot_flops(operands[0], inst.shape, contracting) if contracting else 0.0
        if inst.opcode in ("fusion", "call", "async-start"):
            return _sum(self._computation_flops(c) for c in inst.called_computation_ids)
        return 0.0

    def _computation_flops(self, computation: int) -> float | None:
        """The float ops of a computation with those of the fusions and calls in it: each
        computation once (memoised), walked with an explicit stack (no recursion limit).
        None when it calls itself (a cycle: a malformed module) or holds an unknown."""
        if computation in self._flops:
            return self._flops[computation]
        state: dict[int, int] = {}  # 1: on the stack (its callees pending), 2: done
        stack = [computation]
        while stack:
            comp_id = stack[-1]
            if comp_id in self._flops:
                stack.pop()
                continue
            callees = self._callees(comp_id)
            if state.get(comp_id) != 1:
                state[comp_id] = 1
                pending = [c for c in callees if c not in self._flops]
                if any(state.get(c) == 1 for c in pending):  # a cycle through comp_id
                    self._flops[comp_id] = None
                    stack.pop()
                    continue
                if pending:
                    stack.extend(pending)
                    continue
            stack.pop()
            self._flops[comp_id] = self._own_flops(comp_id)
        return self._flops[computation]

    def _callees(self, computation: int) -> list[int]:
        comp = self.computations.get(computation)
        if comp is None:
            return []
        return [c for inst in comp.instructions if inst.opcode in ("fusion", "call")
                for c in inst.called_computation_ids]

    def _own_flops(self, computation: int) -> float | None:
        """Its instructions' float ops, its callees' already known (or None: unknown)."""
        comp = self.computations.get(computation)
        if comp is None:
            return 0.0
        shapes, parts = self.shapes, []
        for inst in comp.instructions:
            if inst.opcode in ("fusion", "call"):
                parts += [self._flops.get(c, None) for c in inst.called_computation_ids]
            elif inst.opcode in ("dot", "convolution", "custom-call"):
                operands = [s for o in inst.operand_ids
                            if (s := shapes.get((computation, o))) is not None]
                parts.append(self.flops(computation, inst, operands))
        return _sum(parts)


def _sum(values: Iterable[float | None]) -> float | None:
    """The sum, None when one of them is unknown."""
    total = 0.0
    for v in values:
        if v is None:
            return None
        total += v
    return total


def add_per_op(totals: dict[str, list], counts: list[int], targets: list[tuple[int, str]],
               op_names: list[str], work: dict[int, ModuleWork]) -> None:
    """Add to `totals` (framework op -> [events, out bytes, in bytes, float ops], over the
    whole profile) the work of the instructions events were attributed to: `counts[i]`
    events of `targets[i]`, named `op_names[i]`. An instruction of a program's entry
    computation ran once per run of the program, whatever number of kernels it launched
    (a cuDNN convolution may launch several): a program's runs are the event count most
    of its entry instructions share. An instruction of a loop body ran once per event."""
    seen: dict[int, Counter[int]] = {}
    for (program, name), count in zip(targets, counts, strict=True):
        if program in work and work[program].named(name)[1]:
            seen.setdefault(program, Counter())[count] += 1
    runs = {p: max(c.items(), key=lambda kv: (kv[1], kv[0]))[0] for p, c in seen.items()}
    for (program, name), count, op in zip(targets, counts, op_names, strict=True):
        module = work.get(program)
        got, entry = module.named(name) if module is not None else (None, False)
        ran = runs.get(program, count) if entry else count
        row = totals.setdefault(op, [0, 0.0, 0.0, 0.0])
        row[0] += count
        facts = (None, None, None) if got is None else (got.out_bytes, got.in_bytes,
                                                          got.float_ops)
        for i, v in enumerate(facts, 1):  # a fact unknown for one instruction: unknown
            row[i] = None if v is None or row[i] is None else row[i] + v * ran
