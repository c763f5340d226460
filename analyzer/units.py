"""Human units for text output: time in us/ms/s, bytes in B/KB/MB/GB (decimal, as tfprof
prints them), counts with k/M/G; never scientific notation. Also p-values kept to 3
significant digits for the reports' data (p_value3)."""

from __future__ import annotations

import math
from collections.abc import Mapping


def fmt_us(us: float) -> str:
    if abs(us) >= 1_000_000:
        return f"{us / 1_000_000:.2f}s"
    if abs(us) >= 1_000:
        return f"{us / 1_000:.2f}ms"
    return f"{us:.0f}us" if float(us).is_integer() else f"{us:.1f}us"


def fmt_bytes(b: float) -> str:
    # Decimal units, as tfprof prints them (1KB = 1000 bytes).
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if abs(b) >= size:
            return f"{b / size:.2f}{unit}"
    return f"{b:.0f}B"


def fmt_number(x: float) -> str:
    """A plain number with up to 4 significant digits, never in scientific notation."""
    if float(x).is_integer():
        return f"{x:.0f}"
    digits = max(0, 3 - len(str(int(abs(x)))) + (1 if abs(x) >= 1 else 0))
    text = f"{x:.{min(digits + (2 if abs(x) < 1 else 0), 6)}f}".rstrip("0").rstrip(".")
    return text or "0"


def fmt_count(n: float) -> str:
    for unit, size in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if abs(n) >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n:.0f}" if float(n).is_integer() else f"{n:.2f}"


def device_label(name: str) -> str:
    """A device name as every output spells it: the Run's canonical lower case
    (`/device:gpu:0`), whatever spelling a frame kept (device_facts keeps XSpace's
    `/device:GPU:0`)."""
    return name.lower()


def lacks_by_reason(lacks: Mapping[str, str]) -> dict[str, list[str]]:
    """Run.lacks grouped by reason, so that each reason is said once."""
    out: dict[str, list[str]] = {}
    for what, why in lacks.items():
        out.setdefault(why, []).append(what)
    return out


def p_value3(value: float | None) -> float | None:
    """A p-value to 3 significant digits (they go down to 1e-17: never round to decimals);
    None for a missing or non-finite value."""
    if value is None or not math.isfinite(float(value)):
        return None
    return float(f"{float(value):.3g}")
