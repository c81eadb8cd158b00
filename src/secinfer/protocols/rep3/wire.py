"""Ring elements on the wire: Z_2 packed 8 per byte, Z_2^l in the smallest word >= l."""

from __future__ import annotations

import numpy as np

from secinfer.net.channel import ArraySpec


def wire_dtype(bits: int):
    return np.uint8 if bits <= 8 else np.uint16 if bits <= 16 else np.uint32 if bits <= 32 else np.uint64


def pack(a: np.ndarray, bits: int) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.uint64)
    if bits == 1:
        return np.packbits(a.reshape(-1).astype(np.uint8) & 1)
    return a.astype(wire_dtype(bits)) if bits < 64 else a


def packed_spec(bits: int, shape) -> ArraySpec:
    shape = tuple(shape)
    if bits == 1:
        return ArraySpec(np.uint8, (-(-int(np.prod(shape, dtype=np.int64)) // 8),))
    return ArraySpec(wire_dtype(bits), shape)


def unpack(buf: np.ndarray, bits: int, shape) -> np.ndarray:
    shape = tuple(shape)
    if bits == 1:
        n = int(np.prod(shape, dtype=np.int64))
        return np.unpackbits(buf, count=n).astype(np.uint64).reshape(shape)
    if bits == 64:   # already the ring's word: the received array itself (no copy of it)
        return buf if buf.dtype == np.uint64 else buf.astype(np.uint64)
    return buf.astype(np.uint64) & np.uint64((1 << bits) - 1)
