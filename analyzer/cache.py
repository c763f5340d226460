"""Columnar cache of ingested inputs: Parquet files keyed by the inputs' content.

A second analysis of the same run reads columns only. The cache of a run dir lives in its
`.runlens/` folder, or in the user cache dir when the run dir is read-only, or only under
$RUNLENS_CACHE_DIR when that is set. The cache can
never make things worse than no cache: whatever goes wrong with it (missing, stale,
truncated, corrupt, written by another version, replaced while read, unwritable) means
"recompute", with at most one warning, and a broken cache is replaced by the next write.

Key (`fingerprint_files`, for any source's list of files): per file its size, mtime,
ctime and inode, and, written with the cache, a digest of all its content
(analyzer.digest; ingest computes it of the bytes it reads: no second read). A file
whose stat is unchanged was not written since (any write moves ctime, which no tool
sets back): a warm load costs one stat per file. One whose stat changed (a copy, a
touch, a same-size edit with mtime restored) is read, and the cache is used only if its
content is the same (key.json then takes the new stat). Files changed less than RACY_NS
before the key was taken are read on every load: a change within the file system's
timestamp granularity may not show.

Layout: `<location>/key.json` names the data folder holding the frames
(`data-<token>/*.parquet`, with their sizes and digests). A writer writes a new data
folder beside the old one and then replaces key.json (atomic rename): a reader sees the
old cache or the new one, whole. A reader holds a shared flock on the data folder it
reads (lazily, until its Run is gone); writers remove old data folders only when they get
an exclusive lock on them, i.e. when no reader can be reading them. A data folder also
holds the products derived from its frames (`products/`, analyzer.productcache), which
go with it.

The cache is written in a background thread (`store_in_background`) while the analysis
goes on; what the analysis derives (analyzer.products) is written by the same thread
(`later`), after the frames, into the data folder they went to (analyzer.productcache).
The process waits for it before exiting, and `wait()` (which load_run calls) before
reading again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import mmap
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any, NamedTuple

import polars as pl

from . import digest as content
from .background import Background
from .rundir import atomic_write
from .schema import CACHED_FRAMES
from .sources import Part

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Linux/macOS: old data folders are kept
    fcntl = None  # type: ignore[assignment]

CACHE_VERSION = 11  # the layout (folder names, key.json); what it holds is keyed by code_digest
KEY_FILE = "key.json"
LOCK_FILE = ".lock"
FRAMES = CACHED_FRAMES  # in the order written (analyzer/schema.py)
# Numbers only, rows by the million: written uncompressed (1M executions: 0.08 s and
# 0.15 CPU-s for 44 MB, vs snappy's 0.12 s and 0.23 CPU-s for 22 MB).
UNCOMPRESSED = ("executions", "output_rows")
RACY_NS = 2_000_000_000  # timestamps of FAT: 2 s; ext4, xfs, btrfs, tmpfs: <= 10 ms
STALE_TMP_S = 3600  # a writer's temporary folder this old was left by a killed process


class CacheDamaged(Exception):
    """The cache could not be read (str: why); the caller recomputes."""


# ----------------------------------------------------------------------------- key


@functools.cache
def code_digest() -> str:
    """A digest of the engine's own code (`code_files`, as installed): the cache holds
    what this code read, so a cache written by other code, even of the same version
    number, is never read (no hand-bumped version to forget; what is derived from the
    frames is keyed by its own code: analyzer.products). ~1 ms, once per process."""
    package = Path(__file__).parent
    h = hashlib.blake2b(digest_size=16)
    for path in code_files():
        h.update(path.relative_to(package).as_posix().encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def code_files() -> list[Path]:
    """The files whose code could decide what the cache holds: every module of analyzer/
    and its packages (a new package is covered without a change here), its C sources (and
    their #included parts) and built modules."""
    found = []
    for folder, subs, names in os.walk(Path(__file__).parent):  # (4 rglobs took ~8 ms)
        subs[:] = [d for d in subs if d != "__pycache__"]
        found += [Path(folder, n) for n in names if n.endswith((".py", ".c", ".h", ".so"))]
    return sorted(p for p in found if p.suffix != ".so" or p.name[0] == "_")


def fingerprint_files(root: str | os.PathLike[str], worker: str,
                      files: Iterable[str | os.PathLike[str]]) -> dict[str, Any]:
    """What a cache of `files` (under `root`) depends on, from their stat only (cheap:
    ~2 us a file). The content digests are added when the cache is written."""
    root_s = str(root)
    prefix = len(os.path.join(root_s, "x")) - 1
    stat = os.stat
    entries = []
    for name in map(str, files):
        st = stat(name)
        entries.append([name[prefix:] if name.startswith(root_s) else name, st.st_size,
                        st.st_mtime_ns, st.st_ctime_ns, st.st_ino])
    entries.sort()
    return {"cache_version": CACHE_VERSION, "code": code_digest(), "worker": worker,
            "root": str(root),
            "taken_ns": time.time_ns(), "files": entries}


def fingerprint(part: Part) -> dict[str, Any]:
    """The key of a source's part: its kind, worker and files (named relative to its
    folder)."""
    return {**fingerprint_files(_folder(part), part.worker, part.files), "source": part.kind}


def _folder(part: Part) -> Path:
    """The folder a part's cache goes in (beside a file part)."""
    return part.path if part.path.is_dir() else part.path.parent


def _with_digests(key: dict[str, Any], known: Mapping[str, list[Any]]
                  ) -> dict[str, Any] | None:
    """The key with each file's digest (from `known`: path -> [stat..., crc] of the bytes
    the frames came from, or read now), or None when a file changed since the key was
    taken (the frames may hold either version: no cache)."""
    root = key["root"]
    files = []
    for rel, size, mtime, ctime, ino in key["files"]:
        path = rel if os.path.isabs(rel) else os.path.join(root, rel)
        if path in known:
            stat, digest = known[path][:4], known[path][4]
        else:
            try:
                digest, stat = content.of_file(path)
            except OSError:
                return None
        if stat != [size, mtime, ctime, ino]:
            return None
        racy = ctime >= key["taken_ns"] - RACY_NS or mtime >= key["taken_ns"] - RACY_NS
        files.append([rel, size, mtime, ctime, ino, digest, racy])
    return {**key, "files": files}


def _matches(stored: Any, key: dict[str, Any]) -> list[int] | None:
    """When the cache written under `stored` holds the inputs `key` describes (same
    version, worker and files, each unchanged: same stat and not racy, or the same
    content), the indexes of the files whose content had to be compared (their stat
    changed, or they were racy); else None."""
    if not isinstance(stored, dict) or any(stored.get(k) != key[k]
                                           for k in ("cache_version", "code", "source",
                                                     "worker")):
        return None
    old = stored.get("files")
    if not isinstance(old, list) or len(old) != len(key["files"]):
        return None
    try:  # the usual case, at C speed: every stat as written, nothing racy
        if [e[:5] for e in old] == key["files"] and not any(e[6] for e in old):
            return []
    except (TypeError, IndexError, KeyError):
        return None
    restat = []
    for i, (entry, now) in enumerate(zip(old, key["files"], strict=True)):
        if not isinstance(entry, list) or len(entry) != 7 or entry[:2] != now[:2]:
            return None  # another file, or another size
        if entry[2:5] == now[2:5] and not entry[6]:
            continue
        path = now[0] if os.path.isabs(now[0]) else os.path.join(key["root"], now[0])
        try:
            digest, stat = content.of_file(path)
        except OSError:
            return None
        if digest != entry[5] or stat != now[1:5]:
            return None
        restat.append(i)  # its content is the frames': key.json takes its stat (no longer
        # racy once old enough), so that the next load takes the fast path
    return restat


def _refreshed(meta: dict[str, Any], key: dict[str, Any], restat: list[int]) -> bytes:
    """key.json with the new stat of files found unchanged by content (a copied or
    touched run, or one analysed as soon as written, is digested once, not on every
    load)."""
    files = [list(e) for e in meta["key"]["files"]]
    for i in restat:
        files[i][1:5] = key["files"][i][1:5]
        files[i][6] = files[i][3] >= key["taken_ns"] - RACY_NS or (
            files[i][2] >= key["taken_ns"] - RACY_NS)
    return json.dumps({**meta, "key": {**meta["key"], "files": files}}).encode()


# ----------------------------------------------------------------------------- reading


def _user_cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "runlens"


CACHE_DIR_VARIABLE = "RUNLENS_CACHE_DIR"


def _locations(run: Part) -> list[Path]:
    """Where a part's cache lives: beside its files, else in the user cache dir; only
    under $RUNLENS_CACHE_DIR when that is set (nothing is written beside the data: read-only
    or shared inputs, and the tests, which must leave what they read byte-identical)."""
    digest = hashlib.sha256(b"%s:%s" % (run.kind.encode(), os.fsencode(run.path.resolve()))
                            ).hexdigest()[:16]
    chosen = os.environ.get(CACHE_DIR_VARIABLE)
    if chosen:
        return [Path(chosen) / f"{digest}-v{CACHE_VERSION}"]
    # A run dir's cache is its own; other parts may share a folder, so theirs are named.
    name = "cache" if run.kind == "rundir" else f"cache-{run.kind}-{digest[:8]}"
    return [_folder(run) / ".runlens" / f"{name}-v{CACHE_VERSION}",
            _user_cache_root() / f"{digest}-v{CACHE_VERSION}"]


class _Lease:
    """A shared lock on a data folder: writers do not remove it while this is held."""

    def __init__(self, folder: Path) -> None:
        self.fd = os.open(folder / LOCK_FILE, os.O_RDONLY)
        if fcntl is not None:
            fcntl.flock(self.fd, fcntl.LOCK_SH)

    def __del__(self) -> None:
        fd, self.fd = getattr(self, "fd", -1), -1
        if fd >= 0:
            os.close(fd)


def _utf8(path: Path) -> bool:
    try:
        os.fspath(path).encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _read_frame(path: Path, size: int, crc: str, lease: _Lease) -> pl.DataFrame:
    """One cached frame, checked against its size and digest (~10 GB/s) before polars
    reads it; CacheDamaged for anything that goes wrong (polars' panics included)."""
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size != size:
                raise CacheDamaged(f"{path.name}: {os.fstat(f.fileno()).st_size} bytes, "
                                   f"written with {size}")
            if size:
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                    if content.of(m) != crc:
                        raise CacheDamaged(f"{path.name}: checksum mismatch")
        if not _utf8(path):  # polars takes only UTF-8 paths: a run dir named in any bytes
            with open(path, "rb") as f:
                return pl.read_parquet(f)
        return pl.read_parquet(path)
    except CacheDamaged:
        raise
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # noqa: BLE001 - pyo3's PanicException is a BaseException
        raise CacheDamaged(f"{path.name}: {type(e).__name__}: "
                           f"{' '.join(str(e).split())[:200]}") from None


Readers = dict[str, Callable[[], pl.DataFrame]]


class Cached(NamedTuple):
    """A cache found: readers of its frames (read when first used), the warnings stored
    with them, its data folder (where products go: analyzer.productcache) and the lease
    that keeps that folder while held."""

    readers: Readers
    warnings: list[str]
    folder: Path
    lease: object


def load_at(locs: list[Path], key: dict[str, Any]) -> Cached | None | CacheDamaged:
    """The cache at the first of `locs` that matches `key`; None when no cache matches;
    CacheDamaged (returned, not raised) when one exists but cannot be read."""
    damaged: CacheDamaged | None = None
    for loc in locs:
        for _ in range(3):  # a writer may replace the data folder between two steps
            try:
                return _open(loc, key)
            except _Missing:
                break
            except _Replaced:
                continue
            except CacheDamaged as e:
                damaged = damaged or CacheDamaged(f"{loc}: {e}")
                break
    return damaged


class _Missing(Exception):
    pass


class _Replaced(Exception):
    pass


def _open(loc: Path, key: dict[str, Any]) -> Cached:
    try:
        text = (loc / KEY_FILE).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        # NotADirectoryError: a file named .runlens (not ours) where the cache folder
        # goes: no cache there (never removed), the next location (the user cache dir)
        # holds it, silently, as for a read-only run dir.
        raise _Missing from None
    except OSError as e:
        raise CacheDamaged(f"{KEY_FILE}: cannot read ({e.strerror or e})") from None
    try:
        meta = json.loads(text)
        stored, data, warnings = meta["key"], meta["data"], meta["warnings"]
        frames = meta["frames"]
        if not (isinstance(data, str) and isinstance(warnings, list)
                and isinstance(frames, dict)):
            raise TypeError("wrong types")
    except (ValueError, RecursionError, KeyError, TypeError) as e:
        raise CacheDamaged(f"{KEY_FILE}: not a cache key ({type(e).__name__})") from None
    restat = _matches(stored, key)
    if restat is None:
        raise _Missing
    folder = loc / data
    try:
        lease = _Lease(folder)
    except OSError:
        raise _Replaced from None
    if not (folder / LOCK_FILE).exists():  # removed before we held it
        raise _Replaced
    readers: Readers = {}
    for name in FRAMES:  # held: no writer removes these files any more
        try:
            size, crc = frames[name]
            if not (isinstance(size, int) and isinstance(crc, str)):
                raise TypeError
        except (KeyError, TypeError, ValueError):
            raise CacheDamaged(f"{KEY_FILE}: no size and checksum of {name}") from None
        # Size and content are checked when the frame is read (a missing or damaged
        # file found then means "recompute", as here).
        readers[name] = functools.partial(_read_frame, folder / f"{name}.parquet", size,
                                          crc, lease)
    if restat:
        try:
            atomic_write(loc / KEY_FILE, _refreshed(meta, key, restat))
        except OSError:  # read-only: the digests are compared again next time
            pass
    return Cached(readers, [str(w) for w in warnings], folder, lease)


def load(run: Part, key: dict[str, Any]) -> Cached | None | CacheDamaged:
    """`load_at` the part's cache locations."""
    return load_at(_locations(run), key)


# ----------------------------------------------------------------------------- writing


CacheFrame = pl.DataFrame | Future  # a Future: a frame still being computed


def _file_digest(path: Path) -> tuple[int, str]:
    found, stat = content.of_file(path)
    return stat[0], found


def store_at(locs: list[Path], key: dict[str, Any], frames: Mapping[str, CacheFrame],
             warnings: list[str], digests: Mapping[str, list[Any]] | None = None
             ) -> Path | None:
    """Write the cache to the first writable location; returns the data folder written,
    or None if none is, if an input changed while it was read, or if a frame's Future
    fails (its computation failed, so there is no cache). `digests`: what the reader
    computed of the files it read (path -> [size, mtime_ns, ctime_ns, inode, digest]);
    the others are read here."""
    full_key = _with_digests(key, digests or {})
    if full_key is None:
        return None
    for loc in locs:
        try:
            loc.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=loc.parent))
        except OSError:
            continue
        try:
            sums: dict[str, tuple[int, str]] = {}
            for name in FRAMES:
                frame = frames[name]
                if isinstance(frame, Future):
                    try:
                        frame = frame.result()
                    except BaseException:
                        shutil.rmtree(tmp, ignore_errors=True)
                        return None
                # Frames but UNCOMPRESSED ones: snappy, the fastest to write at about
                # lz4's size.
                path = tmp / f"{name}.parquet"
                with open(path, "wb") as f:  # (polars takes only UTF-8 paths)
                    frame.write_parquet(f, statistics=False,
                                        compression="uncompressed" if name in UNCOMPRESSED
                                        else "snappy")
                sums[name] = _file_digest(path)
            (tmp / LOCK_FILE).touch()
            data = f"data-{time.time_ns():x}-{secrets.token_hex(4)}"
            loc.mkdir(exist_ok=True)
            os.replace(tmp, loc / data)
            meta = {"key": full_key, "data": data, "frames": sums, "warnings": warnings}
            atomic_write(loc / KEY_FILE, json.dumps(meta).encode())
            _remove_unused(loc, keep=data)
            _remove_other_versions(loc)
            return loc / data
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            continue
    return None


