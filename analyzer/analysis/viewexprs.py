"""The expressions every view filters, sums and orders with: the metrics, tfprof's
regex matching (full match), what an account_type_regexes accounts, the displayed rows'
thresholds and the root's totals. Shared by the views (analysis.views) and the views
made of many hosts' node stats (analysis.hostviews)."""

from __future__ import annotations

import polars as pl

from .nodestats import METRICS
from .view_options import ORDER_BY, THRESHOLDS, ViewOptions

ALL_METRICS = [*METRICS, "params", "float_ops"]
# JAX scopes (folded, analyzer.analysis.jaxscopes): the time of a row in the forward and in the
# backward pass; present only where names carry JAX's transforms.
PASS_METRICS = ["forward_micros", "backward_micros"]


def tree_metrics(frame: pl.DataFrame) -> list[str]:
    """The metrics a tree frame sums: ALL_METRICS, and the passes' times where present."""
    return [*ALL_METRICS, *[m for m in PASS_METRICS if m in frame.columns]]


def full_match_any(col: pl.Expr, regexes: tuple[str, ...]) -> pl.Expr:
    if not regexes:
        return pl.lit(False)
    return pl.any_horizontal([col.str.contains(f"^(?:{rx})$") for rx in regexes])


def is_everything(regexes: tuple[str, ...]) -> bool:
    return regexes == (".*",)


def accounted_by(account_type_regexes: tuple[str, ...]) -> pl.Expr:
    """Nodes one of whose `types` (see types_of) fully matches one of the regexes."""
    if is_everything(account_type_regexes):
        return pl.lit(True)
    rx = "|".join(f"(?:{r})" for r in account_type_regexes)
    return pl.col("types").list.eval(pl.element().str.contains(f"^(?:{rx})$")).list.any()


def types_of(opts: ViewOptions) -> pl.Expr:
    """The names account_type_regexes test: the graph op type, op_log types and device
    (tfprof's), and with op_types "kernel" the kernel that ran too."""
    if opts.op_types == "kernel":
        return pl.concat_list("types", "kernel").list.unique(maintain_order=True)
    return pl.col("types")


def visible_depth(opts: ViewOptions) -> int:
    """max_depth in tfprof's terms (its hidden root is depth 1)."""
    return opts.max_depth if opts.depth_from_root else opts.max_depth + 1


def sorted_rows(df: pl.DataFrame, opts: ViewOptions, name_col: str = "name") -> pl.DataFrame:
    key = ORDER_BY[opts.order_by]
    if key == "name":
        return df.sort(name_col)
    return df.sort([key, name_col], descending=[True, False])


def root_totals(df: pl.DataFrame) -> dict[str, int]:
    return {m: int(df.get_column(m).sum()) for m in ALL_METRICS} if df.height else {
        m: 0 for m in ALL_METRICS}


def shown_expr(opts: ViewOptions, self_counts: bool = False) -> pl.Expr:
    """tfprof's ShouldShow minus depth: thresholds, then show and hide regexes on the name
(and, unless zero_rows, not a row whose numbers are all zero).

    Thresholds test totals; params, float_ops and occurrence test a node's own numbers in
    the scope view (`self_counts`), as tfprof does.
    """
    cond = pl.lit(True) if opts.zero_rows else pl.any_horizontal(
        [pl.col(m) != 0 for m in ALL_METRICS])
    for option, metric in THRESHOLDS.items():
        bound = getattr(opts, option)
        if bound:
            own = self_counts and metric in ("params", "float_ops", "occurrence")
            cond = cond & (pl.col(f"self_{metric}" if own else metric) >= bound)
    if not is_everything(opts.show_name_regexes):
        cond = cond & full_match_any(pl.col("name"), opts.show_name_regexes)
    if opts.hide_name_regexes:
        cond = cond & ~full_match_any(pl.col("name"), opts.hide_name_regexes)
    return cond
