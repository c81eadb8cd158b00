"""A party's local product with a fixed weight, prepared offline.

Party p's 3-out-of-3 component of f(X, W) [STAMP 3.2] is f(x_p, w_p + w_{p+1}) + f(x_{p+1}, w_p)
(``sharing.replicated.bilinear_local``): two ring products and the sum w_p + w_{p+1} of the
weight's components, every query. The weight is fixed for the session, so its part of
that work can be done once, before the online phase (``stack_weight``):

* the two products become one: f is bilinear and the ring product of two stacked operands
  is the sum of the products of their halves, so
  f(x_p, w_p + w_{p+1}) + f(x_{p+1}, w_p) = f([x_p | x_{p+1}], [w_p + w_{p+1} ; w_p]),
  stacked on the inner axis of a matrix product (the input channels of a convolution);
* over Z_2^32 the stacked weight's 16-bit limbs are cut into float64 once
  (``kernels.matmul32`` converts both operands every call).

Both are exact ring arithmetic: the result equals ``bilinear_local`` bit for bit (tests
compare them). Weights above ``STACK_MAX`` elements are left to ``bilinear_local``: the
stacked copy and its limbs cost about four times the weight's own memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from secinfer.arith.ring import Ring
from secinfer.protocols.rep3 import kernels
from secinfer.sharing.replicated import Pair

STACK_MAX = 1 << 22          # weight elements; larger weights keep the two-product path
_INNER32 = 1 << 20          # Z_2^32 limb products stay exact below this inner dimension
_M16 = np.uint64(0xFFFF)
_M32 = np.uint64(0xFFFFFFFF)


@dataclass
class StackedWeight:
    """A weight's stacked operand [w_p + w_{p+1} ; w_p] of one party (``stack_weight``)."""

    source: Pair                  # the weight's shares it was made from (identity-checked on use)
    axis: int                     # the stacking axis of the activation: -1 (matrix product), 1 (conv)
    w: np.ndarray                 # the stacked weight (uint64)
    f: object                     # the ring-bilinear product (``kernels.bilinear``)
    limbs: tuple | None = None    # Z_2^32 matrix product: the stacked weight's float64 16-bit limbs


def stack_weight(kind: str, attrs: dict, ring: Ring, w: Pair) -> StackedWeight | None:
    """The offline part of this party's local product f(X, W) for a weight W (its shares
    ``w``); None where the stacked form does not apply (an elementwise Mul, a grouped
    convolution, a weight of more than ``STACK_MAX`` elements or not two-dimensional)."""
    if w.a.size > STACK_MAX or w.a.size == 0:
        return None
    f = kernels.bilinear(kind, attrs, ring)
    s = ring.add(w.a, w.b)
    if kind in ("Gemm", "MatMul"):
        if w.a.ndim != 2:
            return None
        ws = np.ascontiguousarray(np.concatenate([s, w.a], axis=0))
        limbs = None
        if ring.bits == 32 and ws.shape[0] < _INNER32:
            limbs = ((ws & _M16).astype(np.float64), ((ws >> np.uint64(16)) & _M16).astype(np.float64))
        return StackedWeight(w, -1, ws, f, limbs)
    if kind == "Conv":
        if int(attrs.get("group", 1)) != 1:
            return None
        return StackedWeight(w, 1, np.ascontiguousarray(np.concatenate([s, w.a], axis=1)), f)
    return None


def stacked_product(ring: Ring, sw: StackedWeight, x: Pair) -> np.ndarray:
    """This party's 3-out-of-3 component of f(X, W): equal to
    ``bilinear_local(ring, f, x, sw.source)``, with one ring product."""
    xs = np.concatenate([x.a, x.b], axis=sw.axis)
    if sw.limbs is None:
        return ring.reduce(sw.f(xs, sw.w))
    # [x_p | x_{p+1}] @ W_s mod 2^32 from 16-bit limbs: every limb product is below 2^32 and
    # the inner dimension below 2^20, so each float64 sum is exact (``kernels.matmul32``)
    w0, w1 = sw.limbs
    a0 = (xs & _M16).astype(np.float64)
    a1 = ((xs >> np.uint64(16)) & _M16).astype(np.float64)
    lo = np.matmul(a0, w0).astype(np.uint64)
    mid = (np.matmul(a0, w1) + np.matmul(a1, w0)).astype(np.uint64)
    return ring.reduce((lo + (mid << np.uint64(16))) & _M32)
