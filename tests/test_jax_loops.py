"""A JAX loop as the user wrote it: its scope (no `while`/`body` in any name) and its trip
count in a field of its own (summary's `loops`), read from XLA's while loops
(sources/hlo_loops.py, analysis/loops.py). The expected counts are the programs' own:
fixtures/generate_jax_forms.py (scan over 4 rows of `wr`, fori_loop(0, 3), nn.scan length=3)
and ../shared/data/gpu-jax/capture_flax.py (nn.scan over layers=6)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runlens.analyzer.proto import hlo_pb2
from runlens.analyzer.sources.hlo_loops import loops_of
from tests.conftest import ROOT, run_cli

FORMS = ROOT / "fixtures" / "xplane" / "jax_forms"
GPU = ROOT.parent / "shared" / "data" / "gpu-jax"


def _loops(path: Path) -> dict[str, tuple[int, int]]:
    out = json.loads(run_cli(["summary", path, "--format", "json"]).output)
    return {loop["scope"]: (loop["trips"], loop["while_loops"])
            for loop in out["summary"].get("loops", [])}


def test_scanned_and_fori_loops_of_plain_jax():
    # forward and backward of each loop (grad of the step)
    assert _loops(FORMS / "plain") == {"rnn": (4, 2), "refine": (3, 2)}


def test_flax_nn_scan_over_layers_on_cpu():
    assert _loops(FORMS / "flax_lm") == {"LM/layers": (3, 2)}


@pytest.mark.parametrize("name", ["flx_scan", "flx_scan_nocb"])
def test_flax_nn_scan_over_layers_on_gpu(name):
    if not (GPU / name).is_dir():
        pytest.fail(f"{GPU / name} is missing (../shared/data/gpu-jax)")
    assert _loops(GPU / name) == {"Model/layers": (6, 2)}


def test_summary_text_says_the_loop_once():
    text = run_cli(["summary", FORMS / "flax_lm"]).output
    lines = [line for line in text.splitlines() if line.startswith("loop ")]
    assert lines == ["loop       LM/layers: 3 trips per run of its program "
                     "(2 while loops: forward and backward passes)"], text


def _module(calls: dict[int, list[int]], entry: int | None, trips: dict[int, int]
            ) -> hlo_pb2.HloModuleProto:
    """A module whose computation i holds one instruction calling calls[i]; a `while`
    with backend_config known_trip_count where trips names it."""
    m = hlo_pb2.HloModuleProto(name="m")
    if entry is not None:
        m.entry_computation_id = entry
    for cid, called in calls.items():
        c = m.computations.add(id=cid, name=f"c{cid}")
        i = c.instructions.add(name=f"i{cid}", opcode="while" if cid in trips else "call")
        i.called_computation_ids.extend(called)
        if cid in trips:
            i.backend_config = b'{"known_trip_count":{"n":"%d"}}' % trips[cid]
    return m


def test_nested_loops_multiply_and_a_cycle_ends():
    # entry 1 -> while (x2) over 2 -> while (x5) over 3; 3 calls back into 1 (malformed)
    loops = loops_of(_module({1: [2], 2: [3], 3: [1]}, 1, {1: 2, 2: 5}))
    assert {k: (v.name, v.trips) for k, v in loops.items()} == {2: ("i1", 2), 3: ("i2", 10)}


def test_a_module_without_entry_or_count_is_read_with_the_count_unknown():
    loops = loops_of(_module({7: [8], 8: []}, None, {7: 0}))
    assert {k: (v.name, v.trips) for k, v in loops.items()} == {8: ("i7", 0)}
