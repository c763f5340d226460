"""JSON traces (tf.timeline files, the trace viewer's `.trace.json.gz`) read and parsed
within bounds, every failure the file's one-line problem (InputFileError):

- read as a regular file of at most MAX_TEXT bytes (analyzer.readfile); a `.gz` is
  decompressed at most to MAX_TEXT, and to no more than RATIO times its size once past
  RATIO_FREE (real traces compress 10-50x; a gzip bomb of zeros ~1000x);
- refused before parsing when its objects would take more than 1 GiB and more than
  AMPLIFY times its text (`_check_memory`: real traces 3-7x, crafted ones up to 26x);
- parsed by orjson (2-3x faster), which refuses what json would turn into trouble later:
  nesting over 1024, lone surrogates, numbers beyond a double; json's fallback (NaN,
  UTF-16 files) is bounded by the recursion limit and checked for lone surrogates, which
  would fail when the strings are stored (polars, protobuf), far from the file's name.

What the values mean is the reader's job: `ints` turns a column of numbers into ints
within the schema's range, or says which field and value are not.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from pathlib import Path
from typing import Any

try:  # 2-3x faster than json on traces (benchmarks/README.md "Sources")
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover - orjson is a dependency; json does the same work
    _fast_loads = json.loads  # type: ignore[assignment]

from .. import readfile
from ..errors import InputFileError
from . import damage

MAX_TEXT = 1 << 30  # bytes of JSON: parsed, ~5-10x that in memory
RATIO = 200  # decompressed / compressed, at most, past RATIO_FREE
RATIO_FREE = 256 << 20
MEMORY_FREE = 1 << 30  # bytes of parsed objects any JSON may take
AMPLIFY = 10  # parsed / text, at most, beyond MEMORY_FREE


def load(path: Path, what: str) -> Any:
    """The parsed JSON of `path` (gzip-compressed when its name ends in .gz);
    InputFileError "<path>: not <what> (<why>)" when it cannot be."""
    raw = readfile.read_bytes(path, MAX_TEXT, what="JSON trace")
    name = readfile.shown(path)
    try:
        text = _gunzip(raw) if path.name.lower().endswith(".gz") else raw
        return parse(text)
    except (ValueError, EOFError, OSError, zlib.error, RecursionError, MemoryError) as e:
        # OSError: BadGzipFile; ValueError: json's, orjson's and UnicodeError
        reason = "nested too deeply" if isinstance(e, RecursionError) else (
            " ".join(str(e).split())[:200] or type(e).__name__)
        raise InputFileError(f"{name}: not {what} ({reason})"
                             + damage.hint(raw[:65536])) from None


def _gunzip(raw: bytes) -> bytes:
    cap = min(MAX_TEXT, max(RATIO_FREE, RATIO * len(raw)))
    with gzip.GzipFile(fileobj=io.BytesIO(raw)) as f:
        text = f.read(cap + 1)
    if len(text) > cap:
        raise ValueError(f"it decompresses to more than {cap:,} bytes from {len(raw):,}: "
                         "not a trace runlens reads (a real one compresses 10-50x)")
    return text


def _check_memory(text: bytes) -> None:
    """Refuse JSON whose objects would take more than MEMORY_FREE and more than AMPLIFY
    times its text: parsed, real traces take 3-4x their text (estimated below as
    3.5-6.7x), while `{},` or `"ab",` repeated take 14-23x (a 256 MiB bomb: ~5 GB). The
    estimate (~70 bytes per object, list and string, 8 per item) costs three passes over
    the text, made only when the text could reach MEMORY_FREE."""
    if len(text) * 26 <= MEMORY_FREE:
        return
    estimate = (70 * (text.count(b"{") + text.count(b"[") + text.count(b'"') // 2)
                + 8 * text.count(b","))
    if estimate > max(MEMORY_FREE, AMPLIFY * len(text)):
        raise ValueError(f"its {len(text):,} bytes would take ~{estimate / 2**30:.1f} GiB "
                         f"parsed ({estimate / len(text):.0f}x; a trace takes 3-7x): not a "
                         "trace runlens reads")


def parse(text: bytes) -> Any:
    """orjson, else json (NaN, UTF-16), whose strings are then checked for lone
    surrogates (bad UTF-16 escapes orjson refuses). First, a memory estimate."""
    _check_memory(text)
    try:
        return _fast_loads(text)
    except ValueError:
        pass
    data = json.loads(text)
    try:  # one pass over the document; only for files orjson refused
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a string holds a lone surrogate (U+D800-U+DFFF, as an escape "
                         "or as bytes): not valid Unicode") from None
    return data


def ints(values: list[Any], field: str, lo: int, hi: int) -> list[int]:
    """`values` as ints (as int() takes them: floats are truncated), each within
    lo..hi; ValueError naming `field` and the first value that is not."""
    try:
        out = list(map(int, values))
    except (TypeError, ValueError, OverflowError):
        bad = next(v for v in values if not _is_int_like(v))
        raise ValueError(f"{field} {_short(bad)} is not a number") from None
    if out and (min(out) < lo or max(out) > hi):
        bad = next(v for v, i in zip(values, out, strict=True) if not lo <= i <= hi)
        raise ValueError(f"{field} {_short(bad)} is out of range ({lo:,}..{hi:,})")
    return out


def strings(values: list[Any], field: str) -> list[str]:
    """`values` if all are strings; ValueError naming `field` and the first that is not."""
    if not all(type(v) is str for v in values):
        bad = next(v for v in values if type(v) is not str)
        raise ValueError(f"{field} {_short(bad)} is not a string")
    return values


def _is_int_like(v: Any) -> bool:
    try:
        int(v)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