def store(run: Part, key: dict[str, Any], frames: Mapping[str, CacheFrame],
          warnings: list[str], digests: Mapping[str, list[Any]] | None = None
          ) -> Path | None:
    """`store_at` the part's cache locations."""
    return store_at(_locations(run), key, frames, warnings, digests)


# Its thread is joined when the interpreter exits: the cache is finished first. An error
# no `store` expects (a bug: it turns OSError and failed frames into no cache) is one
# warning.
_writer = Background(1, "runlens-cache")


def store_in_background(run: Part, key: dict[str, Any], frames: Mapping[str, CacheFrame],
                        warnings: list[str], digests: Mapping[str, list[Any]] | None = None
                        ) -> Future:
    """`store` in the cache's writer thread; frames given as Futures are written when the
    caller sets them (it must set or fail every one of them, or the writer waits)."""
    return _writer.detach(store, run, key, dict(frames), list(warnings), digests)


def later(fn: Callable[..., Any], *args: Any) -> Future:
    """fn(*args) in the cache's writer thread, after the caches submitted so far."""
    return _writer.detach(fn, *args)


def wait() -> None:
    """Until the caches being written by this process are written (or given up)."""
    _writer.wait()


def _remove_unused(loc: Path, keep: str) -> None:
    """Data folders other than `keep` that no reader holds; temporary folders of writers
    killed long ago."""
    for other in loc.iterdir():
        if other.name == keep or not other.name.startswith("data-") or fcntl is None:
            continue
        try:
            fd = os.open(other / LOCK_FILE, os.O_RDONLY)
        except OSError:
            shutil.rmtree(other, ignore_errors=True)  # no lock file: not ours, or half gone
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # a reader holds it: a later writer removes it
        try:
            shutil.rmtree(other, ignore_errors=True)
        finally:
            os.close(fd)
    now = time.time()
    for tmp in loc.parent.glob(".tmp-*"):
        try:
            if now - tmp.stat().st_mtime > STALE_TMP_S:
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError:
            pass


def _remove_other_versions(loc: Path) -> None:
    """Caches that an older (or newer) runlens wrote next to `loc` are never read again."""
    prefix = loc.name.rsplit("-v", 1)[0] + "-v"
    for other in loc.parent.glob(f"{prefix}*"):
        if other != loc and other.is_dir() and other.name[len(prefix):].isdigit():
            shutil.rmtree(other, ignore_errors=True)
