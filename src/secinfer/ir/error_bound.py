"""Derived bound on |decode(run_fixed(g, x)) - run_float(g, x)|, per tensor.

Each tensor t gets (M_t, e_t): M_t bounds |float value| and e_t bounds the fixed-point
error, both as maxima over elements. Inputs start at e = 2^-(f+1) (round half up);
weights W are encoded with actual error D = decode(encode(W)) - W; every truncation adds
tau = 2^-f (flooring). The rules (derivations in docs/fixed-point.md):

* Gemm/Conv: e_y = max_j e_x*||W_j||_1 + (M_x + e_x)*||D_j||_1 + tau + max|D_b|
* MatMul:    e_y = K*(e_a*M_b + M_a*e_b + e_a*e_b) + tau
* Mul:       e_y = e_a*M_b + M_a*e_b + e_a*e_b + tau;  Add/Sub: e_a + e_b
* Relu, max pooling, data movement: e_y = e_x (1-Lipschitz in the max norm)
* AveragePool / GlobalAveragePool over windows of k: e_y = e_x*(1 + k*delta) + k*M_x*delta + tau
* BatchNorm: as Mul by a constant, then Add of a constant
* float functions (decode -> f -> encode): e_y = L*e_x + delta (+ weight terms), with L a
  Lipschitz constant in the max norm: Sigmoid 1/4, Tanh 1, Erf 2/sqrt(pi), Gelu 1.13,
  Softmax 1/2, Exp exp(max x + e), Sqrt min(1/(2 sqrt(min x - e)), sqrt(e)/e),
  LayerNorm (2 + sqrt(n))*max|g| / sqrt((sigma_min - e)_+^2 + eps).

Two modes: ``input_range`` (|x| <= r; magnitudes M by interval propagation, valid for
every such input) or ``x`` (a concrete input: M and sigma_min are measured on the float
run, the bound holds for that input). Also reports where the ring could overflow.
"""

from __future__ import annotations

import math

import numpy as np

from secinfer.arith.fixed import FixedPointConfig
from secinfer.errors import ConfigError, ModelError
from secinfer.ir.graph import Graph, MOVEMENT_OPS


def _l1_cols(w: np.ndarray) -> np.ndarray:
    return np.sum(np.abs(w), axis=0)


def error_bounds(graph: Graph, cfg: FixedPointConfig, input_range: float | None = None,
                 x=None) -> dict:
    graph.require_weights()
    if (input_range is None) == (x is None):
        raise ConfigError("give exactly one of input_range or x")
    W, D = _weights(graph, cfg)
    vals = None
    if x is not None:
        from secinfer.ir.float_exec import run_float_all

        vals = run_float_all(graph, x, intermediates=True)
    M: dict[str, float] = {}
    E: dict[str, float] = {}
    for t in graph.inputs:
        M[t.name] = _amax(vals[t.name]) if vals is not None else float(input_range)
        E[t.name] = cfg.encode_error
    _weight_bounds(W, D, M, E)
    risks: list[dict] = []
    for n in graph.nodes:
        e, m = node_rule(n, graph, cfg, M, E, W, D, vals, risks)
        for o in n.outputs:
            M[o] = _amax(vals[o]) if vals is not None else m
            E[o] = e
            if M[o] + e >= cfg.max_abs:
                risks.append({"node": n.name, "op": n.op, "what": "value", "bound": M[o] + e,
                              "limit": cfg.max_abs})
    outs = {o: E[o] for o in graph.output_names}
    return {"bound": outs[graph.output_names[0]], "outputs": outs,
            "tensors": {k: {"max_abs": M[k], "error": E[k]} for k in E if k not in W},
            "overflow_risks": risks, "mode": "input" if x is not None else "range"}


