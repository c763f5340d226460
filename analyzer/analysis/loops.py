"""The XLA while loops of a JAX run as the user wrote them: a scope and its trip count.

`nn.scan` over layers, `lax.scan` and `fori_loop` become while loops whose body ops JAX
names `.../while/body/...`; the fold (jaxscopes) gives them the user's scopes
(`Model/layers/attn`), and the loop's trip count is said here once, in a field of its
own, instead of in every scope name. A loop's scope is the shallowest scope below the loop's
own (where the scan was called) that holds at least half of its body's ops: the scanned
module, not the scan's slicing and counter ops nor one part of the module.
"""

from __future__ import annotations

import re
from collections import Counter

import polars as pl

from ..model import Run
from .jaxscopes import fold, fold_frame

MAJORITY = 0.5
_LOOP_PATH = re.compile(r"^(.*?)/while/(?:body|cond|body_pred)/")


def _scope(parents: list[str], base: str) -> str:
    """The shallowest scope below `base` (the scope the while loop itself is in) that at
    least half of `parents` lie in: the scanned module (`LM/layers`), not one of its parts
    (`LM/layers/attn` may hold half the ops too); else `base`."""
    counts: Counter[str] = Counter()
    for parent in parents:
        parts = parent.split("/")
        counts.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    need = MAJORITY * len(parents)
    below = [p for p, n in counts.items() if n >= need
             and (not base or p.startswith(base + "/"))]
    return min(below, key=lambda p: (p.count("/"), -counts[p], p), default=base)


def _base(raw_names: list[str]) -> str:
    """The scope of the while loop itself: its body ops' names up to `/while/body/`
    (or the condition's), folded as the loop op would be."""
    prefixes = Counter(m.group(1) for n in raw_names if (m := _LOOP_PATH.match(n)))
    if not prefixes:
        return ""
    scope, _ = fold(prefixes.most_common(1)[0][0] + "/while")
    return scope.rpartition("/")[0]


def loops(run: Run) -> list[dict]:
    """[{scope, trips, while_loops}] of the run's known loops (HLO ops that ran in a loop),
    one per scope (a scan's forward and backward loops are one row), sorted by scope;
    trips 0 where XLA did not know the count."""
    nodes = run.graph_nodes.filter(pl.col("loop").is_not_null())
    if not nodes.height:
        return []
    # the ops that ran (a fusion's inner instructions and parameters name no op of the run)
    ran = run.nodes.select(name=pl.col("node_name").cast(pl.String)).unique()
    nodes = nodes.join(ran, on="name", how="semi")
    if not nodes.height:
        return []
    folded = fold_frame(nodes.select("name", "loop", "loop_trips"), "name").with_columns(
        parent=pl.col("scope").str.replace(r"/[^/]*$", ""))
    per_loop = (folded.group_by("loop").agg("name", "parent", pl.col("loop_trips").max())
                .sort("loop"))
    rows = [{"scope": _scope(parents, _base(names)), "trips": trips}
            for names, parents, trips in per_loop.select("name", "parent", "loop_trips")
            .iter_rows()]
    table = pl.DataFrame(rows, schema={"scope": pl.String, "trips": pl.Int64}, orient="row")
    return (table.group_by("scope").agg(pl.col("trips").max(), while_loops=pl.len())
            .sort("scope").to_dicts())
