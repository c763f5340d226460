"""Each op's Python code path (op_log.pb's traces), as tfprof's code view builds it, and
the same path with library frames left out, which the code view shows by default.

Library frames are TensorFlow's, Keras', absl's, protobuf's, numpy's, the standard
library's and our capture hook's: an op created by `tf.nn.conv2d` has a dozen of them
under the user's line (traceback_utils.py, dispatch.py, op_def_library.py, ops.py ...).
Without them the innermost frame is the user's line, so it gets the op's time.

Gradient ops: TensorFlow names them "gradients/<forward op>_grad/..." and their own
traces all end in the `minimize()` (or `tf.gradients`) line. Where the op log has a
trace for that forward op, a gradient op takes the forward op's path with " (gradient)"
on each frame, so backprop time lands next to the layer that caused it. Gradient ops
whose forward op has no trace are left out, as tfprof does.

JAX ops (HLO OpMetadata stack frames, sources/xplane_hlo) carry their own frames, the
backward pass's the same line as the forward op's: one row holds both (the code view
shows the split, analyzer.views); JAX's, flax's and optax's frames are library frames,
and so are runlens's capture helpers' (analyzer/capture/: `profiled` wraps the step).
JAX's stacks repeat the user's frames (one trace per transformation); the user path
keeps each frame once. Rows are named as tfprof names frames (function cut to 20
characters); `qualified_names` gives each its full qualified name.
"""

from __future__ import annotations

import polars as pl

from .. import products
from ..model import Run

# Packages whose frames are not the user's code (in site-packages or dist-packages).
LIBRARY_PACKAGES = ("tensorflow", "tensorflow_core", "tensorflow_estimator", "keras",
                    "tf_keras", "absl", "google/protobuf", "numpy", "six", "wrapt",
                    "jax", "jaxlib", "flax", "optax", "haiku", "equinox", "chex")
_PACKAGE_RE = r"/(?:site|dist)-packages/(?:" + "|".join(LIBRARY_PACKAGES) + r")(?:/|\.py$)"
_STDLIB_RE = r"/lib/python3(?:\.\d+)?/"
_INSTALLED_RE = r"/(?:site|dist)-packages/"
# runlens's capture helpers (analyzer/capture/*.py: the TF hooks, JAX's `profiled`), and
# the old single-file hook: a step they wrap is not the user's code.
_OUR_HOOK_RE = r"(?:^|/)analyzer/capture(?:/[A-Za-z0-9_]+)?\.py$"
GRADIENT_SUFFIX = " (gradient)"


def is_library_frame(file: pl.Expr) -> pl.Expr:
    """True for a frame of a library (LIBRARY_PACKAGES), of the standard library or of
    runlens' capture hook."""
    stdlib = file.str.contains(_STDLIB_RE) & ~file.str.contains(_INSTALLED_RE)
    return (file.str.contains(_PACKAGE_RE) | stdlib | file.str.starts_with("<frozen ")
            | file.str.contains(_OUR_HOOK_RE))


def trace_string() -> pl.Expr:
    """tfprof's name for a code frame: file basename, line, function (cut to 20 chars)."""
    fn = pl.col("function")
    short = pl.when(fn.str.len_chars() < 20).then(fn).otherwise(fn.str.head(17) + "...")
    return pl.format("{}:{}:{}", pl.col("file").str.split("/").list.last(), pl.col("lineno"),
                     short)


def qualified_string() -> pl.Expr:
    """A code frame by its full qualified name: file basename, line, the whole function
    name (`build_cnn.<locals>.loss_fn`, which trace_string cuts)."""
    return pl.format("{}:{}:{}", pl.col("file").str.split("/").list.last(), pl.col("lineno"),
                     pl.col("function"))


def qualified_names(run: Run) -> pl.DataFrame:
    """name (a frame's trace_string, as the code view names its rows) -> qualname (its
    full qualified name). A file line holds one function, so a name has one qualname.
    A product (cached with the run): a warm code view reads it, not the code frame."""
    return QUALIFIED_NAMES(run)


