"""Rows of JSON text (one object per row) from integer columns: how the timeline renders
millions of events without a Python call per event.

A row's text is a `Line`: a list of segments, each a literal string, `Int(col)` (the
row's value of an integer column, in decimal), `Text(col, texts)` (the text that the
row's value of an integer column indexes in `texts`, inserted as it is: texts are JSON
fragments, e.g. from jsonfrag.jstr) or `Lists` (a JSON list of strings "<text>[<dims>]"
per row: the outputs of an op, "float[32,784]"). The C module analyzer/_jsonrows.c renders rows
(memcpy and integer conversion, the GIL released); without it, polars renders the same
bytes (concat_str + write_csv), a few times slower.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

native: Any
try:
    from .. import _jsonrows as native  # built from analyzer/timeline/_jsonrows.c
except ImportError:  # not built: polars renders
    native = None


@dataclass(frozen=True)
class Int:
    col: str


class Texts:
    """A series of distinct texts, indexed by Text segments (null: the empty text)."""

    def __init__(self, texts: pl.Series | list[str]) -> None:
        self.series = pl.Series(texts, dtype=pl.String).fill_null("")
        self._packed: tuple[bytes, np.ndarray] | None = None

    def __len__(self) -> int:
        return self.series.len()

    def packed(self) -> tuple[bytes, np.ndarray]:
        """All texts in one UTF-8 blob, and the offsets of each (len + 1 of them)."""
        if self._packed is None:
            s = self.series
            offsets = np.zeros(s.len() + 1, np.int64)
            np.cumsum(s.str.len_bytes().cast(pl.Int64).to_numpy(), out=offsets[1:])
            blob = s.str.join("").item().encode() if s.len() else b""
            self._packed = blob, offsets
        return self._packed


@dataclass(frozen=True)
class Text:
    col: str
    texts: Texts


@dataclass(frozen=True)
class Lists:
    """Per row r, a JSON list of items first[r]..first[r+1]-1 (`first` has a value per
    row of the frame and one more). Item j is the string "<texts[item[j]]>[<dims>]", its
    dims dims[dims_first[j]:dims_first[j+1]] joined by commas, or null when item[j] < 0.
    Texts are escaped as inside a JSON string (jsonfrag.jescape)."""

    first: np.ndarray
    item: np.ndarray
    texts: Texts
    dims_first: np.ndarray
    dims: np.ndarray

    def polars(self, start: int, stop: int) -> pl.Series:
        """The rows' lists, rendered by polars (what the C renderer writes)."""
        a, b = int(self.first[start]), int(self.first[stop])
        rows = np.repeat(np.arange(stop - start), np.diff(self.first[start:stop + 1]))
        ndims = np.diff(self.dims_first[a:b + 1])
        dims = (pl.DataFrame({"j": np.repeat(np.arange(b - a), ndims),
                              "d": self.dims[self.dims_first[a]:self.dims_first[b]]})
                .group_by("j", maintain_order=True)
                .agg(pl.col("d").cast(pl.String).str.join(",")))
        item = self.item[a:b]
        items = (pl.DataFrame({"j": np.arange(b - a), "row": rows, "item": item,
                               "text": self.texts.series.gather(np.maximum(item, 0))
                               if len(self.texts) else pl.repeat("", b - a, eager=True)})
                 .join(dims, on="j", how="left", maintain_order="left")
                 .select("row", desc=pl.when(pl.col("item") >= 0).then(pl.concat_str(
                     pl.lit('"'), "text", pl.lit("["), pl.col("d").fill_null(""),
                     pl.lit(']"'))).otherwise(pl.lit("null")))
                 .group_by("row", maintain_order=True).agg(pl.col("desc").str.join(",")))
        return (pl.DataFrame({"row": np.arange(stop - start)})
                .join(items, on="row", how="left", maintain_order="left")
                .select(pl.concat_str(pl.lit("["), pl.col("desc").fill_null(""), pl.lit("]")))
                .to_series())


Line = list[str | Int | Text | Lists]


def _column(frame: pl.DataFrame, col: str) -> np.ndarray:
    return np.ascontiguousarray(frame.get_column(col).cast(pl.Int64).to_numpy(), np.int64)


class Rows:
    """The rows of `frame` rendered as `line`, in chunks."""

    def __init__(self, frame: pl.DataFrame, line: Line) -> None:
        self.frame = frame
        self.line = line
        self._segments: list[tuple[Any, ...]] | None = None

    def _native(self) -> list[tuple[Any, ...]]:
        if self._segments is None:
            segs: list[tuple[Any, ...]] = []
            for s in self.line:
                if isinstance(s, str):
                    segs.append((0, s.encode()))
                elif isinstance(s, Int):
                    segs.append((1, _column(self.frame, s.col)))
                elif isinstance(s, Text):
                    segs.append((2, _column(self.frame, s.col), *s.texts.packed()))
                else:
                    segs.append((3, *(np.ascontiguousarray(a, np.int64) for a in (
                        s.first, s.item)), *s.texts.packed(),
                        *(np.ascontiguousarray(a, np.int64) for a in (s.dims_first, s.dims))))
            self._segments = segs
        return self._segments

    def render(self, start: int, stop: int, prefix: str = "", suffix: str = "\n",
               use_native: bool = True) -> bytes:
        """The text of rows start..stop-1, each prefix + line + suffix."""
        stop = min(stop, self.frame.height)
        if stop <= start:
            return b""
        if native is not None and use_native:
            return native.render(self._native(), start, stop, prefix.encode(),
                                 suffix.encode())
        chunk = self.frame.slice(start, stop - start)
        parts: list[Any] = [pl.lit(prefix)]
        for s in self.line:
            if isinstance(s, str):
                parts.append(pl.lit(s))
            elif isinstance(s, Int):
                parts.append(pl.col(s.col).cast(pl.Int64).cast(pl.String))
            elif isinstance(s, Text):
                parts.append(pl.lit(s.texts.series.gather(chunk.get_column(s.col))))
            else:
                parts.append(pl.lit(s.polars(start, stop)))
        parts.append(pl.lit(suffix))
        out = io.BytesIO()
        chunk.select(pl.concat_str(parts).alias("l")).write_csv(
            out, include_header=False, quote_style="never", line_terminator="")
        return out.getvalue()

    def chunks(self, rows: int, prefix: str = ",", suffix: str = "\n",
               first_prefix: str | None = None) -> Iterator[tuple[int, bytes]]:
        """(rows, text) per chunk of `rows` rows; the first row gets `first_prefix` when
        given."""
        start = 0
        if first_prefix is not None and self.frame.height:
            yield 1, self.render(0, 1, first_prefix, suffix)
            start = 1
        for at in range(start, self.frame.height, rows):
            stop = min(at + rows, self.frame.height)
            yield stop - at, self.render(at, stop, prefix, suffix)
