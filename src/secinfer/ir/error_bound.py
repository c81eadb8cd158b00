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
    delta = cfg.encode_error
    tau = cfg.resolution
    W = {k: np.asarray(v, np.float64) for k, v in graph.initializers.items()}
    D = {k: cfg.decode(cfg.encode(v)) - v for k, v in W.items()}
    vals = None
    if x is not None:
        from secinfer.ir.float_exec import run_float_all

        vals = run_float_all(graph, x, intermediates=True)
    M: dict[str, float] = {}
    E: dict[str, float] = {}
    for t in graph.inputs:
        M[t.name] = float(np.max(np.abs(vals[t.name]))) if vals is not None else float(input_range)
        E[t.name] = delta
    for k in W:
        M[k] = float(np.max(np.abs(W[k]))) if W[k].size else 0.0
        E[k] = float(np.max(np.abs(D[k]))) if W[k].size else 0.0
    risks: list[dict] = []

    def measured(name: str, fallback: float) -> float:
        if vals is not None:
            return float(np.max(np.abs(vals[name]))) if vals[name].size else 0.0
        return fallback

    for n in graph.nodes:
        op, ins = n.op, n.inputs
        x0 = ins[0]
        mx, ex = M[x0], E[x0]
        if op in ("Gemm", "Conv"):
            w, d = W[ins[1]], D[ins[1]]
            w2 = w.reshape(w.shape[0], -1).T if op == "Conv" else w  # (K, N)
            d2 = d.reshape(d.shape[0], -1).T if op == "Conv" else d
            l1, d1 = _l1_cols(w2), _l1_cols(d2)
            e = float(np.max(ex * l1 + (mx + ex) * d1)) + tau
            bmax = 0.0
            if len(ins) > 2:
                e += E[ins[2]]
                bmax = float(np.max(np.abs(W[ins[2]])))
            m = float(np.max(mx * l1)) + bmax
            acc = float(np.max((mx + ex) * _l1_cols(w2 + d2)))
            if acc >= cfg.product_max_abs:
                risks.append({"node": n.name, "op": op, "what": "product", "bound": acc,
                              "limit": cfg.product_max_abs})
        elif op == "MatMul":
            k = graph.shapes[x0][-1] if len(graph.shapes[x0]) > 0 else 1
            mb, eb = M[ins[1]], E[ins[1]]
            e = k * (ex * mb + mx * eb + ex * eb) + tau
            m = k * mx * mb
            if k * (mx + ex) * (mb + eb) >= cfg.product_max_abs:
                risks.append({"node": n.name, "op": op, "what": "product",
                              "bound": k * (mx + ex) * (mb + eb), "limit": cfg.product_max_abs})
        elif op in ("Add", "Sub"):
            e = ex + E[ins[1]]
            m = mx + M[ins[1]]
        elif op == "Mul":
            mb, eb = M[ins[1]], E[ins[1]]
            e = ex * mb + mx * eb + ex * eb + tau
            m = mx * mb
        elif op == "BatchNormalization":
            s, ds = np.abs(W[ins[1]]), np.abs(D[ins[1]])
            e = float(np.max(ex * (s + ds) + mx * ds)) + tau + E[ins[2]]
            m = float(np.max(mx * s + np.abs(W[ins[2]])))
        elif op in ("Neg", "Relu", "MaxPool", "GlobalMaxPool") or op in MOVEMENT_OPS:
            if op == "Concat":
                e = max(E[i] for i in ins)
                m = max(M[i] for i in ins)
            else:
                e, m = ex, mx
        elif op in ("AveragePool", "GlobalAveragePool"):
            if op == "AveragePool":
                k = int(np.prod(n.attrs["kernel_shape"]))
            else:
                k = int(np.prod(graph.shapes[x0][2:]))
            e = ex * (1 + k * delta) + k * mx * delta + tau
            m = mx
        else:
            e, m = _float_fn_bound(n, graph, M, E, W, D, vals, delta)
        for o in n.outputs:
            M[o] = measured(o, m)
            E[o] = e
            if M[o] + e >= cfg.max_abs:
                risks.append({"node": n.name, "op": op, "what": "value", "bound": M[o] + e,
                              "limit": cfg.max_abs})
    outs = {o: E[o] for o in graph.output_names}
    return {"bound": outs[graph.output_names[0]], "outputs": outs,
            "tensors": {k: {"max_abs": M[k], "error": E[k]} for k in E if k not in W},
            "overflow_risks": risks, "mode": "input" if x is not None else "range"}


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
