"""One content digest, for what ingest reads and what the cache checks.

The C module's 64-bit checksum (~10 GB/s, four parallel lanes; analyzer/_stepstats.c)
where it is built, else zlib's CRC-32 (~1-3 GB/s). The name says which: a digest taken
by the other one never matches, which the cache reads as "changed" (recompute).
Detects change and damage; not cryptographic.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
import zlib
from typing import Any

try:
    from . import _stepstats
except ImportError:  # pragma: no cover - depends on the install
    _stepstats = None  # type: ignore[assignment]

Buffer = bytes | bytearray | memoryview | mmap.mmap


def of(data: Buffer) -> str:
    """The digest of `data` (bytes-like; the GIL is released while it is computed)."""
    if _stepstats is not None:
        return f"w{_stepstats.checksum(data):016x}"
    return f"c{zlib.crc32(data):08x}"


def of_file(path: str | os.PathLike[str]) -> tuple[str, list[Any]]:
    """(digest of the file's content, [size, mtime_ns, ctime_ns, inode] of the same open
    file)."""
    # O_NONBLOCK: a FIFO put in a file's place must not block (it is refused below).
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
        if st.st_size:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                digest = of(m)
        else:
            digest = of(b"")
    return digest, [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
