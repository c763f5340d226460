"""Types of the C decoder analyzer/_xplane.c."""

import numpy as np

def split_plane(
    plane: bytes | memoryview, field: int = 3, depth: int = 99, utf8: int = 0, /
) -> tuple[list[tuple[int, int]], bytes]: ...
def decode_line(
    line: bytes | memoryview, stat_ids: tuple[int, ...], keep: bytes | None = None, /
) -> tuple[int, int, bytes, bytes, int, bytes, bytes, bytes, bytes, bytes, bytes]: ...
def decode_lines(
    buf: bytes | memoryview, spans: bytes, stat_ids: tuple[int, ...], keep: bytes | None = None, /
) -> tuple[bytes, bytes, list[bytes], bytes, int, bytes, bytes, bytes, bytes, bytes, bytes]: ...
def self_times(
    start: bytes | np.ndarray, dur: bytes | np.ndarray, group: bytes | np.ndarray = ..., /
) -> bytes: ...
