"""The placement rules of analyzer/sources/xla_attribution.py on small HLO modules built
with the vendored schema (the real captures are in tests/test_xla_attribution.py): cases
the H200 captures do not hold (a buffer launch straddling two runs of its module, events
of no module, a launch too big to align)."""

from __future__ import annotations

import numpy as np

from runlens.analyzer.proto import hlo_pb2
from runlens.analyzer.sources import xla_align
from runlens.analyzer.sources.xla_attribution import (
    HLO_OP,
    NAME,
    NONE,
    SCHEDULE,
    Events,
    Module,
    attribute,
)

# (name, opcode): a block of two reused fusions and a cuBLAS call, twice, then a copy.
INSTRUCTIONS = [("p", "parameter"), ("fusion.1", "fusion"), ("cublas.1", "custom-call"),
                ("fusion.2", "fusion"), ("fusion.3", "fusion"), ("cublas.2", "custom-call"),
                ("fusion.4", "fusion"), ("copy.1", "copy"), ("t", "tuple")]


def module() -> Module:
    m = hlo_pb2.HloModuleProto(name="m", id=7, entry_computation_id=1)
    comp = m.computations.add(name="main", id=1)
    for i, (name, opcode) in enumerate(INSTRUCTIONS):
        comp.instructions.add(name=name, opcode=opcode, id=10 + i)
    m.schedule.sequences[1].instruction_ids.extend(range(10, 10 + len(INSTRUCTIONS)))
    return Module(7, "m", {n for n, _ in INSTRUCTIONS}, m)


def events(rows: list[tuple[str, str, int, int]]) -> Events:
    """(kernel, hlo_op, program, correlation id) per event, in time order."""
    kernels = sorted({r[0] for r in rows})
    ops = [""] + sorted({r[1] for r in rows} - {""})
    return Events(kernel=np.array([kernels.index(r[0]) for r in rows]), kernels=kernels,
                  hlo_op=np.array([ops.index(r[1]) for r in rows]), hlo_ops=ops,
                  program=np.array([r[2] for r in rows]), corr=np.array([r[3] for r in rows]),
                  start=np.arange(len(rows)) * 10)


def placed(rows: list[tuple[str, str, int, int]]) -> list[tuple[str, int]]:
    target, how, targets = attribute(events(rows), {7: module()})
    return [(targets[t][1] if t >= 0 else "-", int(h)) for t, h in zip(target, how,
                                                                        strict=True)]


def test_one_buffer_launch_reused_names_and_library_calls() -> None:
    """The second block reuses the first's kernels (fusion_1, fusion_2); cuBLAS runs a
    memset and a gemm per call: all placed by position."""
    rows = [("fusion_1", "command_buffer_1", 7, 1), ("Memset 0", "command_buffer_1", 7, 1),
            ("sm90_gemm", "command_buffer_1", 7, 1), ("fusion_2", "command_buffer_1", 7, 1),
            ("fusion_1", "command_buffer_1", 7, 1), ("sm90_gemm", "command_buffer_1", 7, 1),
            ("fusion_2", "command_buffer_1", 7, 1), ("copy_1", "copy.1", 7, 2)]
    assert placed(rows) == [("fusion.1", NAME), ("cublas.1", SCHEDULE),
                            ("cublas.1", SCHEDULE), ("fusion.2", NAME),
                            ("fusion.3", SCHEDULE), ("cublas.2", SCHEDULE),
                            ("fusion.4", SCHEDULE), ("copy.1", HLO_OP)]


def test_a_launch_between_two_runs_of_the_module() -> None:
    """copy.1 (end of one run) then the next run's first buffer: the window wraps to the
    module's start, so fusion_1 is the next run's fusion.1, not a later block's."""
    rows = [("copy_1", "copy.1", 7, 1), ("fusion_1", "command_buffer_1", 7, 2),
            ("sm90_gemm", "command_buffer_1", 7, 2), ("fusion_2", "command_buffer_1", 7, 2),
            ("fusion_1", "", 7, 3)]
    assert placed(rows)[:4] == [("copy.1", HLO_OP), ("fusion.1", NAME),
                                ("cublas.1", SCHEDULE), ("fusion.2", NAME)]


def test_events_of_no_known_module_stay_unattributed() -> None:
    rows = [("fusion_1", "fusion.1", 99, 1), ("mystery", "command_buffer_1", 99, 2),
            ("memcpy", "", -1, 3)]
    assert [h for _, h in placed(rows)] == [NONE, NONE, NONE]


def test_a_launch_too_big_to_align_is_placed_by_name(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("runlens.analyzer.sources.xla_attribution.MAX_CELLS", 1)
    rows = [("fusion_1", "command_buffer_1", 7, 1), ("sm90_gemm", "command_buffer_1", 7, 1)]
    assert placed(rows) == [("fusion.1", NAME), ("-", NONE)]


def test_align_prefers_the_earliest_launch_on_ties() -> None:
    score = np.array([[xla_align.BASE, xla_align.BASE]])
    assert xla_align.align(score).tolist() == [0]
