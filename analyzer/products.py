"""What the analysis derives from a Run (per-node numbers, code paths, step flags, trees):
one registry of producers, memoised here, kept in the cache for the next process.

A Run never changes once loaded (analyzer.model); whatever is computed from it lives in
this layer. A producer is a name, a function `(Run, *params) -> DataFrame`, and the code
it runs. The module that owns the computation registers it, one line:

    NODE_STATS = products.register("node_stats", _node_stats)

and calls the producer: `NODE_STATS(run, step)` is the frame, computed once per Run and
params (memoised in `Run.memo`, which only this module touches). A producer registered
with `whole_run` is computed on the Run a choice of steps was cut from (code paths, step
flags: what does not depend on the choice).

When the Run has an `origin` (load_run with the cache), a product not yet in the memo is
read from the cache (analyzer.productcache), and one computed is written there in the
background for the next process. Its key holds the producer's `digest`: the source of
the module that defines it and of every engine module that one imports (found in its
import statements, transitively), of analyzer/schema.py and of this layer, and the
polars version. Change any of that code and the product is computed again: no version
number to bump, none to forget.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import os
import re
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import polars as pl

from . import digest as content
from . import productcache

if TYPE_CHECKING:
    from .model import Run

PACKAGE = __name__.rpartition(".")[0]  # the engine's package, wherever it is installed
ROOT = os.path.dirname(os.path.abspath(__file__))
SUFFIXES = (".py", *importlib.machinery.EXTENSION_SUFFIXES)
# In every producer's digest (these alone, not what they import): the frames' schema,
# how products are computed and kept.
ALWAYS = (f"{PACKAGE}.schema", __name__, productcache.__name__)
T = TypeVar("T")


@dataclass(frozen=True, eq=False)
class Producer:
    """A registered product: `build(run, *params)` computes it."""

    name: str
    build: Callable[..., pl.DataFrame]
    whole_run: bool = False

    def __call__(self, run: Run, *params: Hashable) -> pl.DataFrame:
        return product(run, self, params)

    @functools.cached_property
    def digest(self) -> str:
        """A digest of the code that computes this product (`modules`, the polars
        version)."""
        return code_digest((self.build.__module__,))

    @property
    def modules(self) -> list[str]:
        """The modules whose source makes up `digest`: the one that defines `build`,
        every engine module it imports (transitively), and ALWAYS."""
        return sorted(_closure((self.build.__module__,)))


PRODUCERS: dict[str, Producer] = {}


def register(name: str, build: Callable[..., pl.DataFrame], *, whole_run: bool = False
             ) -> Producer:
    """Register the producer `name` (unique) and return it."""
    known = PRODUCERS.get(name)
    if known is not None and known.build.__qualname__ != build.__qualname__:
        raise ValueError(f"product {name!r} is already made by {known.build.__qualname__}")
    producer = PRODUCERS[name] = Producer(name, build, whole_run)
    return producer


def product(run: Run, producer: Producer, params: tuple[Hashable, ...] = ()) -> pl.DataFrame:
    """The product of `run` with `params`: memoised, else read from the cache, else
    computed (and then cached in the background)."""
    target = run.whole if producer.whole_run else run
    key = (producer.name, params)
    memo = target.memo
    found = memo.values.get(key)
    if found is not None:
        return found  # type: ignore[no-any-return]
    origin = target.origin
    frame = None
    if origin is not None:
        frame = productcache.read(origin, producer.name, params, producer.digest)
    if frame is None:
        frame = producer.build(target, *params)
        if origin is not None:
            productcache.write_later(origin, producer.name, params, producer.digest, frame)
    with memo.lock:
        return memo.values.setdefault(key, frame)  # type: ignore[no-any-return]


def memoised(run: Run, key: Hashable, compute: Callable[[], T]) -> T:
    """`compute()` once per Run and key, for what is derived from a Run but not kept in
    the cache (the Run of a choice of steps)."""
    memo = run.memo
    found = memo.values.get(("memo", key))
    if found is not None:
        return found  # type: ignore[no-any-return]
    value = compute()
    with memo.lock:
        return memo.values.setdefault(("memo", key), value)  # type: ignore[no-any-return]


# ----------------------------------------------------------------------------- digest

# `from X import a, b` (parenthesised over lines or not) and `import X, Y`, anywhere
# (imports inside functions too); a match in prose only adds a module (or a name that is
# none). Each starts with a literal, which the regex engine scans for fast.
_FROM_RE = re.compile(r"from[ \t]+([\w.]+)[ \t]+import[ \t]+(\([^)]*\)|[^\n#]*)")
_IMPORT_RE = re.compile(r"import[ \t]+([\w., \t]+)")


@functools.cache
def _listing(folder: str) -> frozenset[str]:
    try:
        return frozenset(os.listdir(folder))
    except OSError:
        return frozenset()


@functools.cache
def _source(module: str) -> tuple[str, bytes] | None:
    """(file name within the package, its bytes) of an engine module (its .py, its
    package's __init__.py, or its built C extension); None for another package's module
    or a name that is not a module."""
    if module != PACKAGE and not module.startswith(PACKAGE + "."):
        return None
    parts = module.split(".")[PACKAGE.count(".") + 1:]
    folder, names = ROOT, _listing(ROOT)
    for part in parts[:-1]:  # into the packages, listing only folders that exist
        if part not in names:
            return None
        folder = os.path.join(folder, part)
        names = _listing(folder)
    if parts and parts[-1] in names:  # a package: its __init__.py
        folder, parts = os.path.join(folder, parts[-1]), [*parts, "__init__"]
        names = _listing(folder)
    stem = parts[-1] if parts else "__init__"
    for suffix in SUFFIXES:
        if stem + suffix in names:
            path = os.path.join(folder, stem + suffix)
            try:
                with open(path, "rb") as f:
                    return os.path.relpath(path, ROOT), f.read()
            except OSError:
                return None
    return None


def _imported(module: str, text: str) -> set[str]:
    """The modules `text` (the source of `module`) may import, with their packages."""
    found: set[str] = set()
    for base, names in _FROM_RE.findall(text):
        if base.startswith("."):  # relative to the module's package
            bare = base.lstrip(".")
            parent = module.rsplit(".", len(base) - len(bare))[0]
            base = f"{parent}.{bare}" if bare else parent
        found.add(base)
        for name in names.strip("()").replace("\n", " ").split(","):
            name = name.split(" as ")[0].strip()
            if name.isidentifier():
                found.add(f"{base}.{name}")  # a submodule, if it is one
    for names in _IMPORT_RE.findall(text):
        found.update(n.split(" as ")[0].strip() for n in names.split(","))
    parents = {".".join(n.split(".")[:i]) for n in found for i in range(1, n.count(".") + 1)}
    return found | parents


def _closure(roots: tuple[str, ...]) -> dict[str, tuple[str, bytes]]:
    """`roots` and every engine module they import, transitively, and ALWAYS: module ->
    source."""
    seen = {m: s for m in ALWAYS if (s := _source(m)) is not None}
    done = set(ALWAYS)
    todo = list(roots)
    while todo:
        module = todo.pop()
        if module in done:
            continue
        done.add(module)
        source = _source(module)
        if source is None:
            continue
        seen[module] = source
        todo.extend(_imports_of(module))
    return seen


@functools.cache
def _imports_of(module: str) -> frozenset[str]:
    source = _source(module)
    if source is None or not source[0].endswith(".py"):
        return frozenset()
    return frozenset(_imported(module, source[1].decode("utf-8", "replace")))


@functools.cache
def code_digest(roots: tuple[str, ...]) -> str:
    """A digest of the source of `roots` and of every engine module they import,
    transitively (C extensions: their built file), and of the polars version."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"polars {pl.__version__}\0".encode())
    for module in sorted(_closure(roots)):
        h.update(_module_digest(module).encode() + b"\0")
    return h.hexdigest()


@functools.cache
def _module_digest(module: str) -> str:
    """A module's file name and the digest of its bytes (analyzer.digest, ~10 GB/s)."""
    source = _source(module)
    return "" if source is None else f"{source[0]}:{len(source[1])}:{content.of(source[1])}"
