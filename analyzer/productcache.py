"""Products (analyzer.products) kept for the next process, beside the frames they come from.

Where: `products/` in the data folder of the source cache of the run's first part
(analyzer.cache). A data folder holds one write of one part's frames, the frames of one
content of its inputs read by one version of the code (its key.json's fingerprint): when
an input or the code changes, the frames go to a new data folder and the old one goes,
with its products. So a product is keyed by the data folders of all the run's parts (a
run of several workers by each one's), what narrowed the run (the steps a choice kept:
analyzer.analysis.stepselect), the producer's name and params, and the digest of its code
(`Producer.digest`); one file per key, named by the key's hash.

A file is MAGIC, the digest of its Parquet bytes (analyzer.digest), then the bytes,
written atomically (renamed into place) in the cache's writer thread (`cache.later`:
after the frames it comes from, and finished before the process exits). One that cannot
be read, or whose digest does not match, is computed again and rewritten, silently:
nothing is lost. At most MAX_FILES products per data folder (a run analysed with many `--steps` or
`--step` choices): the oldest go first.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import time
from collections.abc import Hashable
from pathlib import Path

import polars as pl

from . import cache
from . import digest as content
from .origin import Origin

MAGIC = b"runlens-product-1\n"
FOLDER = "products"
MAX_FILES = 64


def _path(folders: list[Path], narrowed: tuple[str, ...], name: str,
          params: tuple[Hashable, ...], digest: str) -> Path:
    key = json.dumps([[f.name for f in folders], list(narrowed), name, repr(params), digest])
    token = hashlib.blake2b(key.encode(), digest_size=16).hexdigest()
    return folders[0] / FOLDER / f"{name}-{token}.product"


def read(origin: Origin, name: str, params: tuple[Hashable, ...], digest: str
         ) -> pl.DataFrame | None:
    """The product kept under this key, or None (none kept, or it cannot be read)."""
    folders = origin.folders(wait=False)
    if folders is None:
        return None
    path = _path(folders, origin.narrowed, name, params, digest)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if not data.startswith(MAGIC):
        return None
    stored, newline, payload = data[len(MAGIC):].partition(b"\n")
    if not newline or stored != content.of(payload).encode():
        return None
    try:
        return pl.read_parquet(io.BytesIO(payload))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # noqa: BLE001 - pyo3's PanicException is a BaseException
        return None


def write_later(origin: Origin, name: str, params: tuple[Hashable, ...], digest: str,
                frame: pl.DataFrame) -> None:
    """Keep `frame` under this key, in the cache's writer thread."""
    cache.later(_write, origin, name, params, digest, frame)


def _write(origin: Origin, name: str, params: tuple[Hashable, ...], digest: str,
           frame: pl.DataFrame) -> None:
    folders = origin.folders(wait=True)
    if folders is None:
        return
    path = _path(folders, origin.narrowed, name, params, digest)
    buffer = io.BytesIO()
    frame.write_parquet(buffer, compression="snappy", statistics=False)
    payload = buffer.getvalue()
    try:
        path.parent.mkdir(exist_ok=True)  # not parents: a data folder removed stays so
        _replace(path, MAGIC + content.of(payload).encode() + b"\n" + payload)
        _prune(path.parent)
    except OSError:  # read-only, or the data folder went: computed again next time
        pass


def _replace(path: Path, data: bytes) -> None:
    """Write `path` atomically (a temporary file renamed over it), as the cache writes its
    Parquet files: without fsync, since a file a crash left short or garbled fails its
    digest and is computed again (an fsync took 5-10 ms here, and a first analysis
    writes four to six products)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _prune(folder: Path) -> None:
    """The oldest products beyond MAX_FILES; what writers killed long ago left."""
    files = []
    stale = time.time_ns() - cache.STALE_TMP_S * 10**9
    for entry in os.scandir(folder):
        try:
            if entry.name.endswith(".product"):
                files.append((entry.stat().st_mtime_ns, entry.path))
            elif entry.name.endswith(".tmp") and entry.stat().st_mtime_ns < stale:
                os.unlink(entry.path)
        except OSError:
            pass
    for _, path in sorted(files)[:max(0, len(files) - MAX_FILES)]:
        try:
            os.unlink(path)
        except OSError:
            pass
