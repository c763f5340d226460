"""JSON text as polars expressions: how the timeline renders millions of events without a
Python call per event. Strings are escaped exactly as JSON requires, in one pass."""

from __future__ import annotations

import polars as pl

_SPECIAL = ["\\", '"'] + [chr(i) for i in range(32)]
_ESCAPED = ["\\\\", '\\"'] + [
    {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c, f"\\u{ord(c):04x}")
    for c in _SPECIAL[2:]
]


def jescape(e: pl.Expr) -> pl.Expr:
    """A string column escaped as inside a JSON string literal (no quotes); null stays."""
    return e.cast(pl.String).str.replace_many(_SPECIAL, _ESCAPED)


def jstr(e: pl.Expr) -> pl.Expr:
    """A string column as JSON string literals (quoted, escaped); null as null."""
    return pl.concat_str(pl.lit('"'), jescape(e), pl.lit('"')).fill_null(pl.lit("null"))


def jlist(e: pl.Expr) -> pl.Expr:
    """A list-of-strings column as JSON arrays; null as []."""
    inner = e.list.eval(jstr(pl.element())).list.join(",")
    return pl.concat_str(pl.lit("["), inner, pl.lit("]")).fill_null(pl.lit("[]"))
