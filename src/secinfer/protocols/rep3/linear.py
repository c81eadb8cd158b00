"""The prediction functions of [ASTRA 5.5] as one public-architecture linear model.

Linear regression, linear SVM regression (sum_j alpha_j y_j (x_j . z) + b collapses to one
weight vector), logistic regression (sign(w.z + b - ln(t/(1-t)))) and linear SVM
classification are all ``y = z @ W + b`` followed, for classifiers, by a sign. The model
owner turns its model into ``LinearModel`` locally: from scikit-learn estimators
(LinearRegression, Ridge, LinearSVR, LogisticRegression, LinearSVC) or from a secinfer IR
graph of the form [Sub(x, mean) -> Mul(., inv_scale)] -> Gemm(., W, b) [-> Sigmoid]
(the standardiser, if present, is folded into W and b by the owner, in the clear).

Fixed point: inputs carry f fractional bits (FX64: l = 64, f = 13 [ASTRA 5.3]); weights
carry ``weight_frac`` bits (f by default, 2f when a standardiser was folded in, because
folding shrinks the weights); the bias is encoded at f + weight_frac bits so the secure
result ``z @ W + b`` carries f + weight_frac fractional bits. Nothing is truncated on shares:
the client applies the exact oracle truncation (arithmetic shift by weight_frac) to the
reconstructed value, so the output equals ``oracle`` bit for bit (see docs/protocols/astra.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from secinfer.arith.fixed import FixedPointConfig
from secinfer.errors import ModelError, ProtocolError, UnsupportedOpError


@dataclass
class LinearModel:
    weights: np.ndarray             # (K, N) float64
    bias: np.ndarray                # (N,) float64
    classifier: bool
    classes: np.ndarray             # (2,) labels for classifiers
    weight_frac: int | str | None = None  # None: the fixed-point config's f; "2f": folded scaler
    input_frac: int | None = None          # None: f

    @property
    def shape(self) -> tuple[int, int]:
        return self.weights.shape

    def wfrac(self, cfg: FixedPointConfig) -> int:
        return cfg.frac_bits if self.weight_frac is None else int(self.weight_frac)

    def xfrac(self, cfg: FixedPointConfig) -> int:
        return cfg.frac_bits if self.input_frac is None else int(self.input_frac)

    def out_shift(self, cfg: FixedPointConfig) -> int:
        return self.xfrac(cfg) + self.wfrac(cfg) - cfg.frac_bits

    def public_header(self, cfg: FixedPointConfig) -> np.ndarray:
        k, n = self.shape
        return np.array([k, n, int(self.classifier), self.wfrac(cfg), self.xfrac(cfg)], dtype=np.int64)

    def encode(self, cfg: FixedPointConfig) -> tuple[np.ndarray, np.ndarray]:
        fw = self.wfrac(cfg)
        w = _enc(self.weights, fw, cfg)
        # the bias is encoded at f bits and shifted up, so that after the client's final shift
        # the result is trunc(x @ W) + b exactly as the oracle's Gemm (fixed_ops.gemm) computes
        shift = self.out_shift(cfg)
        b = cfg.ring.reduce(_enc(self.bias, cfg.frac_bits, cfg) << np.uint64(shift))
        return w, b


def encode_input(x: np.ndarray, frac: int, cfg: FixedPointConfig) -> np.ndarray:
    x = np.asarray(x, np.float64)
    if not np.all(np.isfinite(x)):
        raise ProtocolError("the query contains NaN or infinity")
    return _enc(x, frac, cfg)


def _enc(x: np.ndarray, frac: int, cfg: FixedPointConfig) -> np.ndarray:
    v = np.array(x, dtype=np.float64)           # our own copy (an array even for a scalar)
    v *= float(2 ** frac)
    v += 0.5
    np.floor(v, out=v)
    # one pass over |v| (its maximum is NaN if any entry is, and NaN compares False)
    if v.size and not float(np.max(np.abs(v))) < 2.0 ** (cfg.ring_bits - 1):
        raise ProtocolError(f"a model parameter does not fit Z_2^{cfg.ring_bits} at {frac} fractional bits")
    ring = cfg.ring
    if ring.limbs != 1:
        return ring.from_signed(v.astype(np.int64))
    out = v.astype(np.int64).view(np.uint64)    # a fresh array: reduced in place, not copied again
    if ring.bits < 64:
        out &= ring.mask
    return out


def oracle(model: LinearModel, x: np.ndarray, cfg: FixedPointConfig) -> np.ndarray:
    """The exact fixed-point result the protocol must reproduce: ring values (regressors,
    f fractional bits) or 0/1 class indices (classifiers)."""
    r = cfg.ring
    w, b = model.encode(cfg)
    acc = r.add(r.matmul(encode_input(np.atleast_2d(x), model.xfrac(cfg), cfg), w), b[None, :])
    out = r.arshift(acc, model.out_shift(cfg))
    if model.classifier:
        return (r.to_signed(out) > 0).astype(np.int64)   # the decision value (at f bits) > 0
    return out


def from_sklearn(est, threshold: float = 0.5) -> LinearModel:
    """LinearRegression, Ridge, LinearSVR (regression); LogisticRegression, LinearSVC (binary)."""
    name = type(est).__name__
    if name == "Pipeline":
        steps = [s for _, s in est.steps]
        if len(steps) == 2 and type(steps[0]).__name__ == "StandardScaler":
            inner = from_sklearn(steps[1], threshold)
            mean = np.asarray(getattr(steps[0], "mean_", None) if steps[0].with_mean else 0.0, np.float64)
            scale = np.asarray(steps[0].scale_ if steps[0].with_std else 1.0, np.float64)
            inv = np.broadcast_to(1.0 / scale, (inner.weights.shape[0],))
            inner.bias = inner.bias - (np.broadcast_to(mean, inv.shape) * inv) @ inner.weights
            inner.weights = inv[:, None] * inner.weights
            inner.weight_frac = "2f"
            return inner
        raise UnsupportedOpError(name, "estimator", "only Pipeline(StandardScaler, linear model)")
    coef = getattr(est, "coef_", None)
    if coef is None:
        raise ModelError(f"{name} is not fitted or has no linear coefficients")
    coef = np.atleast_2d(np.asarray(coef, np.float64))
    icpt = np.atleast_1d(np.asarray(getattr(est, "intercept_", 0.0), np.float64))
    if name in ("LinearRegression", "Ridge", "LinearSVR", "Lasso", "ElasticNet"):
        w = coef.T.copy()
        return LinearModel(w, np.broadcast_to(icpt, (w.shape[1],)).copy(), False, np.zeros(0))
    if name in ("LogisticRegression", "LinearSVC"):
        classes = np.asarray(est.classes_)
        if len(classes) != 2:
            raise UnsupportedOpError(name, "estimator", "ASTRA classification is binary (one sign)")
        b = icpt.copy()
        if name == "LogisticRegression" and threshold != 0.5:
            # sign(w.z + b - ln(t / (1 - t))) [ASTRA 5.5, logistic regression]
            b = b - np.log(threshold / (1.0 - threshold))
        return LinearModel(coef.T.copy(), b, True, classes.astype(np.float64))
    raise UnsupportedOpError(name, "estimator", "ASTRA supports LinearRegression, Ridge, LinearSVR, "
                                                "LogisticRegression and LinearSVC")


def _graph_parts(graph):
    nodes = list(graph.nodes)
    if not nodes:
        raise ProtocolError("empty graph")
    ops = [n.op for n in nodes]
    idx = 0
    pre = None
    if ops[:2] == ["Sub", "Mul"]:
        pre = (nodes[0], nodes[1])
        idx = 2
    if idx >= len(nodes) or nodes[idx].op != "Gemm":
        bad = nodes[idx] if idx < len(nodes) else nodes[-1]
        raise UnsupportedOpError(bad.op, bad.name, "ASTRA prediction needs [Sub, Mul] -> Gemm [-> Sigmoid]")
    gemm = nodes[idx]
    tail = nodes[idx + 1:]
    if len(tail) > 1 or (tail and tail[0].op != "Sigmoid"):
        raise UnsupportedOpError(tail[0].op if tail[0].op != "Sigmoid" else tail[1].op, tail[-1].name,
                                 "only a final Sigmoid may follow the Gemm")
    if len(graph.inputs) != 1 or len(graph.outputs) != 1:
        raise ProtocolError("ASTRA prediction takes one input and one output")
    return pre, gemm, bool(tail)


def check_model(graph, security: str) -> None:
    if isinstance(graph, LinearModel) or hasattr(graph, "coef_") or type(graph).__name__ == "Pipeline":
        return
    pre, gemm, sig = _graph_parts(graph)
    w_shape = graph.shapes.get(gemm.inputs[1]) if hasattr(graph, "shapes") else None
    if w_shape is None or len(w_shape) != 2:
        raise UnsupportedOpError("Gemm", gemm.name, "weight must be a 2-D constant")
    if sig and w_shape[1] != 1:
        raise UnsupportedOpError("Sigmoid", gemm.name, "classification needs one output (binary)")
    in_shape = graph.inputs[0].shape
    if len(in_shape) != 2:
        raise UnsupportedOpError("Gemm", gemm.name, "input must be (batch, features)")


def from_graph(graph, output: str | None = None) -> LinearModel:
    """Model owner side: the IR graph (with weights) -> LinearModel."""
    check_model(graph, "semi-honest")
    pre, gemm, sig = _graph_parts(graph)
    init = graph.initializers
    try:
        w = np.asarray(init[gemm.inputs[1]], np.float64)
        b = np.asarray(init[gemm.inputs[2]], np.float64) if len(gemm.inputs) > 2 else np.zeros(w.shape[1])
    except KeyError as e:
        raise ProtocolError(f"Gemm weight {e} is not a constant of the graph") from None
    folded = False
    if pre is not None:
        sub, mul = pre
        mean = np.asarray(init[sub.inputs[1]], np.float64)
        scale = np.asarray(init[mul.inputs[1]], np.float64)
        b = b + (-(mean * scale)) @ w
        w = scale[:, None] * w
        folded = True
    classifier = sig or output == "label"
    if classifier and w.shape[1] != 1:
        raise UnsupportedOpError("Gemm", gemm.name, "classification needs one output (binary)")
    return LinearModel(w, np.broadcast_to(b, (w.shape[1],)).copy(), classifier,
                       np.array([0.0, 1.0]), None if not folded else "2f")


def to_linear(model, options: dict | None = None) -> LinearModel:
    options = options or {}
    if isinstance(model, LinearModel):
        lm = model
    elif hasattr(model, "coef_") or type(model).__name__ == "Pipeline":
        lm = from_sklearn(model, float(options.get("threshold", 0.5)))
    else:
        lm = from_graph(model, options.get("output"))
    if "weight_frac" in options:
        lm.weight_frac = options["weight_frac"]
    return lm


# Folding a standardiser into W makes weights large for features with a small spread and
# small for features with a large one; 22 fractional bits for the query and 28 for the
# weights keep both quantisation errors below 1e-3 on the bundled data while leaving
# |output| < 2^(63 - 50) = 8192 representable. (Depth one: no truncation on shares.)
FOLDED_FRAC = (22, 28)


def resolve_wfrac(lm: LinearModel, cfg: FixedPointConfig) -> LinearModel:
    if lm.weight_frac == "2f":
        lm.input_frac, lm.weight_frac = FOLDED_FRAC if cfg.ring_bits == 64 else (cfg.frac_bits, 2 * cfg.frac_bits)
    return lm


def reveals(graph, security: str, options: dict) -> str:
    """What the input role learns: ASTRA's prediction functions reveal a classifier's sign
    (the class) only [ASTRA 5.5]; a regressor's value otherwise."""
    last = graph.nodes[-1].op if getattr(graph, "nodes", None) else ""
    return "labels" if last == "Sigmoid" or (options or {}).get("output") == "label" else "scores"


def value_limits(graph, cfg: FixedPointConfig, options: dict) -> dict:
    """The owner folds a standardiser into W and encodes the query at f_x and W at f_w
    fractional bits; z @ W + b is held at f_x + f_w bits before the client's shift, so the
    query and every value must stay below these magnitudes (or they wrap)."""
    lm = resolve_wfrac(to_linear(graph, options), cfg)
    fx, fw = lm.xfrac(cfg), lm.wfrac(cfg)
    return {"input": 2.0 ** (cfg.ring_bits - 1 - fx), "values": 2.0 ** (cfg.ring_bits - 1 - fx - fw)}
