"""tfprof's four views: op types (by default the kernels that ran), name scopes, graph
nodes and Python code.

Views are pure functions `(Run, ViewOptions) -> View`, built on `nodestats.node_stats`
(per-node numbers with tfprof's rules) and computed with polars expressions. The scope and
code views share one tree engine: a node's totals are the sum of the self numbers of the
accounted nodes under it; show/hide/trim/start regexes, max_depth and min_* thresholds
choose what is displayed, and a hidden node's displayed descendants move up to the nearest
displayed ancestor, as in tfprof. Options: analyzer.analysis.view_options. docs/views.md lists
every option and where we differ from tfprof on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import polars as pl

from .. import products
from ..model import Run, kernel_label_expr
from . import devicecut
from .codepaths import code_paths, qualified_names, with_qualnames
from .jaxscopes import BACKWARD, FORWARD, fold_frame, has_transforms
from .nodefold import fold
from .nodestats import node_stats
from .outside import outside_note
from .stepselect import StepChoice, analysed
from .treeorder import ancestor_chain, displayed_parents, order_tree, part_ends
from .view_options import ViewOptionError, ViewOptions  # noqa: F401 (re-exported)
from .viewexprs import (  # noqa: F401 (ALL_METRICS, PASS_METRICS: re-exported)
    ALL_METRICS,
    PASS_METRICS,
    accounted_by,
    full_match_any,
    is_everything,
    root_totals,
    shown_expr,
    sorted_rows,
    tree_metrics,
    types_of,
    visible_depth,
)

ROOT = "_TFProfRoot"


@dataclass
class View:
    """A computed view: rows (flat, in display order, with parent links) and the root."""

    kind: str
    rows: pl.DataFrame  # name, depth, parent, metrics (totals), self_* metrics
    root: dict[str, int]
    options: ViewOptions
    notes: list[str] = field(default_factory=list)
    # The workers and devices whose executions the view covers (devicecut.covered).
    where: dict[str, list[str]] = field(default_factory=dict)

    def tree(self) -> list[dict[str, Any]]:
        """Rows nested by parent, each with `children`, in display order."""
        by_parent: dict[str | None, list[dict[str, Any]]] = {}
        for row in self.rows.iter_rows(named=True):
            by_parent.setdefault(row["parent"], []).append(row)

        def build(name: str | None) -> list[dict[str, Any]]:
            return [
                {**{k: v for k, v in r.items() if k not in ("parent", "key")},
                 "children": build(r["key"])}
                for r in by_parent.get(name, [])
            ]

        return build(None)


# ----------------------------------------------------------------------------- op view


def chosen_run(run: Run, opts: ViewOptions) -> Run:
    """The run a view reads: the devices and workers it covers (--device, --worker), at
    step -1 their steps that analyzer.analysis.stepselect keeps (one given step is shown
    whatever it is)."""
    run = devicecut.only(run, opts.device, opts.worker)
    if opts.step >= 0:
        return run
    return analysed(run, StepChoice(opts.include_warmup, opts.first_step, opts.last_step))


def op_view(run: Run, opts: ViewOptions) -> View:
    """One row per kernel (op_types "kernel": "_FusedConv2D (Conv2D+BiasAdd+Relu)") or per
    graph op type (op_types "graph", tfprof's): the sums over its nodes whose types match
    account_type_regexes. Each row lists the graph op types (`op_types`) and kernels
    (`kernels`) of its nodes.

    Thresholds compare each row's own numbers (tfprof compares running totals down
    its sorted list, see docs/views.md).
    """
    run = chosen_run(run, opts)
    return op_view_of(fold(node_stats(run, opts.step, opts.average)), opts, outside_note(run))


def op_view_of(stats: pl.DataFrame, opts: ViewOptions, outside: str | None = None) -> View:
    """op_view of the chosen run's folded node stats (`stats`: analysis.nodefold;
    `outside`: its outside_note): of one Run, or of many hosts' folded as they came
    (analysis.hostviews)."""
    nodes = stats.with_columns(types=types_of(opts)).filter(
        accounted_by(opts.account_type_regexes))
    if opts.op_types == "kernel":
        name = kernel_label_expr()
    else:
        name = pl.col("op_type")
    per_type = nodes.with_columns(name=name).group_by("name").agg(
        *[pl.col(m).sum() for m in ALL_METRICS],
        nodes=pl.col("nodes").sum(),
        executed_nodes=pl.col("executed").sum(),
        op_types=pl.col("op_type").unique().sort(),
        kernels=pl.col("kernel").unique().sort(),
    )
    rows = sorted_rows(per_type, opts)
    root = root_totals(rows)
    start = rows.select(full_match_any(pl.col("name"), opts.start_name_regexes).arg_true())
    first = start.to_series()[0] if start.height else rows.height
    rows = rows.slice(first)
    trimmed = rows.select(full_match_any(pl.col("name"), opts.trim_name_regexes).arg_true())
    if trimmed.height:
        rows = rows.head(trimmed.to_series()[0])
    rows = rows.head(opts.max_depth + 1 if opts.depth_from_root else opts.max_depth)
    rows = rows.filter(shown_expr(opts))
    if opts.account_displayed_op_only:
        root = root_totals(rows)
    rows = rows.with_columns(depth=pl.lit(1), parent=pl.lit(None, pl.String),
                             key=pl.col("name"))
    return _noted(View("ops", rows, root, opts), outside)


# ----------------------------------------------------------------------------- trees


TREE_KINDS = ("scopes", "code")
_SEPARATORS = {"scopes": "/", "code": "\x1f"}  # between the parts of a tree node's key


def tree_view(kind: str, run: Run, opts: ViewOptions) -> View:
    """Shared engine of the scope and code views: the tree's nodes with their totals, then
    what is displayed. At step -1 with every op type accounted (the defaults), the nodes
    are a product: computed once per run and cached."""
    sep = _SEPARATORS[kind]
    run = chosen_run(run, opts)
    if (opts.step == -1 and is_everything(opts.account_type_regexes)
            and not (kind == "code" and opts.library_frames) and not opts.raw_scopes
            and opts.average == ViewOptions().average):
        nodes = default_tree_nodes(run, kind)
    else:
        nodes = tree_nodes(kind, _TREE_ITEMS[kind](run, opts), opts.account_type_regexes,
                           sep)
    return _noted(_display(kind, nodes, opts, sep), outside_note(run))


def _noted(view: View, outside: str | None) -> View:
    """The view with what its numbers leave out (work outside the steps: `outside`, an
    outside_note) and how step -1 averages, in its notes."""
    if outside:
        view.notes.append(outside)
    if view.options.step < 0 and view.options.average == "steps":
        view.notes.append("per step: sums over the steps analysed divided by their number "
                          "(per worker); tfprof divides each node by the steps it ran in "
                          "(--tfprof)")
    return view


def default_tree_nodes(run: Run, kind: str) -> pl.DataFrame:
    """The nodes of the `kind` tree at step -1 with every op type accounted (code: user
    frames only): a product (analyzer.products), computed once per Run and cached."""
    return DEFAULT_TREE(run, kind)


def _default_tree(run: Run, kind: str) -> pl.DataFrame:
    return tree_nodes(kind, _TREE_ITEMS[kind](run, ViewOptions()), (".*",), _SEPARATORS[kind])


def tree_nodes(kind: str, items: pl.DataFrame, account_type_regexes: tuple[str, ...],
               sep: str) -> pl.DataFrame:
    """Every node of a scope or code tree with its totals and own numbers.

    `items` has one row per tree node that carries numbers: `path` (list of names from the
    top, the last being the node itself), `types`, and the metrics. Ancestors that are not
    items (a scope with no node of its own) become nodes with zero self numbers. A node's
    totals are its own numbers if it is accounted, plus the totals of everything below.
    """
    metrics = tree_metrics(items)
    # Float sums depend on their order: items in a stable order, so that the same run
    # gives the same bytes whatever order its rows were made in (issue 31).
    items = items.with_columns(key=pl.col("path").list.join(sep)).sort("key", *metrics)
    items = items.group_by("key", maintain_order=True).agg(
        pl.col("path").first(),
        pl.col("types").list.explode(keep_nulls=False, empty_as_null=False).unique(),
        *[pl.col(m).sum() for m in metrics],
    ).with_columns(accounted=accounted_by(account_type_regexes))
    # Every (node, ancestor-or-self) pair, with the ancestor's level (top level = 1).
    # The ancestor at level l is the key cut where its l-th part ends (as in
    # _ancestor_chain), its parent the key cut where the part before ends; the parts are
    # exploded alongside their levels.
    up_end = pl.col("ends") - pl.col("anc_name").str.len_chars() - 2 * len(sep)
    anc = (
        items.select("key", "accounted", *metrics, anc_name="path",
                     ends=part_ends(pl.col("path"), sep),
                     level=pl.int_ranges(1, pl.col("path").list.len() + 1))
        .explode("anc_name", "ends", "level")
        .select("accounted", *metrics, "anc_name", "level",
                ancestor=pl.col("key").str.head(pl.col("ends") - len(sep)),
                up_key=pl.when(pl.col("level") > 1).then(pl.col("key").str.head(up_end)))
    )
    accounted = pl.col("accounted")
    own = items.select("key", accounted.alias("own_accounted"),
                       *[pl.col(m).alias(f"self_{m}") for m in metrics])
    nodes = (
        anc.group_by("ancestor")
        .agg(*[pl.col(m).filter(accounted).sum() for m in metrics],
             label=pl.col("anc_name").first(), level=pl.col("level").first(),
             up_key=pl.col("up_key").first(), has_accounted=accounted.any())
        .rename({"ancestor": "key"})
        .filter(pl.col("has_accounted"))  # tfprof keeps nodes with something accounted below
        .join(own, on="key", how="left")
        # A node that is not accounted (or not an item) has no numbers of its own.
        .with_columns(*[pl.when(pl.col("own_accounted")).then(pl.col(f"self_{m}"))
                        .otherwise(0).alias(f"self_{m}") for m in metrics],
                      accounted=pl.col("own_accounted").fill_null(False),
                      # Scope nodes are named by their full name, code frames by their
                      # trace string.
                      name=pl.col("key") if kind == "scopes" else pl.col("label"))
        .drop("own_accounted")
    )
    return nodes


def _display(kind: str, nodes: pl.DataFrame, opts: ViewOptions, sep: str) -> View:
    """Choose the displayed nodes and their displayed parents, then order siblings.

    Depth: the root is 1, top-level nodes 2 (start nodes are 2 when start_name_regexes
    is set). A trimmed node still shows but nothing below it does (in the code view the
    trimmed node goes too); hidden nodes pass their displayed descendants up.
    """
    flag_exprs = {
        "start": (pl.lit(True) if is_everything(opts.start_name_regexes)
                  else full_match_any(pl.col("name"), opts.start_name_regexes)),
        "trim": full_match_any(pl.col("name"), opts.trim_name_regexes),
    }
    simple = (is_everything(opts.start_name_regexes) and not opts.trim_name_regexes
              and not opts.account_displayed_op_only)
    chain = None
    if simple:  # every ancestor is a start node and none is trimmed
        d = nodes.with_columns(**flag_exprs, under_start=pl.col("level") > 1,
                               under_trim=pl.lit(False), start_level=pl.lit(1, pl.Int64))
    else:
        flags = nodes.select("key", "level", **flag_exprs)
        chain = ancestor_chain(nodes, flags, sep)
        above = chain.group_by("key").agg(
            under_start=pl.col("a_start").any(),
            under_trim=pl.col("a_trim").any(),
            start_level=pl.col("k").filter(pl.col("a_start")).min(),
        )
        d = (
            nodes.join(above, on="key", how="left")
            .join(flags.select("key", "start", "trim"), on="key")
            .with_columns(pl.col("under_start", "under_trim").fill_null(False))
        )
    if is_everything(opts.start_name_regexes):
        d = d.with_columns(depth=pl.col("level") + 1, eligible=pl.lit(True))
    else:  # the first match down each branch becomes a top node, at depth 2
        d = d.with_columns(
            depth=pl.when(pl.col("under_start"))
            .then(pl.col("level") - pl.col("start_level") + 2).otherwise(2),
            eligible=pl.col("start") | pl.col("under_start"),
        )
    trimmed_out = pl.col("under_trim") | (pl.col("trim") if kind == "code" else pl.lit(False))
    d = d.with_columns(
        displayed=pl.col("eligible") & ~trimmed_out
        & (pl.col("depth") <= visible_depth(opts))
        & shown_expr(opts, self_counts=kind == "scopes")
    )
    shown = d.filter(pl.col("displayed"))
    rows = shown.join(displayed_parents(nodes, shown), on="key", how="left")
    if opts.account_displayed_op_only:
        assert chain is not None
        rows = _displayed_totals(rows, chain)
        root = root_totals(rows.filter(pl.col("parent").is_null()))
    else:
        root = root_totals(nodes.filter(pl.col("level") == 1))
    rows = order_tree(rows, opts.order_by)
    metrics = tree_metrics(nodes)
    keep = ["key", "name", "parent", "depth", *metrics, *[f"self_{m}" for m in metrics]]
    return View(kind, rows.select(keep), root, opts)


def _displayed_totals(rows: pl.DataFrame, chain: pl.DataFrame) -> pl.DataFrame:
    """account_displayed_op_only: totals count only displayed nodes (self + shown below)."""
    metrics = tree_metrics(rows)
    keys = rows.select("key")
    below = (
        chain.join(keys, on="key", how="semi")
        .join(keys.rename({"key": "anc"}), on="anc", how="semi")
        .join(rows.select("key", *[f"self_{m}" for m in metrics]), on="key")
        .group_by("anc")
        .agg(*[pl.col(f"self_{m}").sum().alias(f"below_{m}") for m in metrics])
        .rename({"anc": "key"})
    )
    rows = rows.join(below, on="key", how="left")
    return rows.with_columns(
        [(pl.col(f"self_{m}") + pl.col(f"below_{m}").fill_null(0)).alias(m)
         for m in metrics]
    ).drop([f"below_{m}" for m in metrics])


def scope_view(run: Run, opts: ViewOptions) -> View:
    """Name scopes: a node "a/b/c" sits under scope "a/b"; totals include everything below.
    With op_types "kernel", a node that ran as another kernel than its graph op type (a
    fused `conv1/Relu`) carries `kernel` and `fused_ops` (else they are null)."""
    view = tree_view("scopes", run, opts)
    run = chosen_run(run, opts)
    if opts.op_types != "kernel":
        return view
    return _with_kernels(view, fold(node_stats(run, opts.step, opts.average)))


def scope_view_of(stats: pl.DataFrame, opts: ViewOptions, outside: str | None = None) -> View:
    """scope_view of the chosen run's folded node stats (`stats`: analysis.nodefold;
    `outside`: its outside_note): of many hosts' folded as they came (analysis.hostviews);
    a Run's own reads its cached default tree instead, which is this tree."""
    nodes = tree_nodes("scopes", scope_items(stats, opts), opts.account_type_regexes, "/")
    view = _noted(_display("scopes", nodes, opts, "/"), outside)
    return _with_kernels(view, stats) if opts.op_types == "kernel" else view


