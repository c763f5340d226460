"""The C StepStats decoder gives exactly the frames of protobuf's parse + walk, or declines.

protobuf is the reference (analyzer/ingest/stepwalk.py `walk_step_bytes`): on every fixture, on
hand-built encodings TensorFlow does not write (fields out of order, repeated map keys,
unknown fields, old traces without nanos), and on thousands of corrupted step files the
decoder either declines (ingest then asks protobuf) or agrees with protobuf row for row.
"""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from runlens.analyzer import ingest
from runlens.analyzer.errors import InputFileError
from runlens.analyzer.proto import step_stats_pb2 as ss
from runlens.analyzer.rundir import find_runs
from tests.conftest import FIXTURES
from tests.wire_bytes import delimited

TABLES = ("nodes", "outputs", "memory", "allocations", "threads")


def _native(stats: bytes, step: int = 7) -> ingest.StepFrames | None:
    """The decoder's frames; None when it declines or finds no DeviceStepStats (which
    ingest reports as "no step_stats", as it does for protobuf's parse)."""
    decoder = ingest._stepstats.Decoder()  # type: ignore[union-attr]
    devices = decoder.add(stats, step)
    if not devices:
        return None
    return ingest.decoded_frames(decoder.finish())


def _keyed(rows: pl.DataFrame, keys: pl.DataFrame, column: str) -> pl.DataFrame:
    """Rows with their key's values (the two readers may number keys apart)."""
    assert not keys.is_duplicated().any()
    key_id = rows.get_column(column)
    assert set(key_id.unique().to_list()) == set(range(keys.height))
    return rows.drop(column).hstack(keys.select(pl.all().gather(key_id)))


def _with_keys(frames: ingest.StepFrames) -> pl.DataFrame:
    return _keyed(frames.nodes, frames.keys, "key_id")


def _outputs(frames: ingest.StepFrames) -> pl.DataFrame:
    return _keyed(frames.outputs, frames.output_keys, "out_key")


def _assert_same(ours: ingest.StepFrames, ref: ingest.StepFrames) -> None:
    for name in TABLES:
        a, b = getattr(ours, name), getattr(ref, name)
        if name == "nodes":
            a, b = _with_keys(ours), _with_keys(ref)
        elif name == "outputs":
            a, b = _outputs(ours), _outputs(ref)
        if name == "threads":  # protobuf iterates a map in hash order
            a, b = a.sort("step", "lane", "thread_id"), b.sort("step", "lane", "thread_id")
        assert_frame_equal(a, b, check_exact=True)


def test_the_decoder_is_built():
    assert ingest.native_decoder_available(), (
        "analyzer/_stepstats.c was not compiled: install gcc and the Python headers, then "
        "reinstall (ingest still works without it, ~20x slower)")


@pytest.fixture(params=sorted(p.name for p in FIXTURES.iterdir() if (p / "steps").is_dir()))
def run_dir(request):
    return find_runs(FIXTURES / request.param)[0]


def test_same_frames_as_protobuf_on_every_fixture(run_dir):
    items = [(p, s, None) for s, p in run_dir.steps.items()]
    native = ingest.ingest_step_files(items, native=True)
    ref = ingest.ingest_step_files(items, native=False)
    assert native.errors == ref.errors == []
    assert native.graphs.keys() == ref.graphs.keys()
    assert native.frames is not None and ref.frames is not None
    assert native.frames.nodes.height > 0
    _assert_same(native.frames, ref.frames)


def _node(name: str, **kw) -> ss.NodeExecStats:
    return ss.NodeExecStats(node_name=name, timeline_label=f"{name} = Op()", **kw)


def test_encodings_tensorflow_does_not_write():
    """Fields out of order, last-wins scalars and map keys, unknown fields, no nanos."""
    n1 = _node("a", all_start_micros=10, op_end_rel_micros=-3, thread_id=2**32 - 1,
               scheduled_micros=9)
    n1.memory.add(total_bytes=5, peak_bytes=-1, live_bytes=2, allocator_bytes_in_use=40)
    out = n1.output.add(slot=-1)
    out.tensor_description.dtype = 19
    out.tensor_description.shape.dim.add(size=-1, name="batch")
    out.tensor_description.shape.dim.add(size=3)
    out.tensor_description.allocation_description.requested_bytes = 12
    out.tensor_description.allocation_description.allocator_name = "cpu"
    out.tensor_description.allocation_description.ptr = 2**64 - 1
    n1.output.add(slot=1)  # no tensor description at all
    n1.memory_stats.temp_memory_size = 3
    n1.memory_stats.persistent_tensor_alloc_ids.extend([1, 2, 3])
    dev = ss.DeviceStepStats(node_stats=[n1, _node("b", all_start_nanos=5)])
    dev.thread_names[7] = "first"
    # The device name and a second value for thread 7 come after the nodes; an allocator
    # record comes before its allocator's name; an unknown field (99) is skipped.
    tail = ss.DeviceStepStats(device="/job:w/device:CPU:0")
    tail.thread_names[7] = "second"
    tail.thread_names[8] = "other"
    record_first = ss.AllocatorMemoryUsed()
    record_first.allocation_records.add(alloc_micros=11, alloc_bytes=-4)
    late = _node("c", all_start_micros=1)
    late_bytes = (late.SerializeToString() + record_first_field(record_first)
                  + b"\x98\x06\x01")  # field 99, varint 1
    dev_bytes = (dev.SerializeToString() + delimited(2, late_bytes)
                 + tail.SerializeToString())
    stats = delimited(1, dev_bytes)
    stats += ss.StepStats(dev_stats=[ss.DeviceStepStats(device="/gpu:0/stream:all")]
                          ).SerializeToString()
    ours, ref = _native(stats), ingest.walk_step_bytes(stats, 7, "test")
    assert ours is not None
    _assert_same(ours, ref)
    nodes = _with_keys(ours)
    assert nodes["lane"].to_list() == ["/job:w/device:CPU:0"] * 3
    assert nodes["thread_id"][0] == 2**32 - 1
    assert nodes["start_ns"].to_list() == [10_000, 5, 1000]  # micros x 1000 without nanos
    assert dict(ours.threads.select("thread_id", "name").iter_rows()) == {
        7: "second", 8: "other"}
    assert _outputs(ours)["shape"].to_list() == [[-1, 3], []]
    assert ours.allocations["allocator_name"].to_list() == ["cpu0"]


