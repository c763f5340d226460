"""Human units for tables: microseconds and bytes, as tfprof prints them."""

from __future__ import annotations


def fmt_us(us: float) -> str:
    if us >= 1_000_000:
        return f"{us / 1_000_000:.2f}sec"
    if us >= 1_000:
        return f"{us / 1_000:.2f}ms"
    return f"{us:.0f}us" if float(us).is_integer() else f"{us:.1f}us"


def fmt_bytes(b: float) -> str:
    # Decimal units, as tfprof prints them (1KB = 1000 bytes).
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if abs(b) >= size:
            return f"{b / size:.2f}{unit}"
    return f"{b:.0f}B"


def fmt_count(n: float) -> str:
    for unit, size in (("b", 10**9), ("m", 10**6), ("k", 10**3)):
        if abs(n) >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n:.0f}"


def lacks_by_reason(lacks: dict[str, str]) -> dict[str, list[str]]:
    """Run.lacks grouped by reason, so that each reason is said once."""
    out: dict[str, list[str]] = {}
    for what, why in lacks.items():
        out.setdefault(why, []).append(what)
    return out