def _with_kernels(view: View, stats: pl.DataFrame) -> View:
    """Scope rows with the kernel and fused ops of a node that ran as another kernel than
    its graph op type."""
    other = (pl.col("kernel") != pl.col("op_type")) | pl.col("fused_ops").is_not_null()
    kernels = (stats.filter(other).unique(subset="name", keep="first", maintain_order=True)
               .select(pl.col("name").alias("key"), "kernel", "fused_ops"))
    view.rows = view.rows.join(kernels, on="key", how="left", maintain_order="left")
    return view


def _scope_items(run: Run, opts: ViewOptions) -> pl.DataFrame:
    return scope_items(fold(node_stats(run, opts.step, opts.average)), opts)


def scope_items(stats: pl.DataFrame, opts: ViewOptions) -> pl.DataFrame:
    """Each node of `stats` (folded: analysis.nodefold) under its scope path; JAX names
    folded into the user's scopes (unless raw_scopes), with the node's time in the
    forward or backward pass beside."""
    if opts.raw_scopes or not has_transforms(stats.get_column("name")):
        return stats.select(pl.col("name").str.split("/").alias("path"),
                            types_of(opts).alias("types"), *ALL_METRICS)
    return fold_frame(stats.select("name", types_of(opts).alias("types"), *ALL_METRICS)).select(
        pl.col("scope").str.split("/").alias("path"), "types", *ALL_METRICS, *_passes())


