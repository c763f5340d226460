"""Why a binary profile does not parse, when its bytes say so: two common ways a file
gets damaged on the way to the user, each with a plain fix in the error line.

- A Git LFS pointer instead of the file (a repository cloned without `git lfs pull`).
- Binary data decoded as text and written back as UTF-8 (a download or copy through a
  text API): every invalid byte became U+FFFD, bytes EF BF BD. The original is lost, so
  the protobuf error ("truncated field", "wire format was corrupt") misleads.
"""

from __future__ import annotations

_LFS_POINTER = b"version https://git-lfs"
_REPLACEMENT = b"\xef\xbf\xbd"  # U+FFFD in UTF-8


def hint(head: bytes) -> str:
    """'' or '; <why and what to do>' for the first bytes (up to 64 KiB) of a binary
    profile that did not parse."""
    head = bytes(head[:65536])
    if head.startswith(_LFS_POINTER):
        return "; it is a Git LFS pointer, not the file: run `git lfs pull`"
    # Random protobuf bytes hold EF BF BD about once in 16 MiB; a text-decoded file has
    # one for nearly every byte >= 0x80.
    if head.count(_REPLACEMENT) >= 4:
        return ("; it holds U+FFFD replacement characters (bytes EF BF BD): it was decoded "
                "as text somewhere on the way (a download or copy), which loses data; "
                "take the original bytes")
    return ""
