"""Types of the C row renderer analyzer/_jsonrows.c."""

from typing import Any

def render(segments: list[tuple[Any, ...]], start: int, stop: int, prefix: bytes,
           suffix: bytes, /) -> bytes: ...