def _passes() -> list[pl.Expr]:
    """A folded JAX node's time in the forward and the backward pass (of `direction`)."""
    micros, direction = pl.col("micros"), pl.col("direction")
    return [pl.when(direction == FORWARD).then(micros).otherwise(0).alias("forward_micros"),
            pl.when(direction == BACKWARD).then(micros).otherwise(0).alias("backward_micros")]


def code_view(run: Run, opts: ViewOptions) -> View:
    """Python code: each op's numbers go to the last frame of its code trace (op_log.pb);
    frames nest by call stack, outermost first, as tfprof's code view does. Unless
    library_frames, frames of TensorFlow, Keras, absl and the standard library are left
    out, so the innermost user frame gets the time (analyzer.analysis.codepaths)."""
    view = tree_view("code", run, opts)
    paths = code_paths(run)
    if not paths.height:
        view.notes.append("no code traces (op_log.pb missing or without them)")
        return view
    # Each row's frame by its full qualified name beside tfprof's cut one (JSON `qualname`).
    view.rows = with_qualnames(view.rows, "name", qualified_names(run))
    nodes = node_stats(chosen_run(run, opts), opts.step, opts.average)
    total = float(nodes.get_column("micros").sum())
    traceless = nodes.join(paths, on=["worker", "name"], how="anti")
    if total and traceless.height:
        lost = float(traceless.get_column("micros").sum())
        top = traceless.sort("micros", descending=True).get_column("name").head(3)
        view.notes.append(f"{100 * lost / total:.1f}% of the time is in ops without a code "
                          f"location ({', '.join(top.to_list())}"
                          f"{', ...' if traceless.height > 3 else ''}), not shown")
    return view


