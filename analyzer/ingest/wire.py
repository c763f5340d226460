"""RunMetadata bytes -> StepStats bytes and partition graphs, split without parsing;
what decoding a file's bytes can raise, and how it is said in one line."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from google.protobuf.message import DecodeError

try:  # the C decoder (analyzer/_stepstats.c); optional, built at install where possible
    from .. import _stepstats
except ImportError:  # pragma: no cover - depends on the install
    _stepstats = None  # type: ignore[assignment]

Buffer = bytes | memoryview

# What decoding a file's bytes can raise besides InputFileError: the file's problem, never
# ours (protobuf's DecodeError; bad encodings; depth, size and number limits).
INPUT_ERRORS = (DecodeError, ValueError, OverflowError, RecursionError, MemoryError)
# ... and protobuf's parse, which may raise RuntimeError (e.g. its recursion limit).
PARSE_ERRORS = (RuntimeError, *INPUT_ERRORS)
# protobuf refuses messages of 2 GiB or more: no TensorFlow wrote a bigger step file.
MAX_MESSAGE_BYTES = 2**31 - 1

# RunMetadata field numbers (analyzer/proto/config.proto).
_STEP_STATS = 1
_PARTITION_GRAPHS = 3
_FUNCTION_GRAPHS = 4
# RunMetadata.FunctionGraphs field numbers.
_FG_PARTITION_GRAPHS = 1


def varint(buf: Buffer, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def split_fields(buf: Buffer) -> Iterable[tuple[int, Buffer]]:
    """Top-level length-delimited fields of a message, as (field number, bytes), unparsed."""
    for number, start, size in field_spans(buf):
        yield number, buf[start : start + size]


def field_spans(buf: Any) -> Iterator[tuple[int, int, int]]:
    """(field number, start, size) of each top-level length-delimited field of a message
    in `buf` (any buffer: bytes, memoryview, mmap), unparsed and uncopied.

    Raises DecodeError on malformed or truncated input, like protobuf does (field number
    0 at once: a file of zeros is rejected at its first byte, not walked to its end).
    """
    pos, end = 0, len(buf)
    try:
        while pos < end:
            key, pos = varint(buf, pos)
            number, wire = key >> 3, key & 7
            if number == 0:
                raise DecodeError("field number 0")
            if wire == 2:
                size, pos = varint(buf, pos)
                if pos + size > end:
                    raise DecodeError("truncated field")
                yield number, pos, size
                pos += size
            elif wire == 0:
                _, pos = varint(buf, pos)
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            else:
                raise DecodeError(f"unsupported wire type {wire}")
        if pos != end:
            raise DecodeError("truncated message")
    except IndexError:
        raise DecodeError("truncated message") from None


def split_run_metadata(raw: Buffer) -> tuple[Buffer, list[Buffer]]:
    """RunMetadata bytes -> (StepStats bytes, distinct non-empty serialized partition
    GraphDefs), as slices of `raw` (zero-copy when `raw` is a memoryview).

    Function graphs' partition graphs are included: they name nodes that ran inside
    functions. Empty occurrences add nothing and are dropped, and a graph repeated within
    the file is kept once, so that a file of empty or repeated fields costs time linear in
    its size and no memory (the C splitter: ~1 GB/s; this module's loop, where it is not
    built, ~50x slower).
    """
    parts: list[Buffer]
    graphs: list[Buffer]
    if _stepstats is not None:
        view = memoryview(raw)
        try:
            stat_spans, graph_spans = _stepstats.split_run_metadata(view)
        except ValueError as e:
            raise DecodeError(str(e)) from None
        parts = [view[a:b] for a, b in stat_spans]
        graphs = [view[a:b] for a, b in graph_spans]
    else:
        parts, graphs = [], []
        distinct: set[bytes] = set()
        for number, payload in split_fields(raw):
            if not len(payload):
                continue
            if number == _STEP_STATS:
                parts.append(payload)
                continue
            if number == _PARTITION_GRAPHS:
                found = [payload]
            elif number == _FUNCTION_GRAPHS:
                found = [p for n, p in split_fields(payload)
                         if n == _FG_PARTITION_GRAPHS and len(p)]
            else:
                continue
            for g in found:
                if bytes(g) not in distinct:
                    distinct.add(bytes(g))
                    graphs.append(g)
    # Repeated occurrences of a message field merge, as their concatenation parses.
    stats = parts[0] if len(parts) == 1 else b"".join(parts)
    return stats, graphs



def reason(e: BaseException) -> str:
    """An exception as a short reason on one line."""
    text = " ".join(str(e).split()) or type(e).__name__
    if isinstance(e, RecursionError):
        text = "nested too deeply"
    elif isinstance(e, MemoryError):
        text = "too large to decode here"
    elif not isinstance(e, DecodeError):
        text = f"{type(e).__name__}: {text}"
    return text[:300]