def layerwise_errors(graph: Graph, x, cfg: FixedPointConfig) -> list[dict]:
    """Per-layer check: each node's fixed output vs its float op on the node's *decoded
    fixed-point inputs* (float weights), with the same rules at zero input error.

    Returns one row per node: name, op, err (observed max abs), bound. Errors do not
    accumulate here, so the bounds are tight; protocols use this to test layer by layer.
    """
    from secinfer.ir.fixed_exec import run_fixed
    from secinfer.ir.float_exec import run_node_float

    trace: dict = {}
    run_fixed(graph, x, cfg, trace=trace, overflow="ignore")
    W, D = _weights(graph, cfg)
    rows = []
    for n in graph.nodes:
        dec = {i: (W[i] if i in W else cfg.decode(trace[i])) for i in n.inputs}
        M = {i: _amax(v) for i, v in dec.items()}
        E = {i: 0.0 for i in dec}
        _weight_bounds({k: W[k] for k in dec if k in W}, D, M, E)
        e, _ = node_rule(n, graph, cfg, M, E, W, D, dec, [])
        ref = run_node_float(n, [dec[i] for i in n.inputs])
        err = max((_amax(cfg.decode(trace[o]) - r) for o, r in zip(n.outputs, ref)), default=0.0)
        slack = _FLOAT_SLACK * (1.0 + max((_amax(r) for r in ref), default=0.0))
        rows.append({"node": n.name, "op": n.op, "err": err, "bound": e + slack})
    return rows


# float64 rounding of the reference computations themselves (relative), added to bounds
_FLOAT_SLACK = 1e-9


def _amax(v) -> float:
    v = np.asarray(v)
    return float(np.max(np.abs(v))) if v.size else 0.0


def _weights(graph: Graph, cfg: FixedPointConfig):
    W = {k: np.asarray(v, np.float64) for k, v in graph.initializers.items()}
    D = {k: cfg.decode(cfg.encode(v)) - v for k, v in W.items()}
    return W, D


def _weight_bounds(W, D, M, E) -> None:
    for k in W:
        M[k] = _amax(W[k])
        E[k] = _amax(D[k])


def node_rule(n, graph: Graph, cfg: FixedPointConfig, M, E, W, D, vals, risks) -> tuple[float, float]:
    """(error bound, magnitude bound) of node n's output from its inputs' (M, E).

    ``vals`` (optional) maps tensor names to their float values, for data-dependent
    refinements (row norms, LayerNorm's sigma, Exp/Sqrt ranges).
    """
    delta, tau = cfg.encode_error, cfg.resolution
    op, ins = n.op, n.inputs
    x0 = ins[0]
    mx, ex = M[x0], E[x0]
    if op in ("Gemm", "Conv"):
        w, d = W[ins[1]], D[ins[1]]
        w2 = w.reshape(w.shape[0], -1).T if op == "Conv" else w  # (K, N)
        d2 = d.reshape(d.shape[0], -1).T if op == "Conv" else d
        l1, d1 = _l1_cols(w2), _l1_cols(d2)
        e = float(np.max(ex * l1 + (mx + ex) * np.abs(d1))) + tau
        bmax = 0.0
        if len(ins) > 2:
            e += E[ins[2]]
            bmax = _amax(W[ins[2]])
        m = float(np.max(mx * l1)) + bmax
        acc = float(np.max((mx + ex) * _l1_cols(w2 + d2)))
        if acc >= cfg.product_max_abs:
            risks.append({"node": n.name, "op": op, "what": "product", "bound": acc,
                          "limit": cfg.product_max_abs})
        return e, m
    if op == "MatMul":
        k = graph.shapes[x0][-1]
        mb, eb = M[ins[1]], E[ins[1]]
        if vals is not None and x0 in vals and ins[1] in vals:
            a, b = np.abs(vals[x0]), np.abs(vals[ins[1]])
            a2 = a.reshape((1,) + a.shape) if a.ndim == 1 else a
            b2 = b.reshape(b.shape + (1,)) if b.ndim == 1 else b
            row_a = float(np.max(np.sum(a2, axis=-1)))   # max_i sum_k |A_ik|
            col_b = float(np.max(np.sum(b2, axis=-2)))   # max_j sum_k |B_kj|
            e = ex * col_b + eb * row_a + k * ex * eb + tau
        else:
            e = k * (ex * mb + mx * eb + ex * eb) + tau
        m = k * mx * mb
        if k * (mx + ex) * (mb + eb) >= cfg.product_max_abs:
            risks.append({"node": n.name, "op": op, "what": "product",
                          "bound": k * (mx + ex) * (mb + eb), "limit": cfg.product_max_abs})
        return e, m
    if op in ("Add", "Sub"):
        return ex + E[ins[1]], mx + M[ins[1]]
    if op == "Mul":
        mb, eb = M[ins[1]], E[ins[1]]
        return ex * mb + mx * eb + ex * eb + tau, mx * mb
    if op == "BatchNormalization":
        sc, ds = np.abs(W[ins[1]]), np.abs(D[ins[1]])
        e = float(np.max(ex * (sc + ds) + mx * ds)) + tau + E[ins[2]]
        return e, float(np.max(mx * sc + np.abs(W[ins[2]])))
    if op == "Concat":
        return max(E[i] for i in ins), max(M[i] for i in ins)
    if op in ("Neg", "Relu", "MaxPool", "GlobalMaxPool") or op in MOVEMENT_OPS:
        return ex, mx
    if op in ("AveragePool", "GlobalAveragePool"):
        if op == "AveragePool":
            k = int(np.prod(n.attrs["kernel_shape"]))
        else:
            k = int(np.prod(graph.shapes[x0][2:]))
        return ex * (1 + k * delta) + k * mx * delta + tau, mx
    e, m = _float_fn_bound(n, graph, M, E, W, D, vals, delta)
    return e + _FLOAT_SLACK * (1.0 + m), m


