"""The linear part of each plan step as an exact map on share arrays over Z_2^k.

``server_linear(step, w, g, a)`` is the accumulator the oracle computes before its single
flooring truncation (x @ W, conv(x, W), x * w) -- the function Pi_Lin evaluates on the
reconstructed input [CRISP Fig. 2]; ``avgpool_linear`` is the public window-sum map of
AveragePool, which each party applies to its own share locally; ``move`` applies a
data-movement op to a share. All are linear over Z_2^k with integer coefficients, so
applied to additive shares (of x and of mu x) they give shares of the results.
"""

from __future__ import annotations

import numpy as np

from secinfer.arith.linalg import conv_columns, pool_patches
from secinfer.arith.ring import Ring
from secinfer.errors import ProtocolError
from secinfer.ir.graph import lift_2d
from secinfer.ir.movement import MOVEMENT
from secinfer.protocols.crisp import lifted


def server_linear(step, w: np.ndarray, g: Ring, a: np.ndarray) -> np.ndarray:
    """L_W(a) mod 2^k for the step's op; ``a`` has shape in_shape + (L,)."""
    op = step.node_op
    if op in ("Gemm", "MatMul"):
        out = lifted.matmul_signed(g, a, w)
    elif op == "Mul":
        out = lifted.mul_signed(g, a, w)
    elif op == "Conv":
        out = _conv(step, w, g, a)
    else:
        raise ProtocolError(f"crisp: {op} is not a server-weight linear op")
    if tuple(out.shape[:-1]) != tuple(step.out_shape):
        raise ProtocolError(f"crisp: linear step {step.name} produced {out.shape[:-1]}, "
                            f"plan says {step.out_shape}")
    return out


def _conv(step, w: np.ndarray, g: Ring, a: np.ndarray) -> np.ndarray:
    p = lift_2d(step.node())
    groups = int(step.attrs.get("group", 1))
    cols = lifted.apply_limbwise(a, lambda x: conv_columns(x, w.shape, p["strides"], p["pads"],
                                                          p["dilations"], groups)[0])
    m = w.shape[0]
    wg = w.reshape(groups, m // groups, -1)
    out = lifted.matmul_signed(g, cols, wg, fn=lambda da, dw: np.matmul(dw, da))
    n_, oh, ow = a.shape[0], step.out_shape[2], step.out_shape[3]
    return out.reshape(n_, m, oh, ow, g.limbs)


def bias_term(step, b: np.ndarray, g: Ring, frac_bits: int) -> np.ndarray:
    """lift(b) * 2^f broadcast to the output shape (bias folded in before the truncation:
    (acc + b 2^f) >> f = (acc >> f) + b exactly)."""
    shape = step.out_shape
    if step.node_op == "Conv":
        bb = np.broadcast_to(b.reshape(1, -1, 1, 1), shape)
    else:
        bb = np.broadcast_to(b, shape)
    return g.shl(g.from_signed64(np.ascontiguousarray(bb)), frac_bits)


def avgpool_linear(step, mult: np.ndarray, g: Ring, a: np.ndarray) -> np.ndarray:
    """sum_window(a) * encode(1/count): the accumulator of AveragePool, public coefficients."""
    p = lift_2d(step.node())
    ceil = bool(step.attrs.get("ceil_mode", 0))
    cols = lifted.apply_limbwise(a, lambda x: pool_patches(x, p["kernel"], p["strides"], p["pads"],
                                                           p["dilations"], np.uint64(0), ceil))
    sums = lifted.sum_axis(g, cols, 2)
    return lifted.mul_signed(g, sums, np.broadcast_to(mult, sums.shape[:-1]))


def move(step, a: np.ndarray) -> np.ndarray:
    node = step.node()
    out = lifted.apply_limbwise(a, lambda x: MOVEMENT[step.node_op](node, [x])[0])
    if tuple(out.shape[:-1]) != tuple(step.out_shape):
        raise ProtocolError(f"crisp: {step.node_op} produced {out.shape[:-1]}, plan says {step.out_shape}")
    return out


def maxpool_windows(step, a: np.ndarray) -> np.ndarray:
    """(N, C, kH*kW, OH, OW, L) windows of a share (no padding: checked in the plan)."""
    p = lift_2d(step.node())
    return lifted.apply_limbwise(a, lambda x: pool_patches(x, p["kernel"], p["strides"], p["pads"],
                                                           p["dilations"], np.uint64(0), False))
