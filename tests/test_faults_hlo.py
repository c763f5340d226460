"""Malformed HLO metadata of an XSpace profile (issue 29 point 4; docs/robustness.md): a
module without its entry computation, computations that call themselves, shapes beyond
int64 or with negative dimensions, a convolution window no real one has, ids that name
nothing, 20,000 nested fusions. Each is analysed with exactly the facts it breaks
unknown (null in `hlo_work`) and the others known, never exit 3. Modules are built with
the protobuf classes (tests/hlo_modules.py); at length: `tests/fuzz_sources.py --hlo`."""

from __future__ import annotations

import pytest

from runlens.analyzer.load import load_run
from tests import hlo_modules as hm
from tests.conftest import run_cli

D = 64  # hlo_modules.module's dots are D x D, f32
BYTES, FLOPS = D * D * 4, 2.0 * D**3
KNOWN = (BYTES, BYTES, FLOPS)
# Per case, the (out bytes, in bytes, float ops) of blocks 0, 1 and 2 (None: unknown).
EXPECTED = {
    "no-entry": [KNOWN, KNOWN, KNOWN],
    "self-call": [(BYTES, BYTES, None), KNOWN, KNOWN],
    "cycle": [KNOWN, (BYTES, BYTES, None), (BYTES, BYTES, None)],
    "overflow": [(None, BYTES, None), (BYTES, None, FLOPS), KNOWN],
    "negative": [KNOWN, (None, BYTES, None), (BYTES, None, FLOPS)],
    "huge-conv": [KNOWN, KNOWN, (BYTES, BYTES, None)],
    "dangling-ids": [KNOWN, KNOWN, KNOWN],
    "deep": [KNOWN, KNOWN, KNOWN],
}


@pytest.mark.parametrize("case", hm.CASES)
def test_malformed_hlo_leaves_its_facts_unknown_never_exit_3(tmp_path, case):
    """huge-conv exited 3 (MemoryError: an 8 TiB array of kernel positions); cycles and
    the deep chain were cut at depth 32 (a wrong count, not an unknown one); negative
    dimensions gave negative float ops."""
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(hm.space(hm.malformed(case)))
    run = load_run(path, use_cache=False)
    rows = run.hlo_work.sort("name").select("execs", "out_bytes", "in_bytes",
                                            "float_ops").rows()
    assert [r[0] for r in rows] == [1, 1, 1]  # every kernel placed on its instruction
    assert [r[1:] for r in rows] == EXPECTED[case]
    run_cli(["ops", "--no-cache", path])


def test_a_valid_module_gives_every_fact():
    """The builder's own numbers against the rule (hlo_work's docstring), so that the
    cases above test the defects, not the builder."""
    from runlens.analyzer.sources.hlo_work import ModuleWork

    m = hm.module(4, d=D)
    work = ModuleWork(m)
    for name in hm.fusion_names(m):
        got, entry = work.named(name)
        assert entry and got is not None
        assert (got.out_bytes, got.in_bytes, got.float_ops) == KNOWN


def test_unreadable_hlo_bytes_are_a_warning_and_the_kernels_stay(tmp_path):
    """An Hlo Proto stat that is not an HloProto: one warning naming the program, the
    kernels read without HLO names."""
    m = hm.module(3)
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(hm.space(m, hlo_proto=b"\x0a\x05\x0a\xff"))
    run = load_run(path, use_cache=False)
    assert [w for w in run.warnings if "HLO metadata" in w and "unreadable" in w]
    assert run.executions.height == 3
    assert run.hlo_work.height == 0