def _float_fn_bound(n, graph, M, E, W, D, vals, delta) -> tuple[float, float]:
    op, x0 = n.op, n.inputs[0]
    mx, ex = M[x0], E[x0]
    if op == "Sigmoid":
        return 0.25 * ex + delta, 1.0
    if op == "Tanh":
        return ex + delta, 1.0
    if op == "Erf":
        return 2.0 / math.sqrt(math.pi) * ex + delta, 1.0
    if op == "Gelu":
        return 1.13 * ex + delta, mx
    if op == "Softmax":
        return 0.5 * ex + delta, 1.0
    if op == "Exp":
        hi = float(np.max(vals[x0])) if vals is not None else mx
        if hi + ex > 700.0:
            return math.inf, math.inf
        return math.exp(hi + ex) * ex + delta, math.exp(hi)
    if op == "Sqrt":
        lo = float(np.min(vals[x0])) if vals is not None else 0.0
        e = math.sqrt(ex)
        if lo - ex > 0:
            e = min(e, ex / (2.0 * math.sqrt(lo - ex)))
        return e + delta, math.sqrt(mx)
    if op == "LayerNormalization":
        axis, eps = n.attrs["axis"], n.attrs["epsilon"]
        shape = graph.shapes[x0]
        nn = int(np.prod(shape[axis:]))
        g = W[n.inputs[1]]
        gmax, dg = float(np.max(np.abs(g))), float(np.max(np.abs(D[n.inputs[1]])))
        db = float(np.max(np.abs(D[n.inputs[2]]))) if len(n.inputs) > 2 else 0.0
        bmax = float(np.max(np.abs(W[n.inputs[2]]))) if len(n.inputs) > 2 else 0.0
        sigma = 0.0
        zmax = math.sqrt(max(nn - 1, 1))
        if vals is not None:
            xv = vals[x0]
            axes = tuple(range(axis, xv.ndim))
            sd = np.sqrt(np.var(xv, axis=axes))
            sigma = float(np.min(sd)) if sd.size else 0.0
        s = math.sqrt(max(sigma - ex, 0.0) ** 2 + eps)
        lip = (2.0 + math.sqrt(nn)) * (gmax + dg) / s
        return lip * ex + zmax * dg + db + delta, zmax * gmax + bmax
    raise ModelError(f"no error rule for op {op!r}")
