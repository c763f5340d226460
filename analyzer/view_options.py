"""The views' options: tfprof's (options.md) with its defaults, and the four of ours
whose defaults differ from tfprof on purpose (docs/views.md). One place for the option
names, their checks and `ViewOptions.tfprof()`, which reproduces tfprof's rows."""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields, replace
from typing import Any

import polars as pl

from analyzer.errors import RunlensError

ORDER_BY = {
    "name": "name", "bytes": "requested_bytes", "peak_bytes": "peak_bytes",
    "residual_bytes": "residual_bytes", "output_bytes": "output_bytes", "micros": "micros",
    "accelerator_micros": "accelerator_micros", "cpu_micros": "cpu_micros",
    "params": "params", "float_ops": "float_ops", "occurrence": "occurrence",
}
SELECTABLE = ["bytes", "peak_bytes", "residual_bytes", "output_bytes", "micros",
              "accelerator_micros", "cpu_micros", "params", "float_ops", "occurrence",
              "tensor_value", "device", "op_types", "input_shapes"]
# min_* option -> the metric it bounds (tfprof compares totals in tree views).
THRESHOLDS = {
    "min_bytes": "requested_bytes", "min_peak_bytes": "peak_bytes",
    "min_residual_bytes": "residual_bytes", "min_output_bytes": "output_bytes",
    "min_micros": "micros", "min_accelerator_micros": "accelerator_micros",
    "min_cpu_micros": "cpu_micros", "min_params": "params", "min_float_ops": "float_ops",
    "min_occurrence": "occurrence",
}


class ViewOptionError(RunlensError):
    """An option value that cannot be used (bad regex, unknown order_by, ...)."""


OP_TYPES = ("kernel", "graph")


@dataclass(frozen=True)
class ViewOptions:
    """tfprof's options (options.md), with its defaults, and four of ours whose defaults
    differ from tfprof on purpose (docs/views.md): `op_types` "kernel" groups and accounts
    nodes by the kernel that ran (tfprof: "graph", the op type in graph.pb), `zero_rows`
    False hides rows whose numbers are all zero, `max_depth` counts from the first visible
    level unless `depth_from_root` (tfprof counts its hidden root), and the code view
    hides library frames unless `library_frames`; step -1 averages over the steps
    analyzer.stepselect keeps (warm-up and outliers left out) unless `include_warmup`.
    `ViewOptions.tfprof(...)` sets all five to tfprof's behaviour. Regexes must match a
    whole name."""

    max_depth: int = 100
    min_bytes: int = 0
    min_peak_bytes: int = 0
    min_residual_bytes: int = 0
    min_output_bytes: int = 0
    min_micros: int = 0
    min_accelerator_micros: int = 0
    min_cpu_micros: int = 0
    min_params: int = 0
    min_float_ops: int = 0
    min_occurrence: int = 0
    step: int = -1
    order_by: str = "name"
    account_type_regexes: tuple[str, ...] = (".*",)
    start_name_regexes: tuple[str, ...] = (".*",)
    trim_name_regexes: tuple[str, ...] = ()
    show_name_regexes: tuple[str, ...] = (".*",)
    hide_name_regexes: tuple[str, ...] = ()
    account_displayed_op_only: bool = False
    select: tuple[str, ...] = ("micros",)
    op_types: str = "kernel"
    zero_rows: bool = False
    depth_from_root: bool = False
    library_frames: bool = False
    # Which steps step -1 averages (analyzer.stepselect): warm-up and outlier steps are
    # left out unless include_warmup (tfprof averages over every step); first/last_step
    # restrict to a range (--steps A:B).
    include_warmup: bool = False
    first_step: int | None = None
    last_step: int | None = None

    @classmethod
    def tfprof(cls, **options: Any) -> ViewOptions:
        """Options that reproduce tfprof's rows (the parity tests use these): tfprof's
        grouping, zero rows, depth and frames, averaged over every traced step."""
        return cls(**{"op_types": "graph", "zero_rows": True, "depth_from_root": True,
                      "library_frames": True, "include_warmup": True, **options})

    def __post_init__(self) -> None:
        if self.op_types not in OP_TYPES:
            raise ViewOptionError(
                f"op_types {self.op_types!r}: expected one of {', '.join(OP_TYPES)}")
        if self.order_by not in ORDER_BY:
            raise ViewOptionError(
                f"order_by {self.order_by!r}: expected one of {', '.join(ORDER_BY)}")
        bad = [s for s in self.select if s not in SELECTABLE]
        if bad:
            raise ViewOptionError(f"select {bad[0]!r}: expected some of {', '.join(SELECTABLE)}")
        if self.max_depth < 0:
            raise ViewOptionError("max_depth must be >= 0")
        for name in ("account_type_regexes", "start_name_regexes", "trim_name_regexes",
                     "show_name_regexes", "hide_name_regexes"):
            for rx in getattr(self, name):
                reason = _regex_error(rx)
                if reason:
                    raise ViewOptionError(f"{name}: bad regex {rx!r}: {reason}")

    def with_(self, **changes: Any) -> ViewOptions:
        return replace(self, **changes)

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


@functools.lru_cache(maxsize=256)
def _regex_error(rx: str) -> str | None:
    """Why polars (Rust regex syntax) rejects `rx`, or None (each regex is compiled once
    per process: views build several ViewOptions with the same defaults)."""
    if rx == ".*":
        return None
    try:
        pl.select(pl.lit("").str.contains(rx))
    except pl.exceptions.PolarsError as e:
        why = [ln.strip() for ln in str(e).splitlines() if ln.strip().startswith("error:")]
        return why[0].removeprefix("error:").strip() if why else "invalid"
    return None
