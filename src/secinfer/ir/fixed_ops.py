"""Per-op fixed-point kernels on ring arrays: the bit-exact semantics of docs/fixed-point.md.

Every function takes ring arrays (uint64 holding elements of Z_2^l, values encoded with
``cfg.frac_bits`` fractional bits, weights encoded by ``encode_weights``) and returns
ring arrays. Secure protocols must reproduce these results exactly (or within their
documented budget for the float-function ops). ``run_node`` dispatches one canonical
node; ``secinfer.ir.fixed_exec`` walks a whole graph with it.

Optional ``report`` lists collect ``OverflowRecord``s: places where the exact value of
a sum of products (before truncation) or of a sum leaves the range the ring can hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from secinfer.arith.fixed import FixedPointConfig
from secinfer.arith.linalg import (pool_counts, pool_patches, ring_conv2d, ring_matmul_bits,
                                   ring_max_signed)
from secinfer.errors import ModelError
from secinfer.ir.float_exec import float_function
from secinfer.ir.graph import Graph, Node, lift_2d
from secinfer.ir.movement import MOVEMENT


@dataclass(frozen=True)
class OverflowRecord:
    node: str
    op: str
    what: str          # "product" (before truncation) or "sum"
    max_abs: float     # largest magnitude seen, in real units
    limit: float       # what the ring holds, in real units

    def __str__(self) -> str:
        return (f"fixed-point overflow at node {self.node!r} ({self.op}): |{self.what}| reaches "
                f"{self.max_abs:.4g}, the ring holds only {self.limit:.4g}")


def encode_weights(graph: Graph, cfg: FixedPointConfig) -> dict[str, np.ndarray]:
    """Every initializer encoded at scale 2^f (round half up): what protocols share."""
    graph.require_weights()
    return {k: cfg.encode(np.asarray(v, dtype=np.float64)) for k, v in graph.initializers.items()}


def _real32(v: np.ndarray, cfg: FixedPointConfig) -> np.ndarray:
    """Decoded values in float32: enough to see an overflow, cheap to multiply."""
    return cfg.decode(v).astype(np.float32)


def _note(report, node, what, approx: np.ndarray, limit: float) -> None:
    """Record when the (float-approximated, real-unit) exact value reaches ``limit``."""
    if report is None or approx.size == 0:
        return
    m = float(np.max(np.abs(approx)))
    if m >= limit:
        report.append(OverflowRecord(node.name if node else "-", node.op if node else "-", what,
                                     m, limit))


# ---- linear ------------------------------------------------------------------------------
def gemm(x, w, b, cfg: FixedPointConfig, node: Node | None = None, report=None) -> np.ndarray:
    """trunc(x @ W) + b: one exact ring product, one truncation, then the bias."""
    acc = ring_matmul_bits(x, w, cfg.ring_bits)
    if report is not None:
        _note(report, node, "product", np.matmul(_real32(x, cfg), _real32(w, cfg)),
              cfg.product_max_abs)
    y = cfg.trunc(acc)
    return y if b is None else cfg.ring.add(y, b)


def matmul(a, b, cfg: FixedPointConfig, node: Node | None = None, report=None) -> np.ndarray:
    """trunc(a @ b) with numpy.matmul batching (activation x activation in attention)."""
    return gemm(a, b, None, cfg, node, report)


def conv(x, w, b, cfg: FixedPointConfig, attrs: dict, node: Node | None = None,
         report=None) -> np.ndarray:
    """trunc(conv(x, W)) + b[channel]; 1-D convolutions run as 2-D with height 1."""
    tmp = Node("conv", "Conv", [], [], attrs)
    p = lift_2d(tmp)
    one_d = p["spatial"] == 1
    x4 = x.reshape(x.shape[0], x.shape[1], 1, x.shape[2]) if one_d else x
    w4 = w.reshape(w.shape[0], w.shape[1], 1, w.shape[2]) if one_d else w
    acc = ring_conv2d(x4, w4, p["strides"], p["pads"], p["dilations"], attrs["group"], cfg.ring_bits)
    if report is not None:
        from secinfer.arith.linalg import float_conv2d
        _note(report, node, "product", float_conv2d(_real32(x4, cfg), _real32(w4, cfg), p["strides"],
                                                    p["pads"], p["dilations"], attrs["group"],
                                                    dtype=np.float32), cfg.product_max_abs)
    y = cfg.trunc(acc)
    if b is not None:
        y = cfg.ring.add(y, b.reshape(1, -1, 1, 1))
    return y.reshape(y.shape[0], y.shape[1], y.shape[3]) if one_d else y


# ---- elementwise -------------------------------------------------------------------------
def add(a, b, cfg, node=None, report=None):
    if report is not None:
        _note(report, node, "sum", cfg.decode(a) + cfg.decode(b), cfg.max_abs)
    return cfg.ring.add(a, b)


def sub(a, b, cfg, node=None, report=None):
    if report is not None:
        _note(report, node, "sum", cfg.decode(a) - cfg.decode(b), cfg.max_abs)
    return cfg.ring.sub(a, b)


def mul(a, b, cfg, node=None, report=None):
    """trunc(a * b): product of two scale-f values brought back to scale f."""
    if report is not None:
        _note(report, node, "product", cfg.decode(a) * cfg.decode(b), cfg.product_max_abs)
    return cfg.trunc(cfg.ring.mul(a, b))


def neg(a, cfg):
    return cfg.ring.neg(a)


def relu(x, cfg):
    """x where signed(x) >= 0, else 0 (exact)."""
    return np.where(cfg.ring.to_signed(x) >= 0, cfg.ring.reduce(x), np.uint64(0))


def batchnorm(x, scale, shift, cfg, node=None, report=None):
    """trunc(x * scale[c]) + shift[c] on channel axis 1."""
    bshape = (1, -1) + (1,) * (x.ndim - 2)
    return cfg.ring.add(mul(x, scale.reshape(bshape), cfg, node, report), shift.reshape(bshape))


# ---- pooling -----------------------------------------------------------------------------
def _as4(x, spatial):
    return x.reshape(x.shape[0], x.shape[1], 1, x.shape[2]) if spatial == 1 else x


def _from4(y, spatial):
    return y.reshape(y.shape[0], y.shape[1], y.shape[3]) if spatial == 1 else y


def maxpool(x, cfg, attrs: dict) -> np.ndarray:
    """Window max of the signed values; padding never wins (it holds the ring minimum)."""
    p = lift_2d(Node("pool", "MaxPool", [], [], attrs))
    lowest = np.uint64(1 << (cfg.ring_bits - 1))
    cols = pool_patches(_as4(cfg.ring.reduce(x), p["spatial"]), p["kernel"], p["strides"], p["pads"],
                        p["dilations"], lowest, bool(attrs["ceil_mode"]))
    return _from4(ring_max_signed(cols, axis=2, bits=cfg.ring_bits), p["spatial"])


def avgpool_reciprocals(input_shape, attrs: dict, cfg: FixedPointConfig) -> np.ndarray:
    """Public per-position encode(1/count) multipliers, shape (OH, OW) (or (OL,) for 1-D)."""
    p = lift_2d(Node("pool", "AveragePool", [], [], attrs))
    shp = tuple(input_shape)
    shp4 = shp[:2] + (1,) + shp[2:] if p["spatial"] == 1 else shp
    cnt = pool_counts(shp4, p["kernel"], p["strides"], p["pads"], p["dilations"],
                      bool(attrs["ceil_mode"]), bool(attrs["count_include_pad"]))
    rec = cfg.encode(1.0 / cnt.astype(np.float64))
    return rec[0] if p["spatial"] == 1 else rec


def avgpool_sums(x, cfg, attrs: dict) -> np.ndarray:
    """Exact window sums (the linear part of AveragePool), zero padding."""
    p = lift_2d(Node("pool", "AveragePool", [], [], attrs))
    cols = pool_patches(_as4(cfg.ring.reduce(x), p["spatial"]), p["kernel"], p["strides"], p["pads"],
                        p["dilations"], np.uint64(0), bool(attrs["ceil_mode"]))
    return _from4(cfg.ring.reduce(cols.sum(axis=2, dtype=np.uint64)), p["spatial"])


def avgpool(x, cfg, attrs: dict, node=None, report=None) -> np.ndarray:
    """trunc(sum_window(x) * encode(1/count))."""
    s = avgpool_sums(x, cfg, attrs)
    return mul(s, avgpool_reciprocals(x.shape, attrs, cfg), cfg, node, report)


def global_avgpool_reciprocal(input_shape, cfg: FixedPointConfig) -> np.ndarray:
    """encode(1/(H*W)) as a 0-d ring array."""
    k = int(np.prod(input_shape[2:]))
    return cfg.encode(1.0 / k)


def global_avgpool(x, cfg, node=None, report=None) -> np.ndarray:
    """trunc(sum_spatial(x) * encode(1/(H*W)))."""
    s = cfg.ring.reduce(np.asarray(x, np.uint64).sum(axis=tuple(range(2, x.ndim)), dtype=np.uint64,
                                                     keepdims=True))
    return mul(s, global_avgpool_reciprocal(x.shape, cfg), cfg, node, report)


def global_maxpool(x, cfg) -> np.ndarray:
    flat = cfg.ring.reduce(x).reshape(x.shape[0], x.shape[1], -1)
    m = ring_max_signed(flat, axis=2, bits=cfg.ring_bits)
    return m.reshape(x.shape[:2] + (1,) * (x.ndim - 2))


# ---- float functions ----------------------------------------------------------------------
def float_fn(node: Node, xs: list[np.ndarray], cfg: FixedPointConfig) -> np.ndarray:
    """decode every input (weights too), evaluate in float64, encode (range-checked)."""
    return cfg.encode(float_function(node, [cfg.decode(v) for v in xs]))


# ---- dispatch ----------------------------------------------------------------------------
def run_node(node: Node, xs: list[np.ndarray], cfg: FixedPointConfig, report=None) -> list[np.ndarray]:
    """Outputs of one canonical node on ring inputs (weights already encoded)."""
    op = node.op
    if op in MOVEMENT:
        return MOVEMENT[op](node, xs)
    if op == "Gemm":
        return [gemm(xs[0], xs[1], xs[2] if len(xs) > 2 else None, cfg, node, report)]
    if op == "MatMul":
        return [matmul(xs[0], xs[1], cfg, node, report)]
    if op == "Conv":
        return [conv(xs[0], xs[1], xs[2] if len(xs) > 2 else None, cfg, node.attrs, node, report)]
    if op == "Add":
        return [add(xs[0], xs[1], cfg, node, report)]
    if op == "Sub":
        return [sub(xs[0], xs[1], cfg, node, report)]
    if op == "Mul":
        return [mul(xs[0], xs[1], cfg, node, report)]
    if op == "Neg":
        return [neg(xs[0], cfg)]
    if op == "Relu":
        return [relu(xs[0], cfg)]
    if op == "MaxPool":
        return [maxpool(xs[0], cfg, node.attrs)]
    if op == "AveragePool":
        return [avgpool(xs[0], cfg, node.attrs, node, report)]
    if op == "GlobalAveragePool":
        return [global_avgpool(xs[0], cfg, node, report)]
    if op == "GlobalMaxPool":
        return [global_maxpool(xs[0], cfg)]
    if op == "BatchNormalization":
        return [batchnorm(xs[0], xs[1], xs[2], cfg, node, report)]
    if op in ("Softmax", "Sigmoid", "Tanh", "Erf", "Gelu", "Exp", "Sqrt", "LayerNormalization"):
        return [float_fn(node, xs, cfg)]
    raise ModelError(f"no fixed-point kernel for {op!r} (node {node.name!r})")