def test_dtype_numbers_tensorflow_does_not_name_show_as_numbers():
    node = _node("a", all_start_micros=1)
    for dtype in (1, 250, 101):  # float, unknown, float_ref
        node.output.add(slot=0).tensor_description.dtype = dtype
    stats = ss.StepStats(dev_stats=[ss.DeviceStepStats(device="/cpu:0", node_stats=[node])]
                         ).SerializeToString()
    ours, ref = _native(stats), ingest.walk_step_bytes(stats, 7, "test")
    assert ours is not None
    _assert_same(ours, ref)
    assert _outputs(ours)["dtype"].to_list() == ["float", "250", "float_ref"]


def record_first_field(mem: ss.AllocatorMemoryUsed) -> bytes:
    """A `memory` field of NodeExecStats whose allocator name follows its records."""
    body = mem.SerializeToString() + b"\x0a\x04cpu0"
    return delimited(6, body)


def _mutations(data: bytes, rng: random.Random, count: int):
    for _ in range(count):
        b = bytearray(data)
        kind = rng.randrange(4)
        if kind == 0:  # flip bytes
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        elif kind == 1:  # truncate
            del b[rng.randrange(len(b)):]
        elif kind == 2:  # insert bytes
            i = rng.randrange(len(b))
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 3)))
        else:  # overwrite a byte with a likely key or length
            b[rng.randrange(len(b))] = rng.choice([0x0A, 0x12, 0x1A, 0x80, 0xFF, 0x00, 0x02])
        yield bytes(b)


@pytest.mark.parametrize("fixture", ["plain_session", "cnn", "gpu_mnist"])
def test_corrupted_step_files_decline_or_agree_with_protobuf(fixture):
    run = find_runs(FIXTURES / fixture)[0]
    raw = Path(next(iter(run.steps.values()))).read_bytes()
    stats, _ = ingest.split_run_metadata(raw)
    rng = random.Random(fixture)
    agreed = declined = rejected_by_both = 0
    for mutated in _mutations(bytes(stats), rng, 1000):
        ours = _native(mutated)
        try:
            ref = ingest.walk_step_bytes(mutated, 7, "fuzz")
        except InputFileError:
            ref = None
        if ours is None:
            declined += 1
            rejected_by_both += ref is None
            continue
        assert ref is not None, "the decoder accepted bytes protobuf rejects"
        _assert_same(ours, ref)
        agreed += 1
    # Both outcomes occur often (here about 20% agree, 80% are rejected by both), so the
    # test exercises both.
    assert agreed > 100 and rejected_by_both > 100


def test_a_file_the_decoder_declines_is_read_by_protobuf(tmp_path):
    """A valid encoding outside the decoder's subset (a message field given twice) loads
    through protobuf, in step order with the others."""
    run = find_runs(FIXTURES / "plain_session")[0]
    items = [(p, s, None) for s, p in run.steps.items()]
    first_path, first_step, _ = items[0]
    raw = Path(first_path).read_bytes()
    stats, _ = ingest.split_run_metadata(raw)
    parsed = ss.StepStats.FromString(bytes(stats))
    node = parsed.dev_stats[0].node_stats[0]
    node.memory_stats.temp_memory_size = 1
    dev_bytes = parsed.dev_stats[0].SerializeToString()
    # The same node again with memory_stats twice on the wire (protobuf merges them).
    twice = (node.SerializeToString()
             + ss.NodeExecStats(memory_stats=ss.MemoryStats(persistent_memory_size=2))
             .SerializeToString())
    dev_bytes += delimited(2, twice)
    new_stats = delimited(1, dev_bytes)
    assert _native(new_stats) is None  # declined
    odd = tmp_path / "step-odd.pb"
    odd.write_bytes(delimited(1, new_stats))
    mixed = [(odd, first_step, None), *items[1:]]
    native = ingest.ingest_step_files(mixed, native=True)
    ref = ingest.ingest_step_files(mixed, native=False)
    assert native.errors == ref.errors == []
    assert native.frames is not None and ref.frames is not None
    _assert_same(native.frames, ref.frames)
    merged = ref.frames.nodes.filter(pl.col("step") == first_step).row(-1, named=True)
    assert (merged["temp_bytes"], merged["persistent_bytes"]) == (1, 2)
