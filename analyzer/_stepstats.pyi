"""Types of the C decoder analyzer/_stepstats.c."""

from typing import Any, TypedDict

# A finished column: (numpy dtype string: "i8", "i4", "u4" or "u8"; its values, an object
# with the buffer protocol and __arrow_c_array__: pl.Series(values) takes them, no copy).
Column = tuple[str, Any]

class Decoded(TypedDict):
    """What Decoder.finish() returns: per table {column: Column} in COLUMNS' order
    (string columns as u4 codes into `strings`), and the interned values."""

    nodes: dict[str, Column]
    outputs: dict[str, Column]
    memory: dict[str, Column]
    allocations: dict[str, Column]
    threads: dict[str, Column]
    strings: list[str]
    shapes: list[list[int]]  # dims, by shape code
    keys: bytes  # per key_id: uint32 codes of lane, node_name, timeline_label
    output_keys: bytes  # per out_key: dtype number, shape code, allocator_name code

# Per table of Decoded, its columns (name, numpy dtype) in the decoder's order.
COLUMNS: dict[str, tuple[tuple[str, str], ...]]

class Decoder:
    added: int  # NodeExecStats the last add() added
    nameless: int  # NodeExecStats without a node name the last add() left out
    def expect(self, n: int, /) -> None: ...
    def add(self, step_stats: bytes | memoryview, step: int, /) -> int | None: ...
    def finish(self) -> Decoded: ...

def split_run_metadata(
    raw: bytes | bytearray | memoryview, /
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]: ...
def checksum(data: Any, /) -> int: ...  # any buffer (bytes, memoryview, mmap)
