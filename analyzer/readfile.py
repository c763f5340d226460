"""Reading one input file whole, within bounds: what every source does before parsing.

- Only regular files are read. A FIFO would block the open for ever, /dev/zero never
  ends, a socket cannot be opened: each is refused by its kind, before any byte is read
  (checked on the opened descriptor too, so a file swapped after the check is caught).
- A size check before the file is read into memory: more than `limit` bytes (protobuf's
  2 GiB for one message by default) is refused by its size, and a file still growing
  while it is read stops at the limit instead of filling memory.
- Any OSError is the file's one-line problem (InputFileError), never an internal error.

`shown` turns a name with bytes that are not UTF-8 (kept by Python as surrogate
escapes) into text that can be printed and stored: each such byte as \\xNN.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import InputFileError

MAX_BYTES = 2**31 - 1  # protobuf reads no message of 2 GiB or more
_CHUNK = 1 << 20


def kind(mode: int) -> str:
    """What a file that is not a regular one is, for messages."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def shown(name: str | os.PathLike[str]) -> str:
    """`name` (a path, or a message naming one) printable and storable in UTF-8 (JSON,
    Parquet, a terminal): each byte of a name that is not UTF-8 (kept by Python as a
    surrogate escape, U+DC80-U+DCFF) as \\xNN, any other lone surrogate as \\uNNNN. The
    one place names are turned into text: paths are compared and hashed as they are
    (`os.fsencode`), and shown only where displayed."""
    text = os.fspath(name)
    if isinstance(text, bytes):
        return text.decode("utf-8", "backslashreplace")
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return "".join(_escaped(c) for c in text)


def _escaped(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}" if 0xD800 <= code <= 0xDFFF else char


def regular(path: str | os.PathLike[str]) -> bool:
    """True for a regular file (a link to one too); False for anything else, or when it
    cannot be looked at (a loop, a folder that cannot be searched)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def special(path: str | os.PathLike[str]) -> str | None:
    """Why `path` will not be read (one line naming it), when it is not a regular file
    or cannot be looked at; None for a regular file."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        return f"{shown(path)}: cannot read ({e.strerror or e})"
    if stat.S_ISREG(mode):
        return None
    return f"{shown(path)}: {kind(mode)}, not a regular file"


def read_bytes(path: str | os.PathLike[str], limit: int = MAX_BYTES,
               what: str = "file") -> bytes:
    """The whole file; InputFileError (one line naming it) when it is not a regular file,
    is over `limit` bytes, or cannot be read."""
    name = shown(path)
    fd = open_checked(path)  # a regular file, checked before and on the open descriptor
    try:
        with os.fdopen(fd, "rb", buffering=0) as f:
            st = os.fstat(f.fileno())
            _check_size(name, st.st_size, limit, what)
            return _read_all(f, st.st_size, limit, name, what)
    except OSError as e:
        raise InputFileError(f"{name}: cannot read ({e.strerror or e})") from None
    try:
        with os.fdopen(fd, "rb", buffering=0) as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):  # replaced since the check
                raise InputFileError(f"{name}: {kind(st.st_mode)}, not a regular file")
            _check_size(name, st.st_size, limit, what)
            return _read_all(f, st.st_size, limit, name, what)
    except OSError as e:
        raise InputFileError(f"{name}: cannot read ({e.strerror or e})") from None


def _check_size(name: str, size: int, limit: int, what: str) -> None:
    if size > limit:
        raise InputFileError(f"{name}: {size:,} bytes, more than runlens reads as one "
                             f"{what} ({limit:,} bytes); not read")


def _read_all(f: object, size: int, limit: int, name: str, what: str) -> bytes:
    """`size` bytes, then what the file grew by since (a file of /proc says size 0), in
    chunks, never past `limit`."""
    read = f.read  # type: ignore[attr-defined]
    parts = [read(size)] if size else []
    total = len(parts[0]) if parts else 0
    while True:
        chunk = read(min(_CHUNK, limit + 1 - total))
        if not chunk:
            break
        parts.append(chunk)
        total += len(chunk)
        if total > limit:
            _check_size(name, total, limit, what)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def open_checked(path: str | os.PathLike[str]) -> int:
    """A read-only descriptor of `path` once it is known to be a regular file (for
    readers that map the file); InputFileError otherwise."""
    name = shown(path)
    why = special(path)
    if why is not None:
        raise InputFileError(why)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY
                     | getattr(os, "O_CLOEXEC", 0))
        st = os.fstat(fd)
    except OSError as e:
        raise InputFileError(f"{name}: cannot read ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise InputFileError(f"{name}: {kind(st.st_mode)}, not a regular file")
    return fd


def scan(folder: Path, named: object) -> tuple[list[Path], list[str]]:
    """The entries of `folder` whose name `named(name)` accepts, sorted: the regular files,
    and one line for each other entry so named (a FIFO, a device, a folder, a dangling
    link or a loop), which the source reports and skips. Nothing is opened."""
    files, problems = [], []
    for p in sorted(folder.iterdir()):
        if not named(p.name):  # type: ignore[operator]
            continue
        why = special(p)
        if why is None:
            files.append(p)
        else:
            problems.append(f"{why}; skipped")
    return files, problems
