"""analyzer/schema.py names every frame's columns once; the C decoder keeps its own column
order but says it (`_stepstats.COLUMNS`), and here the two are held to agree."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from runlens.analyzer import cache, ingest, schema
from runlens.analyzer.model import Run

# The decoder's tables -> the frame each becomes (string columns are u4 codes there).
DECODED = {"nodes": schema.NODE_SCHEMA, "outputs": schema.OUTPUT_SCHEMA,
           "memory": schema.MEMORY_SCHEMA, "allocations": schema.ALLOCATION_SCHEMA,
           "threads": schema.THREAD_SCHEMA}


def _numpy_dtype(dtype: Any) -> str:
    """What the decoder writes for a column of this polars type (strings: codes)."""
    if dtype == pl.String:
        return "u4"
    return {pl.Int64: "i8", pl.Int32: "i4", pl.UInt32: "u4", pl.UInt64: "u8"}[dtype]


@pytest.mark.skipif(not ingest.native_decoder_available(), reason="C decoder not built here")
@pytest.mark.parametrize("table", list(DECODED))
def test_decoder_columns_are_the_schema(table: str) -> None:
    columns = ingest._stepstats.COLUMNS[table]  # type: ignore[union-attr]
    names = [name for name, _ in columns]
    assert sorted(names) == sorted(DECODED[table])  # the same columns, any order
    for name, dtype in columns:
        assert dtype == _numpy_dtype(DECODED[table][name]), (table, name)


@pytest.mark.skipif(not ingest.native_decoder_available(), reason="C decoder not built here")
def test_decoder_finish_gives_columns_in_that_order() -> None:
    finished: dict[str, Any] = dict(ingest._stepstats.Decoder().finish())  # type: ignore[union-attr]
    for table, columns in ingest._stepstats.COLUMNS.items():  # type: ignore[union-attr]
        assert [(name, dtype) for name, (dtype, _) in finished[table].items()] == list(columns)


def test_run_and_cache_frames_come_from_the_schema() -> None:
    assert Run.FRAMES == schema.RUN_FRAMES
    assert cache.FRAMES[: len(Run.FRAMES)] == Run.FRAMES
    assert set(cache.FRAMES) == {*schema.RUN_FRAMES, "lacks"}  # products: analyzer.products


def test_node_and_output_columns_cover_the_numbers_and_the_keys() -> None:
    numbers = [c for c in schema.NODE_SCHEMA if c != "key_id"]
    assert [c for c in schema.NODE_COLUMNS if c in numbers] == numbers
    assert set(schema.NODE_COLUMNS) == {*numbers, *schema.KEY_COLUMNS}
    outputs = [c for c in schema.OUTPUT_SCHEMA if c != "out_key"]
    assert [c for c in schema.OUTPUT_COLUMNS if c in outputs] == outputs
    assert set(schema.OUTPUT_COLUMNS) == {*outputs, *schema.OUTPUT_KEY_COLUMNS}
