"""The tree structure of the scope and code views: a node's ancestors (keys are paths of
parts), its nearest displayed parent, and the depth-first display order with siblings
sorted. Separate from analyzer/analysis/views.py, which chooses what is displayed."""

from __future__ import annotations

import polars as pl

from .view_options import ORDER_BY


def part_ends(parts: pl.Expr, sep: str) -> pl.Expr:
    """Where each part of a key ends, counting one separator after each (in characters)."""
    return parts.list.eval(pl.element().str.len_chars() + len(sep)).list.eval(
        pl.element().cum_sum())


def ancestor_chain(nodes: pl.DataFrame, flags: pl.DataFrame, sep: str) -> pl.DataFrame:
    """Every (node, strict ancestor) pair with the ancestor's level `k` and flags. An
    ancestor's key is a prefix of the node's key, cut where a part ends (per-row list
    slicing and joining is ~4x slower at thousands of code frames)."""
    return (
        nodes.select("key", "level", ends=part_ends(pl.col("key").str.split(sep), sep))
        .with_columns(k=pl.int_ranges(1, pl.col("level")))
        .explode("k")
        .drop_nulls("k")
        .with_columns(anc=pl.col("key").str.head(pl.col("ends").list.get(pl.col("k") - 1)
                                                 - len(sep)))
        .drop("ends")
        .join(flags.select(pl.col("key").alias("anc"), a_start="start", a_trim="trim"),
              on="anc", how="left")
    )


def displayed_parents(nodes: pl.DataFrame, shown: pl.DataFrame) -> pl.DataFrame:
    """key -> parent: the nearest displayed strict ancestor of each displayed node (none
    for top nodes). Climbs one level per round (`up_key`: the tree parent), only while some
    parent is hidden."""
    up = nodes.select("key", parent="up_key")
    displayed = shown.get_column("key").implode()
    cur = shown.select("key", parent="up_key")
    while True:
        hidden = pl.col("parent").is_not_null() & ~pl.col("parent").is_in(displayed)
        if not cur.select(hidden.any()).item():
            return cur
        cur = (
            cur.join(up.rename({"key": "parent", "parent": "grand"}), on="parent", how="left")
            .with_columns(parent=pl.when(hidden).then(pl.col("grand")).otherwise("parent"))
            .drop("grand")
        )


def order_tree(rows: pl.DataFrame, order_by: str) -> pl.DataFrame:
    """Depth-first display order with siblings sorted by order_by, ties by name, then key
    (code frames under a hidden node can share a name); `depth` becomes the displayed
    nesting level (1 = under the root).

    A node's place is its parent's + 1 + the sizes of the subtrees of the siblings before
    it, computed one nesting level at a time with numpy (keys can be long code paths:
    hashing them row by row in Python cost more than the rest of the view).
    """
    import numpy as np  # here: the flat views (ops, graph) need no numpy (~50 ms to import)

    key = ORDER_BY[order_by]
    sort_cols = ["name"] if key == "name" else [key, "name"]
    desc = [False] if key == "name" else [True, False]
    n = rows.height
    if n == 0:
        return rows
    index = rows.select(parent="key", p=pl.int_range(n, dtype=pl.Int64))
    siblings = (
        rows.select(*sort_cols, "key", "parent", i=pl.int_range(n, dtype=pl.Int64))
        .join(index, on="parent", how="left")
        .with_columns(pl.col("p").fill_null(-1))
        .sort(["p", *sort_cols, "key"], descending=[False, *desc, False])
    )
    i_sorted = siblings.get_column("i").to_numpy()
    p_sorted = siblings.get_column("p").to_numpy()
    parent = np.empty(n, dtype=np.int64)
    parent[i_sorted] = p_sorted
    has_parent = parent >= 0
    safe_parent = np.where(has_parent, parent, 0)
    nesting = np.ones(n, dtype=np.int64)
    while True:
        deeper = np.where(has_parent, nesting[safe_parent] + 1, 1)
        if np.array_equal(deeper, nesting):
            break
        nesting = deeper
    size = np.ones(n, dtype=np.int64)  # nodes in each subtree, itself included
    for level in range(int(nesting.max()), 1, -1):
        at = nesting == level
        np.add.at(size, parent[at], size[at])
    size_sorted = size[i_sorted]
    before = np.cumsum(size_sorted) - size_sorted  # subtree sizes before, over all groups
    first = np.ones(n, dtype=bool)
    first[1:] = p_sorted[1:] != p_sorted[:-1]
    offset = np.empty(n, dtype=np.int64)
    offset[i_sorted] = before - np.maximum.accumulate(np.where(first, before, 0))
    pos = offset.copy()
    for level in range(2, int(nesting.max()) + 1):
        at = nesting == level
        pos[at] = pos[parent[at]] + 1 + offset[at]
    # Back to polars through lists: a Series made from a numpy array imports numpy.ma
    # (15 ms, a third of a warm view).
    order = np.argsort(pos).tolist()
    return rows.with_columns(depth=pl.Series(nesting.tolist(), dtype=pl.Int64))[order]
