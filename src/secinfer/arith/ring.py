"""The rings Z_2^k (k in 1..128) on numpy uint64, plus exact ring matrix products.

One type, :class:`Ring`, serves every layer. Two layouts of an element array:

* k <= 64 (the fast path): plain uint64 arrays reduced mod 2^k. numpy's uint64 arithmetic
  wraps mod 2^64, which is what we want; for k < 64 we mask after each operation. The
  element-wise operations (``reduce add sub neg mul``) accept any shape, so they serve
  the flat layout of the replicated and ASTRA shares as well as the limb layout below.
* limb layout, shape ``(..., L)``: little-endian uint64 limbs, ``L = 1`` for k <= 64 and
  ``L = 2`` for 64 < k <= 128 (value = limb0 + 2^64 * limb1, top limb masked to k - 64
  bits). FSS output groups and CRISP's lifted ring Z_2^(n+s) with n <= 64, s = 40 use
  it [CRISP V-B, Cramer et al. SPDZ_2k]; carries between limbs are computed explicitly.
  ``from_int``/``to_int`` convert to Python integers (tests and small scalars only).

Matrix products never use numpy's integer matmul (two orders of magnitude slower than
float64 BLAS on these machines, see DESIGN.md). ``ring_matmul`` splits each operand into
16-bit limbs and multiplies limb pairs with float64 BLAS: each partial product is below
2^32 * inner_dim, which is exact in float64 while inner_dim < 2^21.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from secinfer.errors import ConfigError

_LIMB_BITS = 16
_MAX_EXACT_INNER = 1 << 20  # 2^32 * 2^20 < 2^53: float64 sums of limb products stay exact
_M64 = (1 << 64) - 1
_U32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_U64D = np.dtype(np.uint64)


def _wrapping(fn):
    """uint64 arithmetic wraps mod 2^64 on purpose; silence numpy's scalar overflow warning
    (0-d operands, e.g. a single MAC key, go through numpy's scalar path)."""
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
class Ring:
    """The ring Z_2^bits (bits in 1..128)."""

    bits: int

    def __post_init__(self) -> None:
        if not 1 <= self.bits <= 128:
            raise ConfigError(f"ring Z_2^k needs 1 <= k <= 128, got k = {self.bits}")

    # ---- shape and masks -------------------------------------------------------------
    @property
    def limbs(self) -> int:
        return 1 if self.bits <= 64 else 2

    @functools.cached_property
    def mask(self) -> np.uint64:
        """Mask of the top limb (of the whole element when k <= 64); computed once per ring."""
        top_bits = self.bits - 64 * (self.limbs - 1)
        return np.uint64(_M64 if top_bits == 64 else (1 << top_bits) - 1)

    @property
    def raw(self) -> "Ring":
        """The same limbs without masking (Z_2^(64 L)): for intermediate sums, since reducing
        mod 2^k commutes with + and *, callers reduce once at the end."""
        return Ring(64 * self.limbs)

    @property
    def nbytes(self) -> int:
        """Bytes per element on the wire and when packed: ceil(k / 8)."""
        return -(-self.bits // 8)

    def _u64_only(self, what: str) -> None:
        if self.limbs != 1:
            raise ConfigError(f"{what} is defined on Z_2^k for k <= 64, not k = {self.bits}")

    def _fresh(self, a: np.ndarray) -> np.ndarray:
        """Reduce a freshly computed result (masks two-limb arrays in place)."""
        if self.limbs == 1:
            return a if self.bits == 64 else a & self.mask
        if self.bits != 128:
            a[..., -1] &= self.mask
        return a

    def reduce(self, a: np.ndarray) -> np.ndarray:
        """``a`` mod 2^k, always as a new array."""
        if self.limbs == 1 and self.bits < 64:
            return np.asarray(a, np.uint64) & self.mask
        return self._fresh(np.array(a, np.uint64, copy=True))

    def is_reduced(self, a: np.ndarray) -> bool:
        top = np.asarray(a, np.uint64) if self.limbs == 1 else a[..., -1]
        return bool(np.all((top & ~self.mask) == 0))

    # ---- limb layout: construction and conversions -----------------------------------
    def zeros(self, shape) -> np.ndarray:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        return np.zeros(shape + (self.limbs,), np.uint64)

    def random(self, prg, shape) -> np.ndarray:
        """Uniform elements (limb layout) drawn from an injected ``secinfer.crypto.prg.PRG``."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        return self.reduce(prg.uint64(shape + (self.limbs,)))

    def from_u64(self, u: np.ndarray) -> np.ndarray:
        """Embed non-negative integers < 2^64 given as uint64 (reduced mod 2^k)."""
        u = np.asarray(u, np.uint64)
        out = np.zeros(u.shape + (self.limbs,), np.uint64)
        out[..., 0] = u
        return self._fresh(out)

    def from_signed64(self, v: np.ndarray) -> np.ndarray:
        """Embed int64 values (two's complement, sign-extended into the top limb)."""
        v = np.asarray(v, np.int64)
        out = np.zeros(v.shape + (self.limbs,), np.uint64)
        out[..., 0] = v.view(np.uint64)
        if self.limbs == 2:
            out[..., 1] = np.where(v < 0, np.uint64(_M64), np.uint64(0))
        return self._fresh(out)

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

    def pack(self, a: np.ndarray) -> np.ndarray:
        """(..., L) limbs -> (..., ceil(k/8)) little-endian bytes."""
        a = np.ascontiguousarray(a, dtype="<u8")
        return a.view(np.uint8).reshape(a.shape[:-1] + (8 * self.limbs,))[..., :self.nbytes].copy()

    def unpack(self, b: np.ndarray) -> np.ndarray:
        """Inverse of ``pack``; the result may be unreduced if ``b`` is malformed (check it)."""
        out = np.zeros(b.shape[:-1] + (8 * self.limbs,), np.uint8)
        out[..., :self.nbytes] = b
        return out.view("<u8").astype(np.uint64).reshape(b.shape[:-1] + (self.limbs,))

    def low_u64(self, a: np.ndarray) -> np.ndarray:
        """The low 64 bits (the whole value when k <= 64)."""
        return np.asarray(a, np.uint64)[..., 0].copy()

    # ---- arithmetic (any shape when k <= 64; limb layout when k > 64) -------------------
    def add(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if (self.bits <= 64 and type(a) is np.ndarray and type(b) is np.ndarray and a.dtype == _U64D
                and b.dtype == _U64D and a.ndim and b.ndim):
            # uint64 arrays (not 0-d: numpy's scalar path warns on the wrap) add mod 2^64 with
            # no warning, so no errstate; one masking in place (issue #23: ~3 us, not ~9)
            out = np.add(a, b)
            return out if self.bits == 64 else np.bitwise_and(out, self.mask, out=out)
        return self._add(a, b)

    @_wrapping
    def _add(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = np.asarray(a, np.uint64), np.asarray(b, np.uint64)
        if self.limbs == 1:
            return self._fresh(a + b)
        out = np.empty(np.broadcast_shapes(a.shape, b.shape), np.uint64)
        lo = np.add(a[..., 0], b[..., 0], out=out[..., 0])
        hi = np.add(a[..., 1], b[..., 1], out=out[..., 1])
        hi += lo < a[..., 0]
        return self._fresh(out)

    @_wrapping
    def neg(self, a: np.ndarray) -> np.ndarray:
        a = np.asarray(a, np.uint64)
        if self.limbs == 1:
            return self._fresh(np.uint64(0) - a)
        out = np.empty(a.shape, np.uint64)
        np.subtract(np.uint64(0), a[..., 0], out=out[..., 0])
        hi = np.subtract(np.uint64(0), a[..., 1], out=out[..., 1])
        hi -= a[..., 0] != 0
        return self._fresh(out)

    def sub(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if (self.bits <= 64 and type(a) is np.ndarray and type(b) is np.ndarray and a.dtype == _U64D
                and b.dtype == _U64D and a.ndim and b.ndim):   # (as ``add``)
            out = np.subtract(a, b)
            return out if self.bits == 64 else np.bitwise_and(out, self.mask, out=out)
        return self._sub(a, b)

    @_wrapping
    def _sub(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = np.asarray(a, np.uint64), np.asarray(b, np.uint64)
        if self.limbs == 1:
            return self._fresh(a - b)
        out = np.empty(np.broadcast_shapes(a.shape, b.shape), np.uint64)
        np.subtract(a[..., 0], b[..., 0], out=out[..., 0])
        hi = np.subtract(a[..., 1], b[..., 1], out=out[..., 1])
        hi -= a[..., 0] < b[..., 0]
        return self._fresh(out)

    @_wrapping
    def mul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = np.asarray(a, np.uint64), np.asarray(b, np.uint64)
        if self.limbs == 1:
            return self._fresh(a * b)
        lo, hi = mul_64x64_128(a[..., 0], b[..., 0])
        hi = hi + a[..., 0] * b[..., 1] + a[..., 1] * b[..., 0]
        return self._fresh(np.stack([lo, hi], axis=-1))

    @_wrapping
    def mul_u64(self, a: np.ndarray, u: np.ndarray) -> np.ndarray:
        """a * u (limb layout) with u a non-negative integer < 2^64 per element (broadcast)."""
        a = np.asarray(a, np.uint64)
        u = np.asarray(u, np.uint64)
        if self.limbs == 1:
            return self._fresh((a[..., 0] * u)[..., None])
        lo, hi = mul_64x64_128(a[..., 0], u)
        hi = hi + a[..., 1] * u
        return self._fresh(np.stack([lo, hi], axis=-1))

    @_wrapping
    def shl(self, a: np.ndarray, s: int) -> np.ndarray:
        """a * 2^s."""
        a = np.asarray(a, np.uint64)
        if s >= self.bits:
            return np.zeros_like(a)
        if s == 0:
            return self.reduce(a)
        if self.limbs == 1:
            return self._fresh(a << np.uint64(s))
        lo, hi = a[..., 0], a[..., 1]
        if s >= 64:
            return self._fresh(np.stack([np.zeros_like(lo), lo << np.uint64(s - 64)], axis=-1))
        new_hi = (hi << np.uint64(s)) | (lo >> np.uint64(64 - s))
        return self._fresh(np.stack([lo << np.uint64(s), new_hi], axis=-1))

    def cond_neg(self, a: np.ndarray, bit: np.ndarray) -> np.ndarray:
        """(-1)^bit * a (limb layout), bit broadcast over the trailing axes of ``a``."""
        bit = np.asarray(bit).astype(bool)
        bit = bit.reshape(bit.shape + (1,) * (a.ndim - bit.ndim))
        return np.where(bit, self.neg(a), a)

    def select(self, bit: np.ndarray, a: np.ndarray) -> np.ndarray:
        """bit * a (limb layout) for bits in {0,1}, broadcast over the trailing axes of ``a``."""
        bit = np.asarray(bit).astype(bool)
        bit = bit.reshape(bit.shape + (1,) * (a.ndim - bit.ndim))
        return np.where(bit, a, np.uint64(0))

    def sum(self, *terms: np.ndarray) -> np.ndarray:
        out = terms[0]
        for t in terms[1:]:
            out = self.add(out, t)
        return out

    # ---- flat uint64 arrays only (k <= 64) ------------------------------------------
    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        self._u64_only("matmul")
        return self._fresh(ring_matmul(a, b))

    def to_signed(self, a: np.ndarray) -> np.ndarray:
        """Two's-complement interpretation as int64."""
        self._u64_only("to_signed")
        if self.bits == 64:
            return self.reduce(a).view(np.int64)
        # the left shift drops the bits above k: no reduction first (one pass less), and the
        # arithmetic shift back reuses the shifted array
        v = (np.asarray(a, np.uint64) << np.uint64(64 - self.bits)).view(np.int64)
        v >>= np.int64(64 - self.bits)
        return v

    def from_signed(self, a: np.ndarray) -> np.ndarray:
        self._u64_only("from_signed")
        return self.reduce(np.asarray(a, dtype=np.int64).view(np.uint64))

    def msb(self, a: np.ndarray) -> np.ndarray:
        """Most significant bit (the sign bit) as uint8."""
        self._u64_only("msb")
        return ((self.reduce(a) >> np.uint64(self.bits - 1)) & np.uint64(1)).astype(np.uint8)

    def arshift(self, a: np.ndarray, f: int) -> np.ndarray:
        """Arithmetic (sign-preserving, flooring) right shift by f bits."""
        return self.from_signed(self.to_signed(a) >> np.int64(f))


_DIRECT_MAX = 4   # ring_matmul: at most this many output columns (or rows) -> direct uint64 product


def thin_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """a @ b mod 2^64 multiplied directly in uint64 (wraps: exact) and summed, one column
    or one row at a time, when ``b`` is two-dimensional and the product has at most
    ``_DIRECT_MAX`` columns or rows; else None. For such a thin product the float64 limbs
    of the other operand (a dozen passes over it) cost more than the product itself: W1's
    1000 x 784 by 784 x 1 is 10x faster, a batch-1 layer's 1 x 784 by 784 x 128 15x."""
    a = np.asarray(a, dtype=np.uint64)
    b = np.asarray(b, dtype=np.uint64)
    if b.ndim != 2 or a.ndim < 1 or a.shape[-1] != b.shape[0]:
        return None
    if 0 < b.shape[1] <= _DIRECT_MAX:
        return np.stack([(a * b[:, j]).sum(axis=-1, dtype=np.uint64) for j in range(b.shape[1])], axis=-1)
    rows = a.reshape(-1, a.shape[-1])
    if 0 < rows.shape[0] <= _DIRECT_MAX:
        out = np.stack([(b * r[:, None]).sum(axis=0, dtype=np.uint64) for r in rows], axis=0)
        return out.reshape(a.shape[:-1] + (b.shape[1],))
    return None


def ring_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact product of uint64 matrices mod 2^64 (supports numpy matmul broadcasting).

    Splits both operands into four 16-bit limbs and multiplies the limb pairs whose
    weight is below 2^64 with float64 BLAS (10 products); a thin product directly in
    uint64 (``thin_matmul``).
    """
    a = np.asarray(a, dtype=np.uint64)
    b = np.asarray(b, dtype=np.uint64)
    inner = a.shape[-1]
    direct = thin_matmul(a, b)
    if direct is not None:
        return direct
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