def _code_items(run: Run, opts: ViewOptions) -> pl.DataFrame:
    paths = code_paths(run).select(
        "worker", "name", path="path" if opts.library_frames else "user_path"
    ).filter(pl.col("path").list.len() > 0)
    nodes = node_stats(run, opts.step, opts.average).join(paths, on=["worker", "name"], how="inner")
    if not has_transforms(nodes.get_column("name")):
        return nodes.select("path", types_of(opts).alias("types"), *ALL_METRICS)
    # JAX: a line's forward and backward ops in one row, the split beside.
    return fold_frame(nodes.select("name", "path", types_of(opts).alias("types"), *ALL_METRICS)
                      ).select("path", "types", *ALL_METRICS, *_passes())


_TREE_ITEMS = {"scopes": _scope_items, "code": _code_items}
DEFAULT_TREE = products.register("tree", _default_tree)


def graph_view(run: Run, opts: ViewOptions) -> View:
    """Graph nodes, one row each, with their own numbers, op type, device and inputs."""
    run = chosen_run(run, opts)
    nodes = node_stats(run, opts.step, opts.average).with_columns(types=types_of(opts)).filter(
        accounted_by(opts.account_type_regexes))
    inputs = (
        run.graph_nodes.filter(pl.col("source") == "graph")
        .unique(subset=["worker", "name"], keep="first")
        .select("worker", "name", "inputs")
    )
    nodes = nodes.join(inputs, on=["worker", "name"], how="left")
    agg = nodes.group_by("name").agg(
        *[pl.col(m).sum() for m in ALL_METRICS],
        op_type=pl.col("op_type").first(), kernel=pl.col("kernel").first(),
        fused_ops=pl.col("fused_ops").first(), device=pl.col("device").first(),
        inputs=pl.col("inputs").first(),
    )
    rows = sorted_rows(agg, opts)
    root = root_totals(rows)
    if not is_everything(opts.start_name_regexes):
        rows = rows.filter(full_match_any(pl.col("name"), opts.start_name_regexes))
    rows = rows.filter(shown_expr(opts, self_counts=True))
    if opts.trim_name_regexes:
        rows = rows.filter(~full_match_any(pl.col("name"), opts.trim_name_regexes))
    if opts.account_displayed_op_only:
        root = root_totals(rows)
    rows = rows.with_columns(depth=pl.lit(1), parent=pl.lit(None, pl.String),
                             key=pl.col("name"))
    return _noted(View("graph", rows, root, opts), outside_note(run))


def covering(view: View, where: dict[str, list[str]]) -> View:
    """`view` saying the workers and devices it covers (devicecut.covered's `where`)."""
    if len(where["devices"]) > 1 or len(where["workers"]) > 1:
        view.notes.append(
            f"rows cover {len(where['workers'])} worker(s) and {len(where['devices'])} "
            "devices; a node counts on the first device it ran on (--device, --worker "
            "show one)")
    return replace(view, where=where)


def _covering(make: Any) -> Any:
    """A view function whose View says the workers and devices it covers."""
    def view(run: Run, opts: ViewOptions) -> View:
        return covering(make(run, opts), devicecut.covered(chosen_run(run, opts)))
    return view


VIEWS = {k: _covering(f) for k, f in
         {"ops": op_view, "scopes": scope_view, "graph": graph_view, "code": code_view}.items()}
# What a view cannot do without (names of Run.lacks): on a run that lacks it, the view is
# skipped with the reason instead of showing an empty tree.
VIEW_NEEDS: dict[str, frozenset[str]] = {"code": frozenset({"code"})}
