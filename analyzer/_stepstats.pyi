"""Types of the C decoder analyzer/_stepstats.c."""

from typing import Any

class Decoder:
    added: int  # NodeExecStats the last add() added
    nameless: int  # NodeExecStats without a node name the last add() left out
    def expect(self, n: int, /) -> None: ...
    def add(self, step_stats: bytes | memoryview, step: int, /) -> int | None: ...
    def finish(self) -> dict[str, Any]: ...

def split_run_metadata(
    raw: bytes | bytearray | memoryview, /
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]: ...
def checksum(data: Any, /) -> int: ...  # any buffer (bytes, memoryview, mmap)