def _qualified_names(run: Run) -> pl.DataFrame:
    return (run.code.select(name=trace_string(), qualname=qualified_string())
            .unique().sort("name", "qualname").unique("name", keep="first",
                                                       maintain_order=True))


def with_qualnames(frame: pl.DataFrame, column: str, names: pl.DataFrame) -> pl.DataFrame:
    """`frame` with `qualname`: the full qualified name (`names`, qualified_names) of each
    row's frame `column`; a gradient row keeps its " (gradient)"; null where `column`
    names no frame."""
    grad = pl.col(column).str.ends_with(GRADIENT_SUFFIX)
    return (frame.with_columns(_frame=pl.col(column).str.strip_suffix(GRADIENT_SUFFIX))
            .join(names.rename({"name": "_frame"}), on="_frame", how="left",
                  maintain_order="left")
            .with_columns(qualname=pl.when(grad).then(pl.col("qualname") + GRADIENT_SUFFIX)
                          .otherwise("qualname"))
            .drop("_frame"))


def code_paths(run: Run) -> pl.DataFrame:
    """worker, name, path, user_path: each op's code path, outermost frame first, as
    tfprof builds it (`path`), and without library frames (`user_path`; an op with no
    user frame at all keeps its innermost frame).

    Ops without a code trace of their own (runtime-only nodes) are left out, as in tfprof.
    A product (analyzer.products) of the whole run: a choice of steps keeps its paths.
    """
    return CODE_PATHS(run)


def _code_paths(run: Run) -> pl.DataFrame:
    own = (
        run.code.sort("worker", "name", "depth")
        .group_by("worker", "name", maintain_order=True)
        .agg(path=trace_string(),
             user_path=trace_string().filter(~is_library_frame(pl.col("file"))))
        # An op made entirely in library code keeps its innermost frame (time is not lost).
        .with_columns(user_path=pl.when(pl.col("user_path").list.len() > 0)
                      .then("user_path").otherwise(pl.col("path").list.tail(1)))
    )
    own = _collapsed(own)
    names = own.select("worker", "name")
    fwd = pl.col("name").str.extract(r"gradients/(.+?)_grad/", 1)
    is_grad = pl.col("name").str.contains("gradients/") & pl.col("name").str.contains("_grad/")
    grads = (
        names.filter(is_grad & fwd.is_not_null())
        .with_columns(fwd=fwd)
        .join(own.rename({"name": "fwd"}), on=["worker", "fwd"])
        .select("worker", "name",
                *[pl.col(c).list.eval(pl.element() + GRADIENT_SUFFIX).alias(c)
                  for c in ("path", "user_path")])
    )
    forward = own.join(names.filter(is_grad), on=["worker", "name"], how="anti")
    return pl.concat([forward, grads])


def collapse(path: list[str]) -> list[str]:
    """A stack with its repeats cut: where a frame comes again, what lay between its two
    calls goes (`a > b > c > a > b > d` -> `a > b > d`), so the innermost frame stays."""
    out: list[str] = []
    for frame in path:
        if frame in out:
            del out[out.index(frame) + 1:]
        else:
            out.append(frame)
    return out


def _collapsed(own: pl.DataFrame) -> pl.DataFrame:
    """JAX's stacks repeat the user's frames (each trace of a transformation re-enters
    train_step > loss_fn > Model.__call__): `collapse` of each distinct user path."""
    key = pl.col("user_path").list.join("\x1f")
    distinct = own.select(key.alias("_key"), "user_path").unique("_key")
    table = pl.DataFrame({"_key": distinct.get_column("_key"),
                          "_collapsed": [collapse(p) for p in distinct.get_column(
                              "user_path").to_list()]},
                         schema={"_key": pl.String, "_collapsed": pl.List(pl.String)})
    return (own.with_columns(key.alias("_key")).join(table, on="_key", how="left",
                                                      maintain_order="left")
            .with_columns(user_path="_collapsed").drop("_key", "_collapsed"))


CODE_PATHS = products.register("code_paths", _code_paths, whole_run=True)
QUALIFIED_NAMES = products.register("qualified_names", _qualified_names, whole_run=True)
