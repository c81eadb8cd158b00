"""Rings Z_2^k on numpy uint64 arrays (k <= 64), plus exact ring matrix products.

Elements of Z_2^k are stored in uint64 arrays reduced mod 2^k. numpy's uint64 arithmetic
wraps mod 2^64, which is exactly what we want; for k < 64 we mask after each operation.

Matrix products never use numpy's integer matmul (two orders of magnitude slower than
float64 BLAS on these machines, see DESIGN.md). ``ring_matmul`` splits each operand into
16-bit limbs and multiplies limb pairs with float64 BLAS: each partial product is below
2^32 * inner_dim, which is exact in float64 while inner_dim < 2^21.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from secinfer.errors import ConfigError

_LIMB_BITS = 16
_MAX_EXACT_INNER = 1 << 20  # 2^32 * 2^20 < 2^53: float64 sums of limb products stay exact


@dataclass(frozen=True)
class Ring:
    """The ring Z_2^bits (bits in 1..64)."""

    bits: int

    def __post_init__(self) -> None:
        if not 1 <= self.bits <= 64:
            raise ConfigError(f"ring bit width must be in 1..64, got {self.bits}")

    @property
    def mask(self) -> np.uint64:
        return np.uint64((1 << self.bits) - 1) if self.bits < 64 else np.uint64(0xFFFFFFFFFFFFFFFF)

    @property
    def nbytes(self) -> int:
        """Bytes per element on the wire (whole bytes)."""
        return (self.bits + 7) // 8

    def reduce(self, a: np.ndarray) -> np.ndarray:
        a = np.asarray(a, dtype=np.uint64)
        return a if self.bits == 64 else a & self.mask

    def add(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.reduce(np.asarray(a, np.uint64) + np.asarray(b, np.uint64))

    def sub(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.reduce(np.asarray(a, np.uint64) - np.asarray(b, np.uint64))

    def neg(self, a: np.ndarray) -> np.ndarray:
        return self.reduce(np.uint64(0) - np.asarray(a, np.uint64))

    def mul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.reduce(np.asarray(a, np.uint64) * np.asarray(b, np.uint64))

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.reduce(ring_matmul(a, b))

    def to_signed(self, a: np.ndarray) -> np.ndarray:
        """Two's-complement interpretation as int64."""
        a = self.reduce(a)
        if self.bits == 64:
            return a.view(np.int64)
        sh = np.uint64(64 - self.bits)
        return (a << sh).view(np.int64) >> np.int64(64 - self.bits)

    def from_signed(self, a: np.ndarray) -> np.ndarray:
        return self.reduce(np.asarray(a, dtype=np.int64).view(np.uint64))

    def msb(self, a: np.ndarray) -> np.ndarray:
        """Most significant bit (the sign bit) as uint8."""
        return ((self.reduce(a) >> np.uint64(self.bits - 1)) & np.uint64(1)).astype(np.uint8)

    def arshift(self, a: np.ndarray, f: int) -> np.ndarray:
        """Arithmetic (sign-preserving, flooring) right shift by f bits."""
        return self.from_signed(self.to_signed(a) >> np.int64(f))


def ring_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact product of uint64 matrices mod 2^64 (supports numpy matmul broadcasting).

    Splits both operands into four 16-bit limbs and multiplies the limb pairs whose
    weight is below 2^64 with float64 BLAS (10 products).
    """
    a = np.asarray(a, dtype=np.uint64)
    b = np.asarray(b, dtype=np.uint64)
    inner = a.shape[-1]
    if inner >= _MAX_EXACT_INNER:
        # Split the inner dimension so each float64 partial sum stays exact.
        out = None
        for s in range(0, inner, _MAX_EXACT_INNER - 1):
            part = ring_matmul(a[..., s:s + _MAX_EXACT_INNER - 1], b[..., s:s + _MAX_EXACT_INNER - 1, :])
            out = part if out is None else out + part
        return out
    m16 = np.uint64(0xFFFF)
    al = [((a >> np.uint64(_LIMB_BITS * i)) & m16).astype(np.float64) for i in range(4)]
    bl = [((b >> np.uint64(_LIMB_BITS * j)) & m16).astype(np.float64) for j in range(4)]
    out = None
    for i in range(4):
        for j in range(4 - i):
            p = np.matmul(al[i], bl[j]).astype(np.uint64)
            p = p << np.uint64(_LIMB_BITS * (i + j))
            out = p if out is None else out + p
    return out


RING64 = Ring(64)
RING32 = Ring(32)
BOOL = Ring(1)
