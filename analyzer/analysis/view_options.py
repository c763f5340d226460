"""The views' options: tfprof's (options.md) with its defaults, and the four of ours
whose defaults differ from tfprof on purpose (docs/views.md). One place for the option
names, their checks, their command-line flags (FLAGS: the CLI generates its options from
it) and `ViewOptions.tfprof()`, which reproduces tfprof's rows.

Imports nothing heavy (polars only to check a regex): cli.py reads FLAGS to build
`analyze --help`."""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields, replace
from typing import Any

from ..errors import RunlensError

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
    """tfprof's options (options.md), with its defaults, and five of ours whose defaults
    differ from tfprof on purpose (docs/views.md): `op_types` "kernel" groups and accounts
    nodes by the kernel that ran (tfprof: "graph", the op type in graph.pb), `zero_rows`
    False hides rows whose numbers are all zero, `max_depth` counts from the first visible
    level unless `depth_from_root` (tfprof counts its hidden root), and the code view
    hides library frames unless `library_frames`; step -1 averages over the steps
    analyzer.analysis.stepselect keeps (warm-up and outliers left out) unless `include_warmup`.
    Step -1 divides by the steps analysed (`average` "steps"; tfprof: by the steps each
    node ran in). `ViewOptions.tfprof(...)` sets all six to tfprof's behaviour. Regexes must match a
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
    # JAX: scopes as JAX wrote them (jit(f)/jvp(s)/..., transpose(jvp(s)) backward)
    # instead of folded into the user's (analyzer.analysis.jaxscopes).
    raw_scopes: bool = False
    # How step -1 averages: "steps" (ours) divides every node's sums by the steps
    # analysed (per worker), so per-step numbers add up to a step; "node" (tfprof's,
    # --tfprof) divides each node's by the steps it ran in.
    average: str = "steps"
    # Which steps step -1 averages (analyzer.analysis.stepselect): warm-up and outlier steps are
    # left out unless include_warmup (tfprof averages over every step); first/last_step
    # restrict to a range (--steps A:B).
    include_warmup: bool = False
    first_step: int | None = None
    last_step: int | None = None
    # The devices and workers a view covers (full-match regexes; empty: all): the run is
    # cut to their executions (analyzer.analysis.devicecut).
    device: tuple[str, ...] = ()
    worker: tuple[str, ...] = ()

    @classmethod
    def tfprof(cls, **options: Any) -> ViewOptions:
        """Options that reproduce tfprof's rows (the parity tests use these): tfprof's
        grouping, zero rows, depth and frames, averaged over every traced step."""
        return cls(**{"op_types": "graph", "zero_rows": True, "depth_from_root": True,
                      "library_frames": True, "include_warmup": True, "average": "node",
                      **options})

    @classmethod
    def from_flags(cls, tfprof: bool, **options: Any) -> ViewOptions:
        """The options of the command line's FLAGS (plus the steps): with `tfprof`, our
        four are left to ViewOptions.tfprof."""
        if tfprof:
            return cls.tfprof(**{k: v for k, v in options.items()
                                 if k not in OURS and k != "include_warmup"})
        return cls(**options)

    def __post_init__(self) -> None:
        if self.op_types not in OP_TYPES:
            raise ViewOptionError(
                f"op_types {self.op_types!r}: expected one of {', '.join(OP_TYPES)}")
        if self.average not in ("steps", "node"):
            raise ViewOptionError(f"average {self.average!r}: expected steps or node")
        if self.order_by not in ORDER_BY:
            raise ViewOptionError(
                f"order_by {self.order_by!r}: expected one of {', '.join(ORDER_BY)}")
        bad = [s for s in self.select if s not in SELECTABLE]
        if bad:
            raise ViewOptionError(f"select {bad[0]!r}: expected some of {', '.join(SELECTABLE)}")
        if self.max_depth < 0:
            raise ViewOptionError("max_depth must be >= 0")
        for name in ("account_type_regexes", "start_name_regexes", "trim_name_regexes",
                     "show_name_regexes", "hide_name_regexes", "device", "worker"):
            for rx in getattr(self, name):
                reason = _regex_error(rx)
                if reason:
                    raise ViewOptionError(f"{name}: bad regex {rx!r}: {reason}")

    def with_(self, **changes: Any) -> ViewOptions:
        return replace(self, **changes)

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


@dataclass(frozen=True)
class Flag:
    """A ViewOptions field as a command-line flag (`--max-depth` for max_depth). Its type
    and default are the field's; `cli_default` is the command line's default where it
    differs from tfprof's on purpose (docs/views.md); `decl` overrides the flag's
    declaration (a bool's on/off pair)."""

    name: str
    help: str
    cli_default: Any = None
    choices: tuple[str, ...] | None = None
    decl: str | None = None

    @property
    def default(self) -> Any:
        if self.cli_default is not None:
            return self.cli_default
        return {f.name: f.default for f in fields(ViewOptions)}[self.name]


_REGEX = " Full match; repeat the flag for several."
# In the order `analyze ops --help` lists them (after --tfprof and --format, which are not
# ViewOptions fields).
FLAGS = [
    Flag("library_frames", "Code view: also show frames of TensorFlow, Keras, absl and the "
         "standard library."),
    Flag("raw_scopes", "JAX: show scope paths as JAX wrote them (jit(f)/jvp(block)/..., "
         "transpose(jvp(block))/... for the backward pass) instead of folded into the "
         "user's scopes with forward and backward in one row."),
    Flag("depth_from_root", "Count --max-depth from tfprof's hidden root (depth 1), as "
         "tfprof does."),
    Flag("zero_rows", "Also show rows whose numbers are all zero."),
    Flag("op_types", "Group and account nodes by the kernel that ran (fused kernels such as "
         "_FusedConv2D) or by the graph's op type (tfprof).", choices=OP_TYPES),
    Flag("device", "Show these devices only (e.g. '/device:gpu:4', '/device:cpu:[1-3]'): "
         "each device is its own; a row over several says so (JSON: its `device`)." + _REGEX),
    Flag("worker", "Show these workers only (a worker: a profile's file or run dir)."
         + _REGEX),
    Flag("step", "Global step to show; -1 averages over the traced steps (but warm-up and "
         "outliers, unless --include-warmup)."),
    Flag("order_by", "Sort rows (siblings in trees) by this, largest first.",
         cli_default="micros", choices=tuple(ORDER_BY)),
    Flag("select", "Columns of the text output: micros, accelerator_micros, cpu_micros, "
         "bytes, peak_bytes, residual_bytes, output_bytes, params, float_ops, occurrence.",
         cli_default=("micros", "bytes", "occurrence")),
    Flag("account_displayed_op_only", "Totals count only the displayed nodes (default: "
         "every accounted node).", decl="--account-displayed-op-only/--account-all"),
    Flag("max_depth", "Show nodes at most this deep (1: the top level only)."),
    Flag("min_bytes", "Hide nodes that request fewer bytes."),
    Flag("min_peak_bytes", "Hide nodes with a lower peak."),
    Flag("min_residual_bytes", "Hide nodes with fewer bytes still allocated at the end."),
    Flag("min_output_bytes", "Hide nodes with fewer output bytes."),
    Flag("min_micros", "Hide nodes that take less time (CPU + accelerator, us)."),
    Flag("min_accelerator_micros", "Hide nodes with less accelerator time (us)."),
    Flag("min_cpu_micros", "Hide nodes with less CPU time (us)."),
    Flag("min_params", "Hide nodes with fewer parameters."),
    Flag("min_float_ops", "Hide nodes with fewer float operations."),
    Flag("min_occurrence", "Hide nodes that run fewer times (op view: fewer nodes)."),
    Flag("account_type_regexes", "Count only nodes with an op type (or op_log type, or "
         "device) matching one of these." + _REGEX),
    Flag("start_name_regexes", "Start the display at nodes matching these." + _REGEX),
    Flag("trim_name_regexes", "Show nothing below nodes matching these." + _REGEX),
    Flag("show_name_regexes", "Display only nodes matching these." + _REGEX),
    Flag("hide_name_regexes", "Do not display nodes matching these." + _REGEX),
]
# Ours, set to tfprof's behaviour by --tfprof (ViewOptions.tfprof).
OURS = ("op_types", "zero_rows", "depth_from_root", "library_frames")


@functools.lru_cache(maxsize=256)
def _regex_error(rx: str) -> str | None:
    """Why polars (Rust regex syntax) rejects `rx`, or None (each regex is compiled once
    per process: views build several ViewOptions with the same defaults)."""
    if rx == ".*":
        return None
    import polars as pl

    try:
        pl.select(pl.lit("").str.contains(rx))
    except pl.exceptions.PolarsError as e:
        why = [ln.strip() for ln in str(e).splitlines() if ln.strip().startswith("error:")]
        return why[0].removeprefix("error:").strip() if why else "invalid"
    return None
