"""Semi-honest STAMP, input shared online: the input-independent part of the first layer, offline.

The input X of the client (owner o = p1) is shared as in ``Engine.input``: component o+1
from the key of o and o+1, component o+2 from the three-way key, component o = X minus both,
sent by o to o+2 (its only other holder). Two of the three components are pseudo-random:
they depend on the keys, not on the query, and can be drawn before it arrives. Party p's
3-out-of-3 component of a first-layer product f(X, W) is

    f(x_p, w_p + w_{p+1}) + f(x_{p+1}, w_p)            [STAMP 3.2, ``rep3.stacked``]

so with o = 1: p2 holds (x_2, x_0), both pseudo-random; p1 holds (x_1, x_2) and p0, the
model owner, holds (x_0, x_1), x_1 the only component that depends on X. The nine terms
f(x_i, w_j) of f(X, W) may be split among the parties in any way whose sum is right (each
party's component is masked by the LTEEs' zero-sharing before it leaves, [STAMP Protocol
5]); ``InputPlan.add_product`` gives every term with x_1 to p0, which knows W (its own
model) and receives x_1 with the input: p0 computes f(x_0, W) offline and f(x_1, W)
online, p1 f(x_2, w_1) and p2 f(x_2, w_2 + w_0) offline. One input-dependent product
online (p0's) instead of two halves of the stacked products at p0 and p1 and a whole one at
p2. Ring products are exact, so the three components sum to f(X, W) bit for bit (tests
compare with ``sharing.replicated.bilinear_local``). The messages are those of
``Engine.input`` (one message of n elements, o to o+2, same tag).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from secinfer.errors import ProtocolError
from secinfer.protocols.rep3 import kernels
from secinfer.protocols.rep3.stacked import StackedWeight
from secinfer.sharing.replicated import Pair

_M16 = np.uint64(0xFFFF)
_M32 = np.uint64(0xFFFFFFFF)
_S16 = np.uint64(16)
_EXACT = 1 << 53          # float64 holds every integer below this exactly


class SignedWeight:
    """The model owner's plaintext weight over Z_2^32, read as signed integers and held as
    ONE float64 matrix (issue #23, docs/protocols/stamp.md "Eleventh pass"): a fixed-point
    weight is small (|W| well below 2^31), so with v = v_lo + 2^16 v_hi (16-bit halves) both
    f(v_lo, W) and f(v_hi, W) are exact float64 products when K (2^16 - 1) max|W| < 2^53,
    and f(v, W) = f(v_lo, W) + 2^16 f(v_hi, W) mod 2^32. Two products reading half the
    memory of the two 16-bit limbs of W (three products): the online first layer's cost
    after a wake-up is reading W from memory."""

    __slots__ = ("w",)

    def __init__(self, w: np.ndarray) -> None:
        self.w = w

    @staticmethod
    def of(w_plain: np.ndarray) -> "SignedWeight | None":
        """For a (K, N) weight in Z_2^32 whose signed products are exact, else None."""
        if w_plain.ndim != 2:
            return None
        s = w_plain.astype(np.int64)
        s = np.where(s >= 1 << 31, s - (1 << 32), s)
        if int(np.abs(s).max(initial=0)) * 0xFFFF * int(w_plain.shape[0]) >= _EXACT:
            return None
        return SignedWeight(np.ascontiguousarray(s, dtype=np.float64))

    def __call__(self, v: np.ndarray) -> np.ndarray:
        lo = np.matmul((v & _M16).astype(np.float64), self.w).astype(np.int64).view(np.uint64)
        hi = np.matmul(((v >> _S16) & _M16).astype(np.float64), self.w).astype(np.int64).view(np.uint64)
        np.left_shift(hi, _S16, out=hi)
        np.add(hi, lo, out=hi)
        return np.bitwise_and(hi, _M32, out=hi)


@dataclass
class _Half:
    """One first-layer product at one party: the offline part of its 3-out-of-3 component
    and the half of the stacked weight the online component multiplies (None: no online
    part, the whole component is offline)."""

    part: np.ndarray
    w: np.ndarray | None
    limbs: tuple | None
    axis: int
    f: object
    fixed: object = None      # the owner's conv with its weight laid out offline (``kernels.FixedConv32``)


def half_product(ring, f, axis: int, v: np.ndarray, w: np.ndarray, limbs: tuple | None,
                 fixed=None) -> np.ndarray:
    """f(v, w) over the ring for one half of a stacked weight (``rep3.stacked``): float64
    16-bit limbs for a Z_2^32 matrix product (exact below 2^20 inner elements), a
    ``FixedConv32`` (``fixed``, w's layout prepared) for a Z_2^32 convolution, else f."""
    if fixed is not None:
        return fixed(v)
    if isinstance(limbs, SignedWeight):
        return limbs(v)
    if limbs is None:
        return ring.reduce(f(v, w))
    w0, w1 = limbs
    a0 = (v & _M16).astype(np.float64)
    a1 = ((v >> np.uint64(16)) & _M16).astype(np.float64)
    lo = np.matmul(a0, w0).astype(np.uint64)
    mid = (np.matmul(a0, w1) + np.matmul(a1, w0)).astype(np.uint64)
    return ring.reduce((lo + (mid << np.uint64(16))) & _M32)


def stacked_half(sw: StackedWeight, top: bool):
    """The top (w_p + w_{p+1}, multiplies x_p) or bottom (w_p, multiplies x_{p+1}) half of a
    stacked weight, contiguous, with its limbs."""
    k = sw.w.shape[0 if sw.axis == -1 else 1] // 2
    return _split(sw, k, top)


def plain_limbs(sw: StackedWeight, w_plain: np.ndarray, signed: bool = True):
    """The model owner's plaintext weight (in the ring) and, when the stacked weight has limbs
    (a Z_2^32 matrix product), its ``SignedWeight`` (``signed`` and exact) or else its float64
    16-bit limbs, for ``half_product``."""
    limbs = None
    if sw.limbs is not None and signed and (sgn := SignedWeight.of(w_plain)) is not None:
        limbs = sgn
    elif sw.limbs is not None:
        limbs = ((w_plain & _M16).astype(np.float64), ((w_plain >> np.uint64(16)) & _M16).astype(np.float64))
    return np.ascontiguousarray(w_plain), limbs


def _split(sw: StackedWeight, k: int, top: bool):
    if sw.axis == -1:
        w = np.ascontiguousarray(sw.w[:k] if top else sw.w[k:])
        limbs = None if sw.limbs is None else tuple(np.ascontiguousarray(m[:k] if top else m[k:])
                                                    for m in sw.limbs)
    else:
        w = np.ascontiguousarray(sw.w[:, :k] if top else sw.w[:, k:])
        limbs = None
    return w, limbs


class InputPlan:
    """The input's pseudo-random components and the first layer's offline halves of one
    party (``StampBackend.prepare_input``)."""

    def __init__(self, eng, owner: int, name: str, shape: tuple) -> None:
        self.eng, self.owner, self.name, self.shape = eng, owner, name, tuple(shape)
        self.n = n = int(np.prod(shape))
        lab = eng._label("input")             # the label ``Engine.input`` would take online
        me, o = eng.me, owner
        self.c_next = None
        if me in (o, (o + 1) % 3):            # parties o and o+1 share k_o
            self.c_next = eng._draw(eng._k_own if me == o else eng._k_prev, lab, n).reshape(shape)
        self.c_all = eng._draw(eng._k_all, lab, n).reshape(shape)
        # the owner's c_next + c_all, so that its online component is one subtraction (``share``)
        self._c_sum = eng.ring.add(self.c_next, self.c_all).reshape(-1) if me == o else None
        self.halves: dict[str, _Half] = {}
        self.x: Pair | None = None            # the shared input, once ``share``d

    def add_product(self, node_name: str, sw: StackedWeight, w_plain: np.ndarray | None = None,
                    conv_attrs: dict | None = None) -> None:
        """The offline part of party p's component of a product of the input with a weight
        whose stacked operand is ``sw``. With o = 1 and the model owner o+2 = p0 (the only
        STAMP roles), the nine terms f(x_i, w_j) are split so that only the owner of the
        plaintext weight W works online: p0 takes f(x_0 + x_1, W) (``w_plain``, its own
        model; f(x_0, W) offline, x_1 arrives with the input), p1 f(x_2, w_1), p2
        f(x_2, w_2 + w_0) -- the sum is f(X, W); each component is masked by the LTEEs'
        zero-sharing before it leaves its party, as any 3-out-of-3 component is.
        ``conv_attrs`` (a Conv's attributes): the owner lays its weight out for the online
        product now where ``kernels.FixedConv32`` applies (Z_2^32, ungrouped), so that the
        online f(x_1, W) is the columns of x_1 and one BLAS product."""
        ring, me, o = self.eng.ring, self.eng.me, self.owner
        k = self.shape[sw.axis]
        if me == (o + 2) % 3:     # (x_{o+2}, x_o), the model owner: f(x_{o+2} + x_o, W)
            if w_plain is None:
                raise ProtocolError("the model owner's first-layer weight is needed in plaintext")
            w_plain, limbs = plain_limbs(sw, w_plain)
            fixed = None
            if conv_attrs is not None and kernels.FixedConv32.applies("Conv", conv_attrs, ring, w_plain.shape):
                fixed = kernels.FixedConv32(conv_attrs, w_plain)
            part = half_product(ring, sw.f, sw.axis, self.c_all, w_plain, limbs, fixed)
            self.halves[node_name] = _Half(part, w_plain, limbs, sw.axis, sw.f, fixed)
        elif me == (o + 1) % 3:   # (x_{o+1}, x_{o+2}): f(x_{o+1}, w_{o+1} + w_{o+2}), the top half
            w, limbs = _split(sw, k, True)
            self.halves[node_name] = _Half(half_product(ring, sw.f, sw.axis, self.c_next, w, limbs), None, None,
                                           sw.axis, sw.f)
        else:                     # (x_o, x_{o+1}): f(x_{o+1}, w_o), the bottom half
            w, limbs = _split(sw, k, False)
            self.halves[node_name] = _Half(half_product(ring, sw.f, sw.axis, self.c_next, w, limbs), None, None,
                                           sw.axis, sw.f)

    def declare(self) -> None:
        """Declare the online input message (``share``'s: n ring elements, o to o+2) to the
        endpoint (``Endpoint.expect_send``/``expect_recv``, frame templates)."""
        eng, me, o = self.eng, self.eng.me, self.owner
        n = int(np.prod(self.shape))
        if me == o:
            eng.ep.expect_send(eng.names[(o + 2) % 3], "rss/input", eng.wire, (n,))
        elif me == (o + 2) % 3:
            eng.ep.expect_recv(eng.names[o], "rss/input", eng.wire, (n,))

    def share(self, x: np.ndarray | None, warm: bool = False) -> Pair:
        """The online input sharing (``Engine.input`` with the components drawn offline).
        ``warm`` (``StampBackend.warm``): the same steps on a scratch input, nothing sent or
        received (the receiver takes zeros)."""
        eng, ring, me, o = self.eng, self.eng.ring, self.eng.me, self.owner
        n = self.n
        if me == o:
            if x is None or tuple(x.shape) != self.shape:
                raise ProtocolError(f"input owner needs an array of shape {self.shape}")
            if ring.limbs == 1:   # x - (c_next + c_all) mod 2^k: uint64 wraps mod 2^64, a multiple of 2^k
                c_own = np.subtract(np.asarray(x, np.uint64).reshape(-1), self._c_sum)
                np.bitwise_and(c_own, ring.mask, out=c_own)
            else:
                c_own = ring.sub(ring.reduce(x.reshape(-1)), self._c_sum)
            if warm:
                eng.pack(c_own)
            else:
                eng.send_ring((o + 2) % 3, "rss/input", c_own)
            self.x = Pair(c_own.reshape(self.shape), self.c_next)
        elif me == (o + 1) % 3:
            self.x = Pair(self.c_next, self.c_all)
        else:
            (c_own,) = [np.zeros(n, np.uint64)] if warm else eng.recv_ring(o, "rss/input", n)
            self.x = Pair(self.c_all, c_own.reshape(self.shape))
        return self.x

    def product(self, node_name: str, x: Pair) -> np.ndarray | None:
        """This party's 3-out-of-3 component of the first-layer product ``node_name`` of the
        shared input ``x`` (None if it was not prepared or ``x`` is not that input)."""
        h = self.halves.get(node_name)
        if h is None or self.x is None or x is not self.x:
            return None
        if h.w is None:
            return h.part
        online = x.a if self.eng.me == self.owner else x.b     # x_o
        return self.eng.ring.add(h.part, half_product(self.eng.ring, h.f, h.axis, online, h.w, h.limbs, h.fixed))
