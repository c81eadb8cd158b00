"""Range certificates: which queries a model provably computes without leaving the ring.

A served query is checked where neither side has both the model and the input (the
client lacks the model, the servers never see the input): the model owner computes a
public *range certificate* once, at ``secinfer serve`` start, and the client checks its
query against it locally before it sends anything (``secinfer.runtime.serve_client``).

The certificate holds two regions of inputs, each proven safe by interval analysis at the
served fixed-point configuration (``certify``):

* ``box``: per feature, |x_i| <= box_i for every i;
* ``ball``: ||x||_2 <= ball (optional): the first product's outputs are bounded by
  Cauchy-Schwarz, |w_j . z| <= ||w_j||_2 ||z||_2, with ||z||_2 bounded from ||x||_2 through
  the leading element-wise scaler; the rest of the graph by interval analysis. Only the
  one number ``ball`` is published, not the column norms it was computed from.

A query (each sample) inside the box *or* the ball is safe: for every such input the
bit-exact reference executor (``secinfer.ir.fixed_exec``) neither wraps a sum of products
(``cfg.product_max_abs``) nor a value (``cfg.max_abs``, or the protocol's tighter
``value_limits``). The analysis bounds the *fixed-point* values themselves, so rounding
is part of the arithmetic, not a margin: an input is encoded with error <= tau/2
(tau = 2^-f), a weight likewise, every truncation adds < tau. Per node, with U the
element-wise bound of |decoded value| of its input:

* Gemm / MatMul / Conv with weight W, bias b: sum of products <= U (*) (|W| + tau/2)
  (checked against ``product_max_abs``; plus |b| + tau/2 for a protocol that truncates
  acc + b 2^f, crisp: ``ProtocolSpec.bias_in_sum``), output <= that + tau + |b| + tau/2;
* Mul by a constant c (or of two tensors): U_a * U_b (product), + tau;
* Add / Sub: U_a + U_b;  Relu, Neg, max pooling, data movement: U itself;
* AveragePool / GlobalAveragePool: the pooled U + tau (monotone in U);
* Sigmoid, Tanh, Softmax, Erf: 1 + tau.

Any other op: no certificate (``certify`` returns one with an empty box and a reason); the
client then refuses every query unless the protocol guards the range itself or the user
overrides (docs/runtime.md, "Serving").

A protocol that checks the sums of the later products in-protocol (STAMP's range guard,
``shadow_plan``; docs/protocols/stamp.md "Range guard") also gets *guarded* regions
(``certify(guard=True)``): the same analysis up to the first products only (those reading
the input through its scaler), which the guard does not see.

What the certificate reveals about the model (SECURITY.md): the box is a per-feature
function of the weights (through the scaler direction of ``calibrated_box`` and one scale
factor found by bisection); the ball is one number. Both are public like the model's
shapes, and every client sees the same certificate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from secinfer.arith.fixed import FixedPointConfig
from secinfer.errors import ConfigError, FixedPointRangeError

_MOVE = ("Flatten", "Reshape", "Identity", "Squeeze", "Unsqueeze", "Transpose")
_SAME = ("Relu", "Neg", "MaxPool", "GlobalMaxPool") + _MOVE
_AVG = ("AveragePool", "GlobalAveragePool")
_UNIT = ("Sigmoid", "Tanh", "Softmax", "Erf")
_PRODUCTS = ("Gemm", "MatMul", "Conv")
# a bound counts as under its limit only with this relative headroom (numpy's float rounding
# in the bound computation is ~1e-16 relative; this leaves ample room)
_HEADROOM = 1.0 - 1e-9
CERT_VERSION = 1


class _Unsupported(Exception):
    pass


@dataclass(frozen=True)
class RangeCertificate:
    """Public: every sample x with all(|x_i| <= box_i) or ||x||_2 <= ball is safe."""

    config: str
    features: int
    box: tuple[float, ...]
    ball: float | None = None
    centre: tuple[float, ...] | None = None  # the regions are around this point (a leading Sub's constant)
    value_limit: float | None = None       # the protocol's tighter bound on node values, if any
    input_limit: float | None = None       # the protocol's bound on |x|, if any
    note: str = ""                         # how it was made, or why the box is empty
    version: int = CERT_VERSION
    # {"box", "ball"} around the same centre, proven for the first products only: used when
    # the protocol guards the range of every later product itself (``certify(guard=True)``)
    guarded: dict | None = field(default=None, compare=False)

    def to_json(self) -> dict:
        return {"version": self.version, "config": self.config, "features": self.features,
                "box": [float(v) for v in self.box], "ball": self.ball,
                "centre": None if self.centre is None else [float(v) for v in self.centre], "value_limit": self.value_limit,
                "input_limit": self.input_limit, "note": self.note, "guarded": self.guarded}

    @classmethod
    def from_json(cls, d) -> "RangeCertificate":
        """Validate a certificate received from a server (a malformed one is refused)."""
        try:
            if not isinstance(d, dict) or int(d["version"]) != CERT_VERSION:
                raise ValueError("unknown version")
            feats = int(d["features"])
            box = tuple(float(v) for v in d["box"])
            ball = None if d.get("ball") is None else float(d["ball"])
            if feats < 1 or len(box) != feats or any(not math.isfinite(v) or v < 0 for v in box):
                raise ValueError("box")
            if ball is not None and (not math.isfinite(ball) or ball < 0):
                raise ValueError("ball")
            centre = None if d.get("centre") is None else tuple(float(v) for v in d["centre"])
            if centre is not None and (len(centre) != feats or not all(math.isfinite(v) for v in centre)):
                raise ValueError("centre")
            lims = [None if d.get(k) is None else float(d[k]) for k in ("value_limit", "input_limit")]
            guarded = d.get("guarded")
            if guarded is not None:
                gbox = [float(v) for v in guarded["box"]]
                gball = None if guarded.get("ball") is None else float(guarded["ball"])
                if len(gbox) != feats or any(not math.isfinite(v) or v < 0 for v in gbox) or \
                        (gball is not None and not (math.isfinite(gball) and gball >= 0)):
                    raise ValueError("guarded")
                guarded = {"box": gbox, "ball": gball}
            return cls(str(d["config"]), feats, box, ball, centre, lims[0], lims[1], str(d.get("note", ""))[:500],
                       guarded=guarded)
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"the model owner's range certificate is malformed ({e})") from None

    def violation(self, x, guarded: bool = False) -> dict | None:
        """The first sample outside both regions: {sample, feature, value, bound, norm, ball},
        or None when every sample is inside the box or the ball (``guarded``: the regions
        proven for the first products only, ``guarded``; None if there are none)."""
        if guarded and self.guarded is None:
            raise ConfigError("this certificate has no guarded regions")
        box_, ball_ = (self.guarded["box"], self.guarded["ball"]) if guarded else (self.box, self.ball)
        x = np.asarray(x, dtype=np.float64)
        flat = x.reshape(x.shape[0] if x.ndim > 1 else 1, -1)
        if flat.shape[1] != self.features:
            raise ConfigError(f"the query has {flat.shape[1]} features per sample; the served model takes "
                              f"{self.features}")
        box = np.asarray(box_, np.float64).reshape(1, -1)
        dev = flat if self.centre is None else flat - np.asarray(self.centre, np.float64).reshape(1, -1)
        with np.errstate(invalid="ignore"):
            out_box = ~(np.abs(dev) <= box)                  # NaN counts as outside
            norms = np.sqrt(np.sum(dev * dev, axis=1))
        for i in range(flat.shape[0]):
            if not out_box[i].any():
                continue
            if ball_ is not None and norms[i] <= ball_:
                continue
            j = int(np.argmax(out_box[i]))
            return {"sample": i, "feature": j, "value": float(flat[i, j]), "bound": float(box[0, j]),
                    "centre": None if self.centre is None else float(self.centre[j]),
                    "norm": float(norms[i]), "ball": ball_}
        return None

    def describe_violation(self, v: dict) -> str:
        c = v.get("centre")
        at = "" if c is None else f" - {c:.6g}"
        ball = (f", and the L2 norm of the sample{' minus the centre' if c is not None else ''} {v['norm']:.6g} "
                f"exceeds the certified radius {v['ball']:.6g}" if v["ball"] is not None else "")
        why = f" ({self.note})" if self.note and not any(self.box) else ""
        return (f"query sample {v['sample']}, feature {v['feature']} = {v['value']:.6g} is outside the model "
                f"owner's range certificate under {self.config} (|x{at}| <= {v['bound']:.6g} proven safe{why}){ball}: "
                f"the protocol could wrap and return a wrong answer")


# ---- the interval pass -------------------------------------------------------------------
def interval_pass(graph, U_in: dict, cfg: FixedPointConfig, value_limit: float,
                  first: int = 0, stop_at_risk: bool = True, first_block: bool = False,
                  bias_in_sum: bool = False) -> list[dict]:
    """Propagate element-wise bounds U (on |decoded fixed-point value|) from ``U_in`` through
    ``graph.nodes[first:]``; the risks (nodes whose bound reaches its limit). Raises
    _Unsupported for an op it does not follow. ``first_block``: only up to the first
    products (their sums of products are checked, their outputs are not followed: a
    protocol with an in-protocol range guard checks everything after them itself).
    ``bias_in_sum``: the protocol adds the bias before the truncation, so the bias counts
    towards ``product_max_abs`` (crisp; ``ProtocolSpec.bias_in_sum``)."""
    from secinfer.ir.float_exec import run_node_float

    tau = cfg.resolution
    W = graph.initializers
    U = dict(U_in)
    risks: list[dict] = []
    vlim = min(cfg.max_abs, value_limit) * _HEADROOM
    plim = cfg.product_max_abs * _HEADROOM

    def get(name, weight_pad=True):
        if name in U:
            return U[name]
        if name in W:
            w = np.abs(np.asarray(W[name], np.float64))
            return w + 0.5 * tau if weight_pad else w
        raise _Unsupported(f"tensor {name!r}")

    for n in graph.nodes[first:]:
        op, ins = n.op, n.inputs
        acc = None
        if first_block and not all(i in U or i in W for i in ins):
            continue
        if first_block and op in _PRODUCTS + ("Mul",) and ins[0] in U and not all(i in W for i in ins[1:2]):
            raise _Unsupported("a product of two activations in the first block")
        if op in _PRODUCTS:
            if len(ins) < 2 or ins[1] not in W and ins[1] not in U:
                raise _Unsupported(op)
            node0 = _strip_bias(n)
            acc = run_node_float(node0, [get(ins[0]), get(ins[1])])[0]
            y = acc + tau
            if len(ins) > 2 and ins[2]:
                bias = get(ins[2])
                if op == "Conv":
                    bias = bias.reshape((1, -1) + (1,) * (acc.ndim - 2))
                y = y + bias
                if bias_in_sum:      # crisp truncates acc + b 2^f (docs/protocols/crisp.md)
                    acc = acc + bias
        elif op == "Mul":
            acc = get(ins[0]) * get(ins[1])
            y = acc + tau
        elif op in ("Add", "Sub"):
            y = get(ins[0]) + get(ins[1])
        elif op in _SAME:
            y = run_node_float(n, [get(ins[0])] + [np.asarray(W[i]) for i in ins[1:] if i in W])[0]
            y = np.abs(y)
        elif op in _AVG:
            y = run_node_float(n, [get(ins[0])])[0] + tau
        elif op in _UNIT:
            y = np.ones_like(get(ins[0])) + tau
        else:
            raise _Unsupported(op)
        if not (first_block and acc is not None):    # a product's output: the guard's business
            U[n.outputs[0]] = np.asarray(y, np.float64)
        if acc is not None and np.size(acc) and float(np.max(acc)) >= plim:
            risks.append({"node": n.name, "op": op, "what": "product", "bound": float(np.max(acc)),
                          "limit": cfg.product_max_abs})
        elif np.size(y) and float(np.max(y)) >= vlim:
            risks.append({"node": n.name, "op": op, "what": "value", "bound": float(np.max(y)),
                          "limit": min(cfg.max_abs, value_limit)})
        if risks and stop_at_risk:
            return risks
    return risks


def _strip_bias(n):
    import dataclasses

    return dataclasses.replace(n, inputs=list(n.inputs[:2]))


def _one_sample(graph):
    g = graph.with_batch(1) if graph.inputs[0].shape and graph.inputs[0].shape[0] is None else graph
    shape = tuple(1 if d is None else int(d) for d in g.inputs[0].shape)
    if shape[0] != 1:
        raise _Unsupported(f"a model built for batch {shape[0]}")
    return g, shape


def leading_centre(graph) -> np.ndarray | None:
    """The constant c of a leading Sub(x, c) (a standardiser's mean) that is the input's only
    reader, broadcast to the features; regions are then taken around c, where the interval
    analysis keeps the cancellation |x - c| <= m that it would lose for |x| <= |c| + m."""
    g, shape = _one_sample(graph)
    name = g.inputs[0].name
    readers = [n for n in g.nodes if name in n.inputs]
    if len(readers) != 1 or g.nodes[0] is not readers[0]:
        return None
    n = readers[0]
    if n.op != "Sub" or len(n.inputs) != 2 or n.inputs[0] != name or n.inputs[1] not in g.initializers:
        return None
    c = np.asarray(g.initializers[n.inputs[1]], np.float64)
    try:
        return np.broadcast_to(c, shape).reshape(-1).copy()
    except ValueError:
        return None


def box_is_safe(graph, box: np.ndarray, cfg: FixedPointConfig, value_limit: float = math.inf,
                centred: bool = False, first_block: bool = False, bias_in_sum: bool = False) -> list[dict]:
    """Risks of the box (empty: every input with |x_i| <= box_i is safe; ``centred``:
    |x_i - c_i| <= box_i around the leading Sub's c, ``leading_centre``)."""
    g, shape = _one_sample(graph)
    tau = cfg.resolution
    u = np.abs(np.asarray(box, np.float64)).reshape(shape)
    if centred:    # x_enc - c_enc is off from x - c by <= tau/2 + tau/2
        top = float(np.max(u)) + tau if u.size else 0.0
        if top >= min(cfg.max_abs, value_limit) * _HEADROOM:
            return [{"node": g.nodes[0].name, "op": "Sub", "what": "value", "bound": top,
                     "limit": min(cfg.max_abs, value_limit)}]
        return interval_pass(g, {g.nodes[0].outputs[0]: u + tau}, cfg, value_limit, first=1,
                             first_block=first_block, bias_in_sum=bias_in_sum)
    return interval_pass(g, {g.inputs[0].name: u + 0.5 * tau}, cfg, value_limit, first_block=first_block,
                         bias_in_sum=bias_in_sum)


def _first_product(g):
    """(index of the first product node, its scalar prefix) when only element-wise
    scaler nodes (Mul / Add / Sub by a constant, movement) lead from the input to it."""
    cur = g.inputs[0].name
    pre = []
    for i, n in enumerate(g.nodes):
        if cur not in n.inputs:
            raise _Unsupported("the input feeds more than one path")
        if n.op in _PRODUCTS and n.inputs[0] == cur and len(n.inputs) > 1 and n.inputs[1] in g.initializers:
            return i, pre
        if n.op in ("Mul", "Add", "Sub") and n.inputs[0] == cur and len(n.inputs) == 2 \
                and n.inputs[1] in g.initializers:
            pre.append(n)
        elif n.op in _MOVE and n.inputs[0] == cur:
            pre.append(n)
        else:
            raise _Unsupported(n.op)
        cur = n.outputs[0]
    raise _Unsupported("no product")


def ball_risks(graph, radius: float, cfg: FixedPointConfig, value_limit: float = math.inf,
               centred: bool = False, first_block: bool = False, bias_in_sum: bool = False) -> list[dict]:
    """Risks of the L2 ball ||x||_2 <= radius (empty: safe). The first product's input z
    (after the leading scaler) has ||z||_2 <= N; each of its outputs is bounded by
    ||w_j + tau/2||_2 * N (Cauchy-Schwarz, every patch of a convolution is part of z);
    interval analysis from there."""
    from secinfer.ir.float_exec import run_node_float

    g, shape = _one_sample(graph)
    tau = cfg.resolution
    k = int(np.prod(shape))
    W = g.initializers
    idx, pre = _first_product(g)
    norm = radius + math.sqrt(k) * 0.5 * tau        # encoded input: each element off by <= tau/2
    top = radius + 0.5 * tau                        # and each |x_i| <= that
    if centred:                                     # ||x - c|| <= radius; x_enc - c_enc off by <= tau
        pre = pre[1:]
        norm, top = radius + math.sqrt(k) * tau, radius + tau
    vlim = min(cfg.max_abs, value_limit) * _HEADROOM
    if top >= vlim:
        return [{"node": g.nodes[0].name, "op": g.nodes[0].op, "what": "value", "bound": top, "limit": vlim}]
    for n in pre:
        if n.op == "Mul":
            c = np.abs(np.asarray(W[n.inputs[1]], np.float64)) + 0.5 * tau
            acc = top * float(np.max(c))
            if acc >= cfg.product_max_abs * _HEADROOM:
                return [{"node": n.name, "op": n.op, "what": "product", "bound": acc, "limit": cfg.product_max_abs}]
            norm = norm * float(np.max(c)) + math.sqrt(k) * tau
            top = acc + tau
        elif n.op in ("Add", "Sub"):
            c = np.abs(np.asarray(W[n.inputs[1]], np.float64)) + 0.5 * tau
            norm = norm + float(np.linalg.norm(np.broadcast_to(c, shape)))
            top = top + float(np.max(c))
        if top >= vlim:
            return [{"node": n.name, "op": n.op, "what": "value", "bound": top, "limit": vlim}]
    p = g.nodes[idx]
    w = np.abs(np.asarray(W[p.inputs[1]], np.float64)) + 0.5 * tau
    if p.op == "Conv":
        cols = np.sqrt(np.sum(w.reshape(w.shape[0], -1) ** 2, axis=1))     # per output channel
        out_shape = run_node_float(_strip_bias(p), [np.zeros((1,) + tuple(int(d) for d in g.shapes[p.inputs[0]][1:])),
                                                    w])[0].shape
        acc = np.broadcast_to(cols.reshape((1, -1) + (1,) * (len(out_shape) - 2)) * norm, out_shape)
    elif p.op in ("Gemm", "MatMul"):
        if int(p.attrs.get("transB", 0)) or int(p.attrs.get("transA", 0)):
            raise _Unsupported("transposed Gemm")
        acc = (np.sqrt(np.sum(w * w, axis=0)) * norm).reshape(1, -1)
    else:
        raise _Unsupported(p.op)
    acc = np.minimum(acc, _box_acc(g, p, top, w))     # never looser than the box bound
    b = 0.0
    if len(p.inputs) > 2 and p.inputs[2]:
        b = np.abs(np.asarray(W[p.inputs[2]], np.float64)) + 0.5 * tau
        b = b.reshape((1, -1) + (1,) * (acc.ndim - 2)) if p.op == "Conv" else b
    if float(np.max(acc + b if bias_in_sum else acc)) >= cfg.product_max_abs * _HEADROOM:
        return [{"node": p.name, "op": p.op, "what": "product", "bound": float(np.max(acc + b if bias_in_sum else acc)),
                 "limit": cfg.product_max_abs}]
    y = acc + tau + b
    if first_block:
        return []
    if float(np.max(y)) >= vlim:
        return [{"node": p.name, "op": p.op, "what": "value", "bound": float(np.max(y)), "limit": vlim}]
    return interval_pass(g, {p.outputs[0]: np.asarray(y, np.float64)}, cfg, value_limit, first=idx + 1,
                         bias_in_sum=bias_in_sum)


def _box_acc(g, p, top: float, w: np.ndarray) -> np.ndarray:
    from secinfer.ir.float_exec import run_node_float

    z = np.full((1,) + tuple(int(d) for d in g.shapes[p.inputs[0]][1:]), top)
    return run_node_float(_strip_bias(p), [z, w])[0]


# ---- the certificate ---------------------------------------------------------------------
def _largest(safe, hi: float, steps: int = 40) -> float:
    """The largest t in [0, hi] with safe(t) (safe is monotone: a smaller region is safer)."""
    if safe(hi):
        return hi
    lo = 0.0
    if not safe(lo):
        return 0.0
    for _ in range(steps):
        mid = 0.5 * (lo + hi) if hi / max(lo, 1e-300) < 4 else math.sqrt(max(lo, hi * 1e-12) * hi)
        if safe(mid):
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-9 * hi:
            break
    return lo


def _regions(graph, cfg: FixedPointConfig, vlim: float, ilim: float | None, first_block: bool = False,
             bias_in_sum: bool = False):
    """(box, ball, centre, note) proven safe (``first_block``: the first products only)."""
    from secinfer.ir.validate import calibrated_box

    cap = min(cfg.max_abs, ilim if ilim is not None else math.inf) * (1 - 2 ** -20)
    k = _features(graph)
    d, desc, _ = calibrated_box(graph)
    d = np.asarray(d, np.float64).reshape(-1)
    centre = leading_centre(graph)
    if centre is not None:    # a standardiser: its spread 1/s per feature, around its mean
        d = d - np.abs(centre)
        desc = "the model's standardiser: around its mean, widths proportional to its spread"
    if d.size != k or not np.all(np.isfinite(d)) or np.any(d <= 0):
        d = np.ones(k)
    dmax = float(np.max(d))
    if centre is not None:    # every point of the box must stay encodable as an input
        cap = max(0.0, min(cap, float(np.min(cfg.max_abs * (1 - 2 ** -20) - np.abs(centre)))))
    cen = centre is not None

    def box_ok(t):
        return not box_is_safe(graph, np.minimum(d * t, cap), cfg, vlim, centred=cen, first_block=first_block,
                               bias_in_sum=bias_in_sum)

    t = _largest(box_ok, cap / dmax)
    box = tuple(float(v) for v in np.minimum(d * t, cap))
    ball = None
    try:   # (a point of the ball must also be encodable: its every |x_i - c_i| <= radius <= cap)
        r = _largest(lambda r: not ball_risks(graph, r, cfg, vlim, centred=cen, first_block=first_block,
                                              bias_in_sum=bias_in_sum), cap)
        ball = float(r) if r > 0 else None
    except _Unsupported:
        pass
    note = f"interval analysis at {cfg.name}; box along the model's calibrated direction ({desc})"
    return box, ball, None if centre is None else tuple(float(v) for v in centre), note


def _features(graph) -> int:
    shape = graph.inputs[0].shape or ()
    return int(np.prod([1 if d is None else int(d) for d in shape[1:]])) if len(shape) > 1 else 1


def certify(graph, cfg: FixedPointConfig, limits: dict | None = None, guard: bool = False,
            bias_in_sum: bool = False) -> RangeCertificate:
    """The model owner's certificate for ``graph`` at ``cfg`` (``limits``: the protocol's
    ``value_limits``, when it holds values at more fractional bits than the reference).
    The box is the largest multiple of the model's calibrated direction (its leading
    scaler, ``validate.calibrated_box``; a unit box without one) proven safe; the ball the
    largest radius proven safe. ``guard``: the protocol can check the sums of every later
    product in-protocol (STAMP's range guard, ``shadow_plan``); then the certificate also
    holds the (larger) regions in which the first products are safe (``guarded``), when
    the guard covers every other product of this model. ``bias_in_sum``: see ``interval_pass``."""
    lim = limits or {}
    vlim = float(lim["values"]) if lim.get("values") is not None else math.inf
    ilim = float(lim["input"]) if lim.get("input") is not None else None
    k = _features(graph)
    lims = (None if math.isinf(vlim) else vlim, ilim)
    try:
        box, ball, centre, note = _regions(graph, cfg, vlim, ilim, bias_in_sum=bias_in_sum)
    except _Unsupported as e:
        box, ball, centre, note = (0.0,) * k, None, None, f"interval analysis does not follow {e}: no query is certified"
    guarded = None
    if guard:
        plan, why = shadow_plan(graph, cfg)
        if plan is not None:
            try:
                gbox, gball, gcentre, _ = _regions(graph, cfg, vlim, ilim, first_block=True, bias_in_sum=bias_in_sum)
                if gcentre == centre:
                    guarded = {"box": list(gbox), "ball": gball}
            except _Unsupported as e:
                why = str(e)
        if guarded is None:
            note += f"; the protocol's range guard does not cover this model ({why})"
    return RangeCertificate(cfg.name, k, box, ball, centre, *lims, note, guarded=guarded)


# ---- STAMP's range guard: which products are checked, with what bounds --------------------
_DEVICE_MAKERS = ("Relu", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")
_PASS_ON = ("Flatten", "Identity", "Squeeze", "Unsqueeze")     # keep the rows: [h; h'] stays [y; y']
SHADOW_BITS = 8


def _l1_ring(node, w: np.ndarray, cfg: FixedPointConfig) -> int:
    """max over the product's outputs of the l1 norm of its weight vector, in ring units."""
    a = np.abs(cfg.ring.to_signed(cfg.encode(np.asarray(w, np.float64))).astype(np.int64))
    if node.op == "Conv":
        rows = a.reshape(a.shape[0], -1)
    elif node.op in ("Gemm", "MatMul") and a.ndim == 2:
        if node.op == "Gemm" and int(node.attrs.get("transA", 0)):
            raise _Unsupported("Gemm with transA")
        rows = a if node.op == "Gemm" and int(node.attrs.get("transB", 0)) else a.T
    elif node.op == "Mul":
        return int(np.max(a)) if a.size else 0
    else:
        raise _Unsupported(f"{node.op} with a {a.ndim}-d weight")
    return int(np.max(np.sum(rows, axis=1))) if rows.size else 0


def shadow_plan(graph, cfg: FixedPointConfig) -> tuple[dict | None, str]:
    """The range guard's plan (docs/protocols/stamp.md, "Range guard"), or (None, why not):
    {"s": s, "check": {product: e}, "make": {tensor: a1}}. Every product that does not read
    the input (through scaler ops: the client's certificate covers those) is "checked": its
    device step compares the sum with its shadow (``kernels.shadow_check``, bound e =
    (2^s - 1) * a1, a1 its weight vectors' largest l1 norm in ring units); the device step
    that makes its input (a product's, or a ReLU / pooling step's) also makes the shadow
    (``kernels.shadow_make``). Needs e < 2^(l-1) (s is lowered until it holds), products of
    an activation and a weight only, and makers whose output reaches nothing but checked
    products (through row-keeping movement)."""
    W = graph.initializers
    prod = {o: n for n in graph.nodes for o in n.outputs}
    consumers: dict[str, list] = {}
    for n in graph.nodes:
        for i in n.inputs:
            consumers.setdefault(i, []).append(n)
    inputs = {t.name for t in graph.inputs}
    outputs = set(graph.output_names)

    def from_input(t) -> bool:    # computed from the input by local (non-product) ops only
        if t in inputs:
            return True
        n = prod.get(t)
        if n is None or n.op in _PRODUCTS + ("Mul",):
            return False
        return all(from_input(i) for i in n.inputs if i not in W)

    def keeps_rows(n) -> bool:     # [h; h'] stays [y; y'] through it
        if n.op in _PASS_ON:
            return True
        shape = n.attrs.get("shape") if n.op == "Reshape" else None
        return shape is not None and len(shape) > 0 and int(shape[0]) in (-1, 0) and list(shape).count(-1) <= 1

    def source(t):
        while t in prod and keeps_rows(prod[t]):
            t = prod[t].inputs[0]
        return t

    def reaches_only_products(t) -> bool:
        if t in outputs:
            return False
        for c in consumers.get(t, []):
            if keeps_rows(c):
                if not reaches_only_products(c.outputs[0]):
                    return False
            elif not (c.op in _PRODUCTS + ("Mul",) and c.inputs[0] == t):
                return False
        return True

    check: dict[str, int] = {}
    make: dict[str, int] = {}
    for n in graph.nodes:
        if n.op not in _PRODUCTS + ("Mul",):
            if n.op == "BatchNormalization" and not from_input(n.inputs[0]):
                return None, f"{n.name!r} (BatchNormalization) multiplies inside a device step"
            continue
        if len(n.inputs) < 2 or n.inputs[1] not in W or n.inputs[0] in W:
            return None, f"{n.name!r} ({n.op}) is not a product of an activation and a weight"
        if from_input(n.inputs[0]):
            continue
        src = source(n.inputs[0])
        maker = prod.get(src)
        if maker is None or not (maker.op in _PRODUCTS + ("Mul",) + _DEVICE_MAKERS):
            return None, f"{n.name!r} ({n.op}) reads {src!r}, which no device step makes"
        if n.op == "Mul" and np.asarray(W[n.inputs[1]]).size == 1:
            return None, f"{n.name!r} (a scalar Mul) may run inside its input's device step"
        if not reaches_only_products(src):
            return None, f"{src!r} is read by more than products"
        a1 = _l1_ring(n, W[n.inputs[1]], cfg)
        check[n.name] = a1
        make[src] = max(make.get(src, 0), a1)
    if not check:
        return None, "no product to guard (the client's certificate covers the model)"
    s = SHADOW_BITS
    while s > 1 and (2 ** s - 1) * max(check.values()) >= 1 << (cfg.ring_bits - 1):
        s -= 1
    if (2 ** s - 1) * max(check.values()) >= 1 << (cfg.ring_bits - 1):
        return None, "a layer's weights are too large for the guard"
    return {"s": s, "check": {k: (2 ** s - 1) * v for k, v in check.items()}, "make": make}, ""


def check_certified(cert: RangeCertificate, x) -> None:
    """FixedPointRangeError naming the feature, value and bound when a sample of x lies
    outside the certificate."""
    v = cert.violation(x)
    if v is not None:
        raise FixedPointRangeError(cert.describe_violation(v))
