"""The one writer of files: every `-o/--output` of the CLI (views, timeline, report,
compare, baseline save) and the run dir's and cache's own files (rundir.atomic_write).

What a path is decides how it is written:
- a regular file, or a path that does not exist yet: atomically, a temporary file beside
  it renamed over it (a reader sees the old file or the whole new one; a failure leaves
  the old file as it was), keeping the old file's permissions;
- a symbolic link: the file it points to, atomically beside that file (the link stays a
  link; a dangling link's target is created);
- a FIFO, a character device (/dev/null, a terminal, /proc/self/fd/1 of a pipe) or `-`
  (standard output): streamed, as a shell's `>` would (a device node is never replaced);
- anything else (a directory, a block device, a socket): refused.
`check` says before long work whether a path can be written; `write` and `open_output`
raise RunlensError (exit 2) naming the path and the reason, never an OSError.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from .errors import RunlensError

STDOUT = "-"


def _shown(path: str | os.PathLike[str]) -> str:
    from .readfile import shown

    return shown(path)


def _target(path: str | os.PathLike[str]) -> tuple[str, os.stat_result | None]:
    """(where to write: the path, or the file a link points to; its stat or None when it
    does not exist). OSError when it cannot be looked at (a loop, no permission)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    target = os.path.realpath(path) if os.path.islink(path) or st is not None else path
    if st is not None and not stat.S_ISREG(st.st_mode):
        target = os.fspath(path)  # streamed through the path itself (/proc/self/fd/1)
    return os.fspath(target), st


def _streamed(st: os.stat_result | None) -> bool:
    return st is not None and (stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode))


def check(path: str | os.PathLike[str]) -> Path:
    """`path` when it can be written (see the module docstring); RunlensError otherwise."""
    if os.fspath(path) == STDOUT:
        return Path(STDOUT)
    p = Path(path)
    try:
        target, st = _target(p)
    except OSError as e:
        raise RunlensError(f"{_shown(p)}: cannot write ({e.strerror or e})") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise RunlensError(f"{_shown(p)}: is a directory (give a file name, e.g. "
                           f"{_shown(p)}/trace.json)")
    if _streamed(st):
        return p
    if st is not None and not stat.S_ISREG(st.st_mode):
        from .readfile import kind

        raise RunlensError(f"{_shown(p)}: {kind(st.st_mode)}; runlens writes a regular file, "
                           "a new path, a FIFO, a character device or - (standard output)")
    folder = os.path.dirname(target) or "."
    if not os.path.isdir(folder):
        raise RunlensError(f"{_shown(p)}: directory {_shown(folder)} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise RunlensError(f"{_shown(p)}: cannot write (directory {_shown(folder)}: "
                           "Permission denied)")
    return p


@contextlib.contextmanager
def opened(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """A binary file that becomes `path` when the block ends without an error (see the
    module docstring); OSError on failure, the old file untouched."""
    if os.fspath(path) == STDOUT:
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    target, st = _target(path)
    if _streamed(st):
        fd = os.open(target, os.O_WRONLY | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "wb") as f:
            yield f
        return
    if st is not None and not stat.S_ISREG(st.st_mode):
        from .readfile import kind

        raise IsADirectoryError(21, f"{kind(st.st_mode)}, not a regular file", target) \
            if stat.S_ISDIR(st.st_mode) else OSError(f"{kind(st.st_mode)}: not written")
    name = os.path.basename(target)
    tmp = os.path.join(os.path.dirname(target) or ".",
                       f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # O_EXCL with mode 0o666 honours the umask, unlike tempfile.mkstemp's 0o600.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                 0o666)
    try:
        if st is not None:
            os.chmod(tmp, stat.S_IMODE(st.st_mode))  # the replaced file's permissions
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def open_output(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """`opened`, its OSError a RunlensError naming the path and the reason."""
    try:
        with opened(path) as f:
            yield f
    except OSError as e:
        if isinstance(e, BrokenPipeError):
            raise  # the reader left (`... -o - | head`): the CLI exits quietly
        raise RunlensError(f"{_shown(path)}: cannot write ({e.strerror or e})") from None


def write(path: str | os.PathLike[str], data: bytes) -> int:
    """Write `data` to `path` (see the module docstring); the bytes written."""
    with open_output(path) as f:
        f.write(data)
    return len(data)
