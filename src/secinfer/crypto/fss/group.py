"""Output groups Z_2^k for FSS, k in 1..128, as little-endian uint64 limbs.

An element array has shape ``(..., L)`` with ``L = 1`` limb for k <= 64 and ``L = 2``
limbs for 64 < k <= 128 (value = limb0 + 2^64 * limb1, top limb masked to k - 64 bits).
Two limbs are what the lifted ring of the CRISP consistency check needs:
Z_2^(n+s) with n <= 64 and s = 40 [CRISP V-B, Cramer et al. SPDZ_2k], i.e. k <= 104.

All operations are vectorised numpy over uint64 (which wraps mod 2^64); carries between
limbs are computed explicitly. ``to_int``/``from_int`` convert to Python integers and are
meant for tests and for small scalars, not for bulk data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from secinfer.errors import ConfigError

_M64 = (1 << 64) - 1
_U32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)


def _wrapping(fn):
    """uint64 arithmetic wraps mod 2^64 on purpose; silence numpy's scalar overflow warning
    (0-d operands, e.g. a single MAC key, go through numpy's scalar path)."""
    import functools

    @functools.wraps(fn)
    def inner(*args, **kwargs):
        with np.errstate(over="ignore"):
            return fn(*args, **kwargs)
    return inner


@_wrapping
def mul_64x64_128(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Full 128-bit product of uint64 arrays as (low, high) words (schoolbook on 32-bit halves)."""
    a = np.asarray(a, np.uint64)
    b = np.asarray(b, np.uint64)
    a0, a1 = a & _U32, a >> _S32
    b0, b1 = b & _U32, b >> _S32
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = p01 + p10
    mid_carry = (mid < p01).astype(np.uint64)
    lo = p00 + (mid << _S32)
    lo_carry = (lo < p00).astype(np.uint64)
    hi = p11 + (mid >> _S32) + (mid_carry << _S32) + lo_carry
    return lo, hi


@dataclass(frozen=True)
class Z2k:
    """The additive group / ring Z_2^k on limb arrays of shape (..., limbs)."""

    bits: int

    def __post_init__(self) -> None:
        if not 1 <= self.bits <= 128:
            raise ConfigError(f"FSS output group Z_2^k needs 1 <= k <= 128, got k = {self.bits}")

    # ---- shape and masks -------------------------------------------------------------
    @property
    def limbs(self) -> int:
        return 1 if self.bits <= 64 else 2

    @property
    def top_mask(self) -> np.uint64:
        top_bits = self.bits - 64 * (self.limbs - 1)
        return np.uint64(_M64 if top_bits == 64 else (1 << top_bits) - 1)

    @property
    def raw(self) -> "Z2k":
        """The same limbs without masking (Z_2^(64 L)): for intermediate sums, since reducing
        mod 2^k commutes with + and *, callers reduce once at the end."""
        return Z2k(64 * self.limbs)

    @property
    def nbytes(self) -> int:
        """Bytes per element as stored (whole limbs)."""
        return 8 * self.limbs

    def reduce(self, a: np.ndarray) -> np.ndarray:
        """Mask the top limb (returns a new array unless ``a`` is already a fresh result)."""
        a = np.array(a, np.uint64, copy=True)
        return self._mask_inplace(a)

    def _mask_inplace(self, a: np.ndarray) -> np.ndarray:
        if self.top_mask != np.uint64(_M64):
            a[..., -1] &= self.top_mask
        return a

    def is_reduced(self, a: np.ndarray) -> bool:
        return bool(np.all((a[..., -1] & ~self.top_mask) == 0))

    def zeros(self, shape) -> np.ndarray:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        return np.zeros(shape + (self.limbs,), np.uint64)

    def random(self, prg, shape) -> np.ndarray:
        """Uniform elements drawn from an injected ``secinfer.crypto.prg.PRG``."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        return self.reduce(prg.uint64(shape + (self.limbs,)))

    # ---- conversions -----------------------------------------------------------------
    def from_u64(self, u: np.ndarray) -> np.ndarray:
        """Embed non-negative integers < 2^64 given as uint64 (reduced mod 2^k)."""
        u = np.asarray(u, np.uint64)
        out = np.zeros(u.shape + (self.limbs,), np.uint64)
        out[..., 0] = u
        return self.reduce(out)

    def from_signed64(self, v: np.ndarray) -> np.ndarray:
        """Embed int64 values (two's complement, sign-extended into the top limb)."""
        v = np.asarray(v, np.int64)
        out = np.zeros(v.shape + (self.limbs,), np.uint64)
        out[..., 0] = v.view(np.uint64)
        if self.limbs == 2:
            out[..., 1] = np.where(v < 0, np.uint64(_M64), np.uint64(0))
        return self.reduce(out)

    def from_int(self, x) -> np.ndarray:
        """Python int(s) (any sign) -> elements. For scalars, tests and small arrays."""
        arr = np.asarray(x, dtype=object)
        flat = [int(v) % (1 << self.bits) for v in arr.reshape(-1)]
        out = np.zeros((len(flat), self.limbs), np.uint64)
        for i, v in enumerate(flat):
            for j in range(self.limbs):
                out[i, j] = (v >> (64 * j)) & _M64
        return out.reshape(arr.shape + (self.limbs,))

    def to_int(self, a: np.ndarray) -> np.ndarray:
        """Elements -> object array of Python ints in [0, 2^k)."""
        a = np.asarray(a, np.uint64)
        out = np.zeros(a.shape[:-1], dtype=object)
        for j in range(self.limbs):
            out = out + (a[..., j].astype(object) << (64 * j))
        return out

    def to_signed_int(self, a: np.ndarray) -> np.ndarray:
        v = self.to_int(a)
        half = 1 << (self.bits - 1)
        return np.where(v >= half, v - (1 << self.bits), v)

    @property
    def packed_bytes(self) -> int:
        """Bytes per element when packed for storage / the wire: ceil(k / 8)."""
        return -(-self.bits // 8)

    def pack(self, a: np.ndarray) -> np.ndarray:
        """(..., L) limbs -> (..., ceil(k/8)) little-endian bytes."""
        a = np.ascontiguousarray(a, dtype="<u8")
        return a.view(np.uint8).reshape(a.shape[:-1] + (8 * self.limbs,))[..., :self.packed_bytes].copy()

    def unpack(self, b: np.ndarray) -> np.ndarray:
        """Inverse of ``pack``; the result may be unreduced if ``b`` is malformed (check it)."""
        out = np.zeros(b.shape[:-1] + (8 * self.limbs,), np.uint8)
        out[..., :self.packed_bytes] = b
        return out.view("<u8").astype(np.uint64).reshape(b.shape[:-1] + (self.limbs,))

    def low_u64(self, a: np.ndarray) -> np.ndarray:
        """The low 64 bits (the whole value when k <= 64)."""
        return np.asarray(a, np.uint64)[..., 0].copy()

    # ---- arithmetic ------------------------------------------------------------------
    @_wrapping
    def add(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = np.asarray(a, np.uint64), np.asarray(b, np.uint64)
        if self.limbs == 1:
            return self._mask_inplace(a + b)
        out = np.empty(np.broadcast_shapes(a.shape, b.shape), np.uint64)
        lo = np.add(a[..., 0], b[..., 0], out=out[..., 0])
        hi = np.add(a[..., 1], b[..., 1], out=out[..., 1])
        hi += lo < a[..., 0]
        return self._mask_inplace(out)

    @_wrapping
    def neg(self, a: np.ndarray) -> np.ndarray:
        a = np.asarray(a, np.uint64)
        if self.limbs == 1:
            return self._mask_inplace(np.uint64(0) - a)
        out = np.empty(a.shape, np.uint64)
        np.subtract(np.uint64(0), a[..., 0], out=out[..., 0])
        hi = np.subtract(np.uint64(0), a[..., 1], out=out[..., 1])
        hi -= a[..., 0] != 0
        return self._mask_inplace(out)

    @_wrapping
    def sub(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = np.asarray(a, np.uint64), np.asarray(b, np.uint64)
        if self.limbs == 1:
            return self._mask_inplace(a - b)
        out = np.empty(np.broadcast_shapes(a.shape, b.shape), np.uint64)
        np.subtract(a[..., 0], b[..., 0], out=out[..., 0])
        hi = np.subtract(a[..., 1], b[..., 1], out=out[..., 1])
        hi -= a[..., 0] < b[..., 0]
        return self._mask_inplace(out)

    def cond_neg(self, a: np.ndarray, bit: np.ndarray) -> np.ndarray:
        """(-1)^bit * a, bit broadcast over the trailing axes of ``a``."""
        bit = np.asarray(bit).astype(bool)
        bit = bit.reshape(bit.shape + (1,) * (a.ndim - bit.ndim))
        return np.where(bit, self.neg(a), a)

    def select(self, bit: np.ndarray, a: np.ndarray) -> np.ndarray:
        """bit * a for bits in {0,1}, broadcast over the trailing axes of ``a``."""
        bit = np.asarray(bit).astype(bool)
        bit = bit.reshape(bit.shape + (1,) * (a.ndim - bit.ndim))
        return np.where(bit, a, np.uint64(0))

    @_wrapping
    def mul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = np.asarray(a, np.uint64), np.asarray(b, np.uint64)
        if self.limbs == 1:
            return self.reduce(a * b)
        lo, hi = mul_64x64_128(a[..., 0], b[..., 0])
        hi = hi + a[..., 0] * b[..., 1] + a[..., 1] * b[..., 0]
        return self.reduce(np.stack([lo, hi], axis=-1))

    @_wrapping
    def mul_u64(self, a: np.ndarray, u: np.ndarray) -> np.ndarray:
        """a * u with u a non-negative integer < 2^64 per element (uint64, broadcast)."""
        a = np.asarray(a, np.uint64)
        u = np.asarray(u, np.uint64)
        if self.limbs == 1:
            return self.reduce((a[..., 0] * u)[..., None])
        lo, hi = mul_64x64_128(a[..., 0], u)
        hi = hi + a[..., 1] * u
        return self.reduce(np.stack([lo, hi], axis=-1))

    @_wrapping
    def shl(self, a: np.ndarray, s: int) -> np.ndarray:
        """a * 2^s."""
        a = np.asarray(a, np.uint64)
        if s >= self.bits:
            return np.zeros_like(a)
        if s == 0:
            return self.reduce(a)
        if self.limbs == 1:
            return self.reduce(a << np.uint64(s))
        lo, hi = a[..., 0], a[..., 1]
        if s >= 64:
            return self.reduce(np.stack([np.zeros_like(lo), lo << np.uint64(s - 64)], axis=-1))
        new_hi = (hi << np.uint64(s)) | (lo >> np.uint64(64 - s))
        return self.reduce(np.stack([lo << np.uint64(s), new_hi], axis=-1))

    def sum(self, *terms: np.ndarray) -> np.ndarray:
        out = terms[0]
        for t in terms[1:]:
            out = self.add(out, t)
        return out
