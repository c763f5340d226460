"""JAX scope paths as the user named them: the transform wrappers folded away.

JAX writes each op's name stack (HLO `OpMetadata.op_name`) with its transformations in it
(jax/_src/source_info_util.py, `NameStack.__str__`): a `Transform` (`jvp`, `transpose`,
`vmap`; `transform_name_stack`) wraps the scope that follows it, so the forward and the
backward pass of one `jax.named_scope("block3")` read `jit(train_step)/jvp(block3)/mlp/..`
and `jit(train_step)/transpose(jvp(block3))/mlp/..`: two trees where the user wrote one.
A jitted call is a scope named by `util.wrap_name` (`jit(f)`, and `pjit(f)`, `pmap(f)`,
`xmap(f)`, `xla_computation(f)` in older JAX); `jax.checkpoint` adds the scopes
`checkpoint` and `rematted_computation`, and its replay in the backward pass re-enters the
checkpointed scope (`transpose(jvp(block0))/jvp(block0)/checkpoint/...`). Older JAX put
the module's entry function in as well: `jit(train_step)/jit(main)/dense1/...`.

`fold(name)` undoes that: transform wrappers are unwrapped (`transpose(jvp(block3))` ->
`block3`), an empty one (`jvp()`) goes, the outermost function (`jit(train_step)`: the
program, named by its HLO module) goes, and so does `jit(main)`; a nested jitted call
keeps its function's name (`jit(relu)` -> `relu`), remat's scopes go, and a scope
re-entered by a transform is kept once. The leaf (the primitive: `dot_general`,
`remat2`) is kept as it is. Which pass an op belongs to is said apart: `backward` when a
`transpose` wrapped any of its scopes, `forward` when only `jvp` did, else "" (no
autodiff: the optimizer, an eval step).
Control flow and calls add plain elements (jax/_src/lax/control_flow, core.call): a loop
(`scan`, `fori_loop`, `while_loop`) lowers its body under `while/body` and its condition
under `while/cond` (`while/body_pred` for a batched predicate), a `cond`/`switch` branch
under `cond/branch_N_fun`, a called jaxpr under `closed_call` or `eval_jaxpr` (flax's
`nn.scan`), `custom_jvp_call`/`custom_vjp_call` around custom derivatives, and the SPMD
wrappers `shard_map` and `pmap`/`xla_pmap` (bare, or as calls `shard_map(f)`). Those go
too; a loop's or branch's elements go only as the pair JAX writes for the computation it
lowers into (a while body, a branch), so a user's own scope named `body` or `cond` stays.
(The pairs were checked against the HLO: every executed instruction named so sits in a
while body/condition or a branch computation, tests/test_jax_forms.py.)
XLA joins the names of instructions it merged with `;`: the first one names the op.
Names without parentheses (every TensorFlow name) come back unchanged.
"""

from __future__ import annotations

import re
from functools import lru_cache

import polars as pl

# NameStack transforms (source_info_util.transform_name_stack), outermost first when nested.
TRANSFORMS = frozenset({"jvp", "transpose", "vmap"})
# util.wrap_name: the scope of a traced function call.
CALLS = frozenset({"jit", "pjit", "pmap", "xmap", "xla_computation", "shard_map", "xla_pmap"})
# SPMD wrappers: the program's own partitioning, never a user's scope (bare or as a call).
SPMD = frozenset({"shard_map", "pmap", "xla_pmap", "xmap"})
# Scopes JAX adds for jax.checkpoint (ad_checkpoint.py), called jaxprs and custom
# derivatives: not the user's.
PSEUDO_SCOPES = frozenset({"checkpoint", "rematted_computation", "remat", "remat2",
                           "closed_call", "core_call", "eval_jaxpr", "custom_jvp_call",
                           "custom_vjp_call", "custom_vjp_call_jaxpr", "pjit", *SPMD})
# A loop's or a branch's pair of elements: (the primitive, what its computation is named).
_PAIRS = {"while": re.compile(r"^(?:body|cond|body_pred)$"),
          "cond": re.compile(r"^branch_\d+_fun$")}
_WRAPPED = re.compile(r"^([A-Za-z_]\w*)\((.*)\)$")
FORWARD, BACKWARD = "forward", "backward"


def _unwrap(part: str) -> tuple[str, set[str], bool]:
    """`transpose(jvp(block3))` -> ("block3", {"transpose", "jvp"}, False); a call
    `jit(relu)` -> ("relu", set(), True)."""
    seen: set[str] = set()
    while True:
        m = _WRAPPED.match(part)
        if m is None or m.group(1) not in TRANSFORMS:
            break
        seen.add(m.group(1))
        part = m.group(2)
    m = _WRAPPED.match(part)
    if m is not None and m.group(1) in CALLS:
        return ("" if m.group(1) in SPMD else m.group(2)), seen, True
    return part, seen, False


@lru_cache(maxsize=65536)
def fold(name: str) -> tuple[str, str]:
    """(the user's scope path, "forward" | "backward" | "") of a JAX op name."""
    if "(" not in name:
        return name, ""
    parts = name.split(";", 1)[0].split("/")
    out: list[str] = []
    transforms: set[str] = set()
    last = len(parts) - 1
    skip = False
    for i, part in enumerate(parts):
        if i == last:
            out.append(part)
            break
        if skip:
            skip = False
            continue
        pair = _PAIRS.get(part)
        if pair is not None and pair.match(parts[i + 1]) and i + 1 < last:
            skip = True  # `while/body`, `cond/branch_1_fun`: the loop's or branch's jaxpr
            continue
        inner, seen, call = _unwrap(part)
        transforms |= seen
        if not inner or (call and (i == 0 and not seen or inner == "main")):
            continue  # `jvp()`; the program's own function (`jit(main)` in older JAX)
        if inner in PSEUDO_SCOPES or (seen and out and out[-1] == inner):
            continue  # JAX's own scopes; a scope re-entered by a transform (remat replay)
        out.append(inner)
    direction = (BACKWARD if "transpose" in transforms
                 else FORWARD if "jvp" in transforms else "")
    return "/".join(out) or name, direction


FOLDED = pl.Struct({"scope": pl.String, "direction": pl.String})


def fold_series(names: pl.Series) -> pl.Series:
    """`fold` of each name as a struct (scope, direction); null stays null. Meant for the
    distinct names of a frame (fold is a Python call per name)."""
    return pl.Series([None if n is None else dict(zip(("scope", "direction"), fold(n),
                                                      strict=True))
                      for n in names.to_list()], dtype=FOLDED)


def fold_frame(frame: pl.DataFrame, column: str = "name") -> pl.DataFrame:
    """`frame` with `scope` (the folded `column`) and `direction` added: the fold runs
    once per distinct name."""
    names = frame.get_column(column).unique()
    table = pl.DataFrame({column: names}).with_columns(
        fold_series(names).alias("folded")).unnest("folded")
    return frame.join(table, on=column, how="left", nulls_equal=True, maintain_order="left")


def folded(frame: pl.DataFrame, column: str) -> pl.DataFrame:
    """`frame` with the JAX op names of `column` replaced by the user's scopes they fold
    into (forward and backward alike); other names (TensorFlow's, unattributed kernels)
    as they are."""
    if not frame.height or not has_transforms(frame.get_column(column)):
        return frame
    return (fold_frame(frame, column).with_columns(pl.col("scope").alias(column))
            .drop("scope", "direction"))


def has_transforms(names: pl.Series) -> bool:
    """Whether any name is a JAX name stack that folding changes."""
    return bool(names.cast(pl.String).str.contains(r"\(", literal=False).any())
