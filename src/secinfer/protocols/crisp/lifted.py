"""Linear algebra over the share ring Z_2^k used by CRISP (k = n for the semi-honest
baseline, k = n + s for the lifted ring of the consistency check [CRISP V-B]).

Representation (chosen here, shared with ``secinfer.crypto.fss.group.Z2k``): an element
array has shape ``(*tensor_shape, L)`` of uint64 little-endian limbs, L = 1 for k <= 64
and L = 2 for 64 < k <= 128 (n + s = 104 for n = 64, s = 40). All arithmetic is exact
mod 2^k; nothing here uses Python big integers on bulk data.

Linear maps with *integer* coefficients (model weights read as signed fixed-point
integers, public window sums) act on such arrays exactly: ``matmul_signed`` splits the
ring operand into 16-bit digits and the weights into balanced 16-bit signed digits, each
digit product goes through float64 BLAS (|partial sum| < 2^31 * inner < 2^53 for
inner < 2^21, hence exact), and the partial products are recombined with shifts mod 2^k.
"""

from __future__ import annotations

import numpy as np

from secinfer.crypto.fss.group import Z2k
from secinfer.errors import ConfigError, FrameError

_DIGIT = 16
_MAX_INNER = 1 << 21


def lift_signed(g: Z2k, v_ring: np.ndarray, n: int) -> np.ndarray:
    """Ring elements of Z_2^n (uint64) -> their signed lift in Z_2^k (shape + (L,))."""
    v = np.asarray(v_ring, np.uint64)
    if n < 64:
        sh = np.uint64(64 - n)
        s = ((v << sh).view(np.int64)) >> np.int64(64 - n)
    else:
        s = v.view(np.int64)
    return g.from_signed64(s)


def low_bits(g: Z2k, a: np.ndarray, n: int) -> np.ndarray:
    """Elements of Z_2^k -> their residue mod 2^n as uint64 (n <= 64)."""
    lo = np.asarray(a, np.uint64)[..., 0]
    return lo if n == 64 else lo & np.uint64((1 << n) - 1)


def check_reduced(g: Z2k, a: np.ndarray, where: str) -> np.ndarray:
    """Reject limb arrays with bits above 2^k (a malformed element from a peer)."""
    if a.shape[-1:] != (g.limbs,) or not g.is_reduced(a):
        raise FrameError(f"{where}: element outside Z_2^{g.bits}")
    return a


def _digits_unsigned(g: Z2k, a: np.ndarray, width: int = _DIGIT) -> list[np.ndarray]:
    """``width``-bit digits (float64) of the elements, least significant first."""
    out = []
    for i in range(-(-g.bits // width)):
        limb, off = divmod(i * width, 64)
        d = a[..., limb] >> np.uint64(off)
        if off + width > 64 and limb + 1 < a.shape[-1]:
            d = d | (a[..., limb + 1] << np.uint64(64 - off))
        out.append((d & np.uint64((1 << width) - 1)).astype(np.float64))
    return out


def _wide_digit_bits(w: np.ndarray) -> int:
    """Ring-digit width for products with the whole weights as one float64 digit: every
    partial sum is at most 2^width * (largest L1 norm of a weight row or column, which
    bounds the inner sums of both layouts ``matmul_signed`` is used with: W on the right,
    and W (..., out, inner) on the left), kept below 2^53 so float64 is exact. Capped at
    32 (digits beyond that save nothing at k <= 128); 0 when not applicable."""
    w = np.abs(np.asarray(w, np.int64))
    if w.size == 0 or w.ndim < 2:
        return 0
    l1 = max(int(w.sum(axis=-1).max()), int(w.sum(axis=-2).max()), 1)
    return min(32, 52 - l1.bit_length())


def _digits_signed(w: np.ndarray) -> list[np.ndarray]:
    """Balanced signed 16-bit digits of int64 weights: w = sum_j d_j 2^(16 j), |d_j| <= 2^15."""
    w = np.asarray(w, np.int64)
    out = []
    rest = w.copy()
    while True:
        d = ((rest + (1 << 15)) & 0xFFFF) - (1 << 15)
        out.append(d.astype(np.float64))
        rest = (rest - d) >> 16
        if not np.any(rest):
            return out
        if len(out) > 4:
            raise ConfigError("weight digits do not terminate")


def _accumulate(g: Z2k, acc: np.ndarray | None, part: np.ndarray, shift: int) -> np.ndarray:
    """acc + part * 2^shift with ``part`` an exact-integer float64 array."""
    p = g.shl(g.from_signed64(np.rint(part).astype(np.int64)), shift)
    return p if acc is None else g.add(acc, p)


def matmul_signed(g: Z2k, a: np.ndarray, w: np.ndarray, fn=np.matmul) -> np.ndarray:
    """fn(a, w) mod 2^k for a ring array ``a`` (shape + (L,)) and integer weights ``w``.

    ``fn`` is a bilinear numpy function of (float64 a-digits, float64 w-digits), default
    ``np.matmul``; its inner dimension must be below 2^21 for exactness.
    """
    a = np.asarray(a, np.uint64)
    wide = _wide_digit_bits(w)
    if wide > _DIGIT:      # one weight digit, wider ring digits: fewer products (exactness below)
        acc = None
        wf = np.asarray(w, np.int64).astype(np.float64)
        for i, da in enumerate(_digits_unsigned(g, a, wide)):
            acc = _accumulate(g, acc, fn(da, wf), wide * i)
        return acc
    ad = _digits_unsigned(g, a)
    wd = _digits_signed(w)
    acc = None
    for i, da in enumerate(ad):
        for j, dw in enumerate(wd):
            sh = _DIGIT * (i + j)
            if sh >= g.bits:
                continue
            acc = _accumulate(g, acc, fn(da, dw), sh)
    return acc


def mul_signed(g: Z2k, a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Elementwise a * w (broadcast) with int64 weights ``w``."""
    w = np.asarray(w, np.int64)
    return g.mul(a, g.from_signed64(np.broadcast_to(w, a.shape[:-1])))


def apply_limbwise(a: np.ndarray, fn) -> np.ndarray:
    """Apply a data-movement / linear-with-0/1-coefficient numpy function limb by limb."""
    return np.stack([fn(a[..., j]) for j in range(a.shape[-1])], axis=-1)


def sum_axis(g: Z2k, a: np.ndarray, axis: int) -> np.ndarray:
    """Exact sum mod 2^k over ``axis`` of the tensor (not the limb axis)."""
    a = np.asarray(a, np.uint64)
    if g.limbs == 1:
        return g.reduce(a.sum(axis=axis, dtype=np.uint64))
    lo = a[..., 0]
    lo_lo = (lo & np.uint64(0xFFFFFFFF)).sum(axis=axis, dtype=np.uint64)
    lo_hi = (lo >> np.uint64(32)).sum(axis=axis, dtype=np.uint64)
    hi = a[..., 1].sum(axis=axis, dtype=np.uint64)
    part1 = np.stack([lo_lo, hi], axis=-1)
    part2 = g.shl(g.from_u64(lo_hi), 32)
    return g.add(g.reduce(part1), part2)


def inner_product(g: Z2k, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """sum(a * b) mod 2^k over all tensor elements -> one element (shape (L,))."""
    p = g.mul(a, b).reshape(-1, g.limbs)
    if p.shape[0] == 0:
        return g.zeros(())
    return sum_axis(g, p, 0)
