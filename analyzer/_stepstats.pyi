"""Types of the C decoder analyzer/_stepstats.c."""

from typing import Any

class Decoder:
    def add(self, step_stats: bytes | memoryview, step: int, /) -> int | None: ...
    def finish(self) -> dict[str, Any]: ...
