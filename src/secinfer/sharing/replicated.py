"""2-out-of-3 replicated secret sharing (RSS) over Z_2^l (l = 32 or 64), pure functions.

Convention [STAMP 3.2], [ABY3 2.2]: a secret x is split into three additive components
x = x_0 + x_1 + x_2 (mod 2^l); party p (p = 0, 1, 2) holds the pair
``(x_p, x_{p+1 mod 3})``. Any two parties together hold all three components. A
party's share is therefore a ``Pair`` ``(a, b) = (x_p, x_{p+1})``.

Everything here is local computation (no communication): splitting by a dealer (tests,
input owners), reconstruction from pairs, linear operations, and the local part of a
multiplication, which yields a 3-out-of-3 additive sharing that the protocol layer then
re-shares with one message per party [STAMP 3.2 "Multiplications"].

Arrays are numpy uint64 reduced mod 2^l (``secinfer.arith.ring.Ring``).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from secinfer.arith.ring import Ring
from secinfer.errors import ConfigError

PARTIES = 3


class Pair(NamedTuple):
    """Party p's replicated share: (x_p, x_{p+1})."""

    a: np.ndarray
    b: np.ndarray

    @property
    def shape(self) -> tuple:
        return self.a.shape


def nxt(p: int) -> int:
    return (p + 1) % PARTIES


def prv(p: int) -> int:
    return (p + 2) % PARTIES


def _check_party(p: int) -> None:
    if p not in (0, 1, 2):
        raise ConfigError(f"replicated sharing has parties 0, 1, 2; got {p}")


# ---- dealer-side split and reconstruction ------------------------------------------------
def components(ring: Ring, x: np.ndarray, draw: Callable[[tuple], np.ndarray]) -> list[np.ndarray]:
    """Three additive components of x; ``draw(shape)`` gives uniform ring elements."""
    x = ring.reduce(x)
    c0 = ring.reduce(draw(x.shape))
    c1 = ring.reduce(draw(x.shape))
    return [c0, c1, ring.sub(ring.sub(x, c0), c1)]


def pairs_from_components(comps: list[np.ndarray]) -> list[Pair]:
    if len(comps) != PARTIES:
        raise ConfigError("replicated sharing needs exactly three components")
    return [Pair(comps[p], comps[nxt(p)]) for p in range(PARTIES)]


def share(ring: Ring, x: np.ndarray, draw: Callable[[tuple], np.ndarray]) -> list[Pair]:
    """Dealer split: the three parties' pairs."""
    return pairs_from_components(components(ring, x, draw))


def reconstruct(ring: Ring, pairs: list[Pair]) -> np.ndarray:
    """x from all three pairs (raises if the replicated copies disagree)."""
    if len(pairs) != PARTIES:
        raise ConfigError("reconstruction needs the three pairs")
    for p in range(PARTIES):
        if not np.array_equal(ring.reduce(pairs[p].b), ring.reduce(pairs[nxt(p)].a)):
            raise ConfigError(f"replicated copies of component {nxt(p)} disagree")
    return ring.reduce(pairs[0].a + pairs[1].a + pairs[2].a)


def missing_component(p: int) -> int:
    """The component index party p does not hold."""
    _check_party(p)
    return (p + 2) % PARTIES


# ---- linear operations (local) -------------------------------------------------------------
def add(ring: Ring, x: Pair, y: Pair) -> Pair:
    return Pair(ring.add(x.a, y.a), ring.add(x.b, y.b))


def sub(ring: Ring, x: Pair, y: Pair) -> Pair:
    return Pair(ring.sub(x.a, y.a), ring.sub(x.b, y.b))


def neg(ring: Ring, x: Pair) -> Pair:
    return Pair(ring.neg(x.a), ring.neg(x.b))


def add_public(ring: Ring, p: int, x: Pair, c: np.ndarray) -> Pair:
    """x + c for public c: added to component 0 only [STAMP App. A]."""
    _check_party(p)
    c = ring.reduce(np.asarray(c, dtype=np.uint64))
    a = ring.add(x.a, c) if p == 0 else x.a + np.zeros_like(c)
    b = ring.add(x.b, c) if nxt(p) == 0 else x.b + np.zeros_like(c)
    return Pair(ring.reduce(a), ring.reduce(b))


