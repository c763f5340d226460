"""Protobuf wire bytes written by hand, for inputs protobuf's own serializer would not
write (fields out of order, damaged or huge messages): a varint and a length-delimited
field. Shared by tests/faults.py, tests/test_native_decoder.py and benchmarks/xplane.py."""

from __future__ import annotations


def varint(n: int) -> bytes:
    """`n` (>= 0) as a base-128 varint, low 7 bits first."""
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def delimited(field: int, payload: bytes) -> bytes:
    """Field number `field`, wire type 2 (length-delimited), holding `payload`."""
    return varint(field << 3 | 2) + varint(len(payload)) + payload
