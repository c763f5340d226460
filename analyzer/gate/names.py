"""The names the CI gate keys metrics by: stable across recompilations.

XLA numbers its fusions and kernels per compilation (`loop_add_fusion_12`,
`input_reduce_fusion.48`): a recompiled program of the same model renumbers them, and a
gate keyed by those numbers reports a renamed kernel as one "new" and one "vanished"
metric. The gate keys a node by its name as the Run gives it (on accelerators, the op
name from the HLO instruction's metadata once attributed: the user's scope path), and an
op type by the Run's op type; where either is an XLA-generated name with a trailing number
(all lower case, as TensorFlow op types never are), the number is dropped. A kernel not
attributed to any op (`unattributed:<kernel>`) is keyed by its kernel name, unnumbered.
JAX's op names are folded into the user's scopes (`jit(train_step)/transpose(jvp(stage2))
/conv` -> `stage2/conv`, analysis.jaxscopes.folded, applied by samples and workdiff): a
scope's forward and backward are one metric, as the scope view shows them.
"""

from __future__ import annotations

import polars as pl

UNATTRIBUTED = "unattributed"
# An XLA instruction or kernel name with its per-compilation number: fusion_590,
# loop_add_fusion_12, input_reduce_fusion.48, wrapped_transpose_11.
_XLA_NUMBERED = r"^([a-z][a-z0-9_]*?[a-z])[._]\d+$"


def unnumbered(name: pl.Expr) -> pl.Expr:
    """`name` without XLA's per-compilation number (other names as they are)."""
    return pl.when(name.str.contains(_XLA_NUMBERED)).then(
        name.str.replace(_XLA_NUMBERED, "${1}")).otherwise(name)


def op_key() -> pl.Expr:
    """The op type a metric is keyed by."""
    return unnumbered(pl.col("op_type"))


def node_key() -> pl.Expr:
    """The node a metric is keyed by: the node name; an unattributed kernel by its kernel
    name (from `stat_name`, "unattributed:<kernel>"), unnumbered."""
    kernel = pl.col("stat_name").str.replace(r"^[^:]*:", "")
    loose = (pl.col("node_name") == UNATTRIBUTED) | pl.col("node_name").str.starts_with(
        UNATTRIBUTED + ":")
    return pl.when(loose).then(pl.lit(UNATTRIBUTED + ":") + unnumbered(kernel)).otherwise(
        pl.col("node_name"))