def mul_public(ring: Ring, x: Pair, c: np.ndarray) -> Pair:
    c = np.asarray(c, dtype=np.uint64)
    return Pair(ring.mul(x.a, c), ring.mul(x.b, c))


def apply(x: Pair, fn: Callable[[np.ndarray], np.ndarray]) -> Pair:
    """A shape/permutation operation applied to both components (reshape, transpose...)."""
    return Pair(fn(x.a), fn(x.b))


def zeros(shape) -> Pair:
    z = np.zeros(shape, dtype=np.uint64)
    return Pair(z, z.copy())


def public_pair(ring: Ring, p: int, c: np.ndarray) -> Pair:
    """A sharing of a public constant (component 0 = c, the others 0)."""
    return add_public(ring, p, zeros(np.shape(c)), c)


# ---- multiplication (local part) -----------------------------------------------------------
def mul_local(ring: Ring, x: Pair, y: Pair) -> np.ndarray:
    """z_p = x_p y_p + x_p y_{p+1} + x_{p+1} y_p: a 3-out-of-3 sharing of x*y [STAMP 3.2]."""
    return ring.reduce(x.a * (y.a + y.b) + x.b * y.a)


def matmul_local(ring: Ring, x: Pair, y: Pair) -> np.ndarray:
    """3-out-of-3 sharing of X @ Y: two exact ring products per party [STAMP 3.2 "Matrix
    Multiplications"]: X_p (Y_p + Y_{p+1}) + X_{p+1} Y_p."""
    return ring.reduce(ring.matmul(x.a, ring.add(y.a, y.b)) + ring.matmul(x.b, y.a))


def bilinear_local(ring: Ring, f: Callable[[np.ndarray, np.ndarray], np.ndarray], x: Pair, y: Pair) -> np.ndarray:
    """The same for any ring-bilinear f (convolution): f(x_p, y_p + y_{p+1}) + f(x_{p+1}, y_p)."""
    return ring.reduce(f(x.a, ring.add(y.a, y.b)) + f(x.b, y.a))


def zero_component(ring: Ring, own: np.ndarray, prev: np.ndarray) -> np.ndarray:
    """Party p's component of a 3-out-of-3 sharing of zero from two PRF outputs:
    F_{k_p}(ctr) - F_{k_{p-1}}(ctr) [STAMP App. A "Correlated Randomness"]."""
    return ring.sub(own, prev)


# ---- boolean (XOR) replicated sharing, bit-sliced in uint64 lanes -----------------------------
def xor(x: Pair, y: Pair) -> Pair:
    return Pair(x.a ^ y.a, x.b ^ y.b)


def and_local(x: Pair, y: Pair) -> np.ndarray:
    """3-out-of-3 XOR sharing of x AND y (bitwise on every lane) [ABY3 5.2]."""
    return (x.a & y.a) ^ (x.a & y.b) ^ (x.b & y.a)


def xor_public(p: int, x: Pair, c: np.ndarray) -> Pair:
    c = np.asarray(c, dtype=np.uint64)
    a = x.a ^ c if p == 0 else x.a.copy()
    b = x.b ^ c if nxt(p) == 0 else x.b.copy()
    return Pair(a, b)


def bool_share(x: np.ndarray, draw: Callable[[tuple], np.ndarray]) -> list[Pair]:
    x = np.asarray(x, dtype=np.uint64)
    c0, c1 = draw(x.shape), draw(x.shape)
    return pairs_from_components([c0, c1, x ^ c0 ^ c1])


def bool_reconstruct(pairs: list[Pair]) -> np.ndarray:
    return pairs[0].a ^ pairs[1].a ^ pairs[2].a


