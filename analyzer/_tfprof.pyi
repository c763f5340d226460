"""Types of the C reader analyzer/_tfprof.c."""

def runs(raw: bytes | memoryview, /) -> tuple[
    bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes,
    list[str]]: ...
