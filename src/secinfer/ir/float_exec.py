"""Float64 numpy executor of canonical graphs (ONNX semantics): the float reference."""

from __future__ import annotations

import math

import numpy as np

from secinfer.arith.linalg import float_conv2d, pool_counts, pool_patches
from secinfer.errors import ModelError
from secinfer.ir.graph import Graph, Node, lift_2d
from secinfer.ir.movement import MOVEMENT

_erf = np.vectorize(math.erf, otypes=[np.float64])


def as_4d(x: np.ndarray, spatial: int) -> np.ndarray:
    """View a 1-D-spatial (N, C, L) tensor as (N, C, 1, L); 2-D tensors unchanged."""
    return x.reshape(x.shape[0], x.shape[1], 1, x.shape[2]) if spatial == 1 else x


def from_4d(y: np.ndarray, spatial: int) -> np.ndarray:
    return y.reshape(y.shape[0], y.shape[1], y.shape[3]) if spatial == 1 else y


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def layer_norm(x, scale, bias, axis: int, eps: float) -> np.ndarray:
    axes = tuple(range(axis, x.ndim))
    mu = np.mean(x, axis=axes, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps) * scale
    return y + bias if bias is not None else y


def gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def sigmoid(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    e = np.exp(x[~pos])
    out[~pos] = e / (1.0 + e)
    return out


# Non-linear element/row functions; the fixed-point reference evaluates these in float64
# too (decode -> f -> encode).
def float_function(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    op, x = node.op, xs[0]
    if op == "Sigmoid":
        return sigmoid(x)
    if op == "Tanh":
        return np.tanh(x)
    if op == "Erf":
        return _erf(x)
    if op == "Gelu":
        return gelu(x, node.attrs.get("approximate", "none"))
    if op == "Exp":
        return np.exp(x)
    if op == "Sqrt":
        return np.sqrt(x)
    if op == "Softmax":
        return softmax(x, node.attrs["axis"])
    if op == "LayerNormalization":
        return layer_norm(x, xs[1], xs[2] if len(xs) > 2 else None, node.attrs["axis"],
                          node.attrs["epsilon"])
    raise ModelError(f"{op} is not a float function")


def _pool(node: Node, x: np.ndarray) -> np.ndarray:
    p = lift_2d(node)
    x4 = as_4d(x, p["spatial"])
    ceil = bool(node.attrs["ceil_mode"])
    if node.op == "MaxPool":
        cols = pool_patches(x4, p["kernel"], p["strides"], p["pads"], p["dilations"], -np.inf, ceil)
        y = cols.max(axis=2)
    else:
        cols = pool_patches(x4, p["kernel"], p["strides"], p["pads"], p["dilations"], 0.0, ceil)
        cnt = pool_counts(x4.shape, p["kernel"], p["strides"], p["pads"], p["dilations"], ceil,
                          bool(node.attrs["count_include_pad"]))
        y = cols.sum(axis=2) / cnt
    return from_4d(y, p["spatial"])


def run_node_float(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
    op = node.op
    if op in MOVEMENT:
        return MOVEMENT[op](node, xs)
    x = xs[0]
    if op == "Gemm":
        y = np.matmul(x, xs[1])
        return [y + xs[2] if len(xs) > 2 else y]
    if op == "MatMul":
        return [np.matmul(x, xs[1])]
    if op == "Conv":
        p = lift_2d(node)
        w = xs[1]
        w4 = w.reshape(w.shape[0], w.shape[1], 1, w.shape[2]) if p["spatial"] == 1 else w
        y = float_conv2d(as_4d(x, p["spatial"]), w4, p["strides"], p["pads"], p["dilations"],
                         node.attrs["group"])
        if len(xs) > 2:
            y = y + xs[2].reshape(1, -1, 1, 1)
        return [from_4d(y, p["spatial"])]
    if op == "Add":
        return [x + xs[1]]
    if op == "Sub":
        return [x - xs[1]]
    if op == "Mul":
        return [x * xs[1]]
    if op == "Neg":
        return [-x]
    if op == "Relu":
        return [np.maximum(x, 0.0)]
    if op in ("MaxPool", "AveragePool"):
        return [_pool(node, x)]
    if op == "GlobalAveragePool":
        return [np.mean(x, axis=tuple(range(2, x.ndim)), keepdims=True)]
    if op == "GlobalMaxPool":
        return [np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)]
    if op == "BatchNormalization":
        bshape = (1, -1) + (1,) * (x.ndim - 2)
        return [x * xs[1].reshape(bshape) + xs[2].reshape(bshape)]
    return [float_function(node, xs)]


def run_float_all(graph: Graph, feeds, intermediates: bool = False) -> dict[str, np.ndarray]:
    """Evaluate the graph in float64. Returns the outputs (or every tensor) by name."""
    graph.require_weights()
    feeds = graph.resolve_feeds(feeds)
    env: dict[str, np.ndarray] = {k: np.asarray(v, dtype=np.float64) for k, v in feeds.items()}
    for k, v in graph.initializers.items():
        env[k] = np.asarray(v, dtype=np.float64)
    for node in graph.nodes:
        outs = run_node_float(node, [env[i] for i in node.inputs])
        for o, v in zip(node.outputs, outs):
            env[o] = v
    if intermediates:
        return {k: v for k, v in env.items() if k not in graph.initializers}
    return {k: env[k] for k in graph.output_names}


def run_float(graph: Graph, x) -> np.ndarray:
    """First output of the graph in float64."""
    return run_float_all(graph, x)[graph.output_names[0]]