# ---- replicated sharing over a small prime field Z_p -------------------------------------------
# Used by Falcon's private compare [Falcon Alg. 1] (p = 67): the same convention, + mod p.
# For p < 128 the components are uint16 (every sum and product below stays under 2^16 before
# its reduction, done by a multiply-shift: v - p floor(v M / 2^22) with M = ceil(2^22 / p),
# checked against v % p for every v < 2^16 when p is first used -- half the time of a
# 2^16-entry table lookup, which stays the fallback); otherwise uint64 with %.
_MOD_MAGIC: dict[int, np.uint32 | np.ndarray] = {}
_SHIFT = np.uint32(22)


def mod_dtype(p: int):
    return np.uint16 if p < 128 else np.uint64


def _magic(p: int):
    """M for p (np.uint32) if the multiply-shift is exact for every v < 2^16, else the table."""
    got = _MOD_MAGIC.get(p)
    if got is None:
        m = np.uint32(-(-(1 << 22) // p))
        v = np.arange(1 << 16, dtype=np.uint32)
        exact = np.array_equal(v - ((v * m) >> _SHIFT) * np.uint32(p), v % np.uint32(p))
        got = _MOD_MAGIC.setdefault(p, m if exact else (v % p).astype(np.uint16))
    return got


def mod_reduce(p: int, v) -> np.ndarray:
    """v mod p in the field's dtype (v non-negative, below 2^16 when p < 128)."""
    if p < 128:
        m = _magic(p)
        if isinstance(m, np.ndarray):
            return m[np.asarray(v, dtype=np.uint16)]
        w = np.asarray(v, dtype=np.uint16).astype(np.uint32)
        return (w - ((w * m) >> _SHIFT) * np.uint32(p)).astype(np.uint16)
    return np.asarray(v, dtype=np.uint64) % np.uint64(p)


def _m(p: int, v) -> np.ndarray:
    return np.asarray(v, dtype=mod_dtype(p))


def mod_add(p: int, x: Pair, y: Pair) -> Pair:
    return Pair(mod_reduce(p, _m(p, x.a) + _m(p, y.a)), mod_reduce(p, _m(p, x.b) + _m(p, y.b)))


def mod_sub(p: int, x: Pair, y: Pair) -> Pair:
    q = mod_dtype(p)(p)
    return Pair(mod_reduce(p, _m(p, x.a) + q - _m(p, y.a)), mod_reduce(p, _m(p, x.b) + q - _m(p, y.b)))


def _public_mod(p: int, c) -> np.ndarray:
    """A public value mod p in the field's dtype (unsigned values below 2^16 by table)."""
    c = np.asarray(c)
    if p < 128 and c.dtype in (np.uint8, np.uint16):
        return mod_reduce(p, c)
    return mod_reduce(p, np.asarray(c, dtype=np.uint64) % np.uint64(p))


def mod_mul_public(p: int, x: Pair, c) -> Pair:
    c = _public_mod(p, c)
    return Pair(mod_reduce(p, _m(p, x.a) * c), mod_reduce(p, _m(p, x.b) * c))


def mod_add_public(p: int, party: int, x: Pair, c) -> Pair:
    """x + c for public c in Z_p: added to component 0 (party 0's a, party 2's b)."""
    _check_party(party)
    c = _public_mod(p, c)
    a = mod_reduce(p, _m(p, x.a) + c) if party == 0 else _m(p, x.a) + np.zeros_like(c)
    b = mod_reduce(p, _m(p, x.b) + c) if nxt(party) == 0 else _m(p, x.b) + np.zeros_like(c)
    return Pair(a, b)


def mod_mul_local(p: int, x: Pair, y: Pair) -> np.ndarray:
    """3-out-of-3 sharing of x * y in Z_p (element-wise): x_p (y_p + y_{p+1}) + x_{p+1} y_p."""
    xa, xb, ya, yb = (_m(p, v) for v in (x.a, x.b, y.a, y.b))
    if p < 128:                          # < 127 * 252 + 126 * 126 < 2^16
        return mod_reduce(p, xa * (ya + yb) + xb * ya)
    q = np.uint64(p)
    return (xa * ((ya + yb) % q) + xb * ya) % q

