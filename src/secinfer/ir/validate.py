"""Checks before any party starts: weights, inputs and ranges against the fixed-point bounds.

One function per question, shared by ``secinfer inspect``, ``secinfer run``, ``demo`` and
the Python API (``secinfer.run``), so that a model or a query the reference executor
cannot compute exactly is refused before a protocol computes something else:

* ``check_weights``: every weight is finite and encodable under the configuration (a NaN
  weight is refused, never encoded as garbage);
* ``check_query``: the query is finite and encodable at the input's fractional bits;
* ``overflow_nodes``: the nodes at which the bit-exact reference executor leaves the ring
  on this very query (the exact check ``demo`` uses); with ``bias_in_sum`` (protocols that
  truncate acc + b 2^f in one step: ``ProtocolSpec.bias_in_sum``, crisp) also the Gemm /
  MatMul / Conv nodes where acc + b 2^f leaves it although acc alone does not;
* ``range_report``: derived bounds (``error_bound``) on every tensor for every input with
  |x| <= R, and the nodes where the ring could overflow: what ``inspect`` shows;
* ``check_run``: the whole pre-launch check of one (model, query, configuration), with
  ``limits`` for protocols that hold values at more fractional bits than the reference
  (their smaller range is checked on the float values of every node).

Every refusal names the node and the fix: a fixed-point configuration with a larger
ring (``--fixed fx64f13``), or a protocol over Z_2^64.
"""

from __future__ import annotations

import math

import numpy as np

from secinfer.arith import public_rng
from secinfer.arith.fixed import NAMED_CONFIGS, FixedPointConfig
from secinfer.errors import FixedPointRangeError, ModelError, SecinferError

# models with more multiply-accumulates than this (times the batch) are not run through the
# reference executor before launch (the check would cost as much as the protocol)
EXACT_CHECK_MACS = 50_000_000


def larger_configs(cfg: FixedPointConfig) -> list[str]:
    return sorted(n for n, c in NAMED_CONFIGS.items() if c.ring_bits > cfg.ring_bits
                  or (c.ring_bits == cfg.ring_bits and c.frac_bits < cfg.frac_bits))


def fix_hint(cfg: FixedPointConfig, protocol: str | None = None) -> str:
    bigger = [n for n in larger_configs(cfg) if NAMED_CONFIGS[n].ring_bits > cfg.ring_bits]
    if bigger:
        who = f"if protocol {protocol!r} accepts it" if protocol else "where the protocol accepts it"
        return (f"use a larger ring: --fixed {bigger[0]} ({who}) or a protocol over Z_2^64 "
                f"(astra, crisp, reference)")
    return "rescale the model's weights or inputs (their values exceed even Z_2^64 at this precision)"


def _readers(graph) -> dict[str, str]:
    out: dict[str, str] = {}
    for n in graph.nodes:
        for i in n.inputs:
            out.setdefault(i, f"{n.name!r} ({n.op})")
    return out


def check_weights(graph, cfg: FixedPointConfig | None = None) -> None:
    """Every weight finite and (given ``cfg``) representable; ModelError names the tensor."""
    graph.require_weights()
    readers = _readers(graph)
    for name, w in graph.initializers.items():
        w = np.asarray(w, dtype=np.float64)
        if not np.all(np.isfinite(w)):
            raise ModelError(f"weight {name!r} read by node {readers.get(name, '-')} holds NaN or "
                             f"infinity; the model cannot be run (fix the model file)")
        if cfg is not None and w.size and float(np.max(np.abs(w))) >= cfg.max_abs:
            raise FixedPointRangeError(
                f"weight {name!r} read by node {readers.get(name, '-')} reaches {float(np.max(np.abs(w))):.4g}, "
                f"outside {cfg.name}'s range +-{cfg.max_abs:.4g}; {fix_hint(cfg)}")


def check_query(graph, x, cfg: FixedPointConfig, input_limit: float | None = None) -> None:
    """The query is finite and fits the input encoding (optionally a tighter ``input_limit``)."""
    x = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        bad = np.argwhere(~np.isfinite(x.reshape(len(x), -1)) if x.ndim > 1 else ~np.isfinite(x))
        raise FixedPointRangeError(f"the input holds NaN or infinity (first at index {tuple(bad[0])})")
    limit = cfg.max_abs if input_limit is None else min(cfg.max_abs, input_limit)
    big = np.abs(x) >= limit
    if np.any(big):
        where = tuple(int(i) for i in np.argwhere(big)[0])
        raise FixedPointRangeError(
            f"input value {float(x[where]):.6g} at index {where} is outside the range this protocol "
            f"encodes under {cfg.name} (|x| < {limit:.4g}); refused rather than wrapped")


def overflow_nodes(graph, x, cfg: FixedPointConfig, bias_in_sum: bool = False) -> list[dict]:
    """Nodes where the bit-exact reference executor leaves the ring on the query ``x``;
    with ``bias_in_sum`` also where acc + b 2^f does (exactly: ``fixed_exec.bias_sum_record``)."""
    from secinfer.ir.fixed_exec import run_fixed

    found: list = []
    run_fixed(graph, x, cfg, overflow="collect", overflows=found, bias_in_sum=bias_in_sum)
    seen: dict[str, dict] = {}
    for r in found:
        d = seen.setdefault(r.node, {"node": r.node, "op": r.op, "what": r.what, "bound": r.max_abs,
                                     "limit": r.limit})
        d["bound"] = max(d["bound"], r.max_abs)
    return list(seen.values())


def range_report(graph, cfg: FixedPointConfig, box=None, x=None, bias_in_sum: bool = False) -> dict:
    """Derived bounds for the inputs in ``box`` (per-feature magnitudes, or one number) or
    for the calibration input ``x`` (then the overflow verdict comes from the bit-exact
    reference executor on x, as ``demo`` does), and the overflow risks. ``bias_in_sum``: the
    protocol truncates acc + b 2^f (crisp), so a bias counts towards the sums of products
    (on ``x`` and in the per-feature box; the scalar fallback of ``error_bound`` does not
    see it)."""
    from secinfer.ir.error_bound import error_bounds

    if x is not None:
        rep = error_bounds(graph, cfg, x=x)
        risks = overflow_nodes(graph, x, cfg, bias_in_sum=bias_in_sum)
        out = graph.output_names[0]
        return {"config": cfg.name, "mode": "calibration input", "output_max_abs":
                rep["tensors"].get(out, {}).get("max_abs"), "output_error": rep["bound"], "risks": risks,
                "max_abs": max((v["max_abs"] for v in rep["tensors"].values()), default=0.0),
                "value_limit": cfg.max_abs, "product_limit": cfg.product_max_abs}
    k = graph.inputs[0].shape[-1] if graph.inputs[0].shape else 1
    box = np.broadcast_to(np.asarray(box, np.float64).reshape(-1), (k or 1,))
    vec = box_bounds(graph, box, cfg, bias_in_sum=bias_in_sum)
    rep = error_bounds(graph, cfg, input_range=float(np.max(box))) if vec is None else None
    err = None
    try:
        err = error_bounds(graph, cfg, input_range=float(np.max(box)))["bound"] if rep is None else rep["bound"]
    except (SecinferError, ValueError, OverflowError):
        err = float("nan")
    if vec is not None:
        return {"config": cfg.name, "mode": "box", "output_max_abs": vec["output_max_abs"], "output_error": err,
                "risks": vec["risks"], "max_abs": max(vec["tensors"].values()), "value_limit": cfg.max_abs,
                "product_limit": cfg.product_max_abs}
    out = graph.output_names[0]
    return {"config": cfg.name, "mode": "range", "output_max_abs": rep["tensors"].get(out, {}).get("max_abs"),
            "output_error": rep["bound"], "risks": rep["overflow_risks"],
            "max_abs": max((v["max_abs"] for v in rep["tensors"].values()), default=0.0),
            "value_limit": cfg.max_abs, "product_limit": cfg.product_max_abs}


def outside_box(x, box) -> tuple | None:
    """The first (sample, feature) of x outside the calibrated box, or None."""
    x = np.asarray(x, np.float64)
    if x.ndim != 2 or np.size(box) not in (1, x.shape[1]):
        return None
    bad = np.abs(x) > np.asarray(box).reshape(1, -1)
    if not np.any(bad):
        return None
    i, j = np.argwhere(bad)[0]
    return int(i), int(j), float(x[i, j]), float(np.asarray(box).reshape(-1)[j if np.size(box) > 1 else 0])


# The calibrated range of a model with an input scaler: |standardised value| <= CAL_SPREAD
# (a Sub -> Mul standardiser, x*s + o min-max scaler). Without a scaler: |x| <= CAL_SPREAD.
CAL_SPREAD = 1.0
# a query beyond this many standard units of the scaler is reported as out of the
# calibrated range (computed all the same when the exact check finds no overflow)
OUT_OF_RANGE_SPREAD = 10.0


def calibrated_box(graph, spread: float = CAL_SPREAD) -> tuple[np.ndarray, str, bool]:
    """Per-feature bound m (|x_i| <= m_i) of the inputs a model was calibrated for, from its
    leading scaler: a standardiser Sub(x, c) -> Mul(., s) calibrates |(x - c) * s| <= spread,
    a min-max scaler Mul(x, s) -> Add(., o) calibrates |x * s + o| <= spread, a lone Mul(x, s)
    |x * s| <= spread. Returns (m, description, whether a scaler defined it)."""
    inp = graph.inputs[0]
    k = inp.shape[-1] if inp.shape and inp.shape[-1] else 1
    first = [n for n in graph.nodes if inp.name in n.inputs]
    w = graph.initializers

    def vec(name):
        v = w.get(name)
        if v is None or np.asarray(v).size not in (1, k):
            return None
        return np.broadcast_to(np.abs(np.asarray(v, np.float64)).reshape(-1), (k,))

    if len(first) == 1 and len(inp.shape) == 2 and len(first[0].inputs) == 2 and first[0].inputs[0] == inp.name:
        n0 = first[0]
        nxt = [n for n in graph.nodes if n0.outputs[0] in n.inputs]
        n1 = nxt[0] if len(nxt) == 1 and len(nxt[0].inputs) == 2 else None
        c, d = vec(n0.inputs[1]), (vec(n1.inputs[1]) if n1 is not None else None)
        with np.errstate(divide="ignore"):
            if n0.op == "Sub" and n1 is not None and n1.op == "Mul" and c is not None and d is not None:
                return c + spread / d, f"|standardised input| <= {spread:g} (the model's scaler)", True
            if n0.op == "Mul" and n1 is not None and n1.op == "Add" and c is not None and d is not None:
                return (spread + d) / c, f"|scaled input| <= {spread:g} (the model's min-max scaler)", True
            if n0.op == "Mul" and c is not None:
                return spread / c, f"|scaled input| <= {spread:g} (the model's input scaling)", True
    return np.full(k, float(spread)), f"|x| <= {spread:g} (no input scaler: pass a calibration input)", False


def probe_inputs(graph, n: int = 4, spread: float = CAL_SPREAD, seed: int = 0) -> np.ndarray:
    """n typical inputs of the calibrated range (fixed seed): uniform in [-spread, spread]
    after the model's leading scaler (standardiser, min-max scaler or input scaling), or
    uniform in [-spread, spread] when it has none."""
    rng = public_rng("ir/validate/probe-inputs", seed)
    inp = graph.inputs[0]
    if inp.shape and inp.shape[0] is not None:
        n = int(inp.shape[0])      # a model built for a fixed batch
    shape = (n,) + tuple(1 if d is None else int(d) for d in inp.shape[1:])
    u = rng.uniform(-spread, spread, size=shape)
    _, _, scaled = calibrated_box(graph, spread)
    if not scaled:
        return u
    n0 = next(nd for nd in graph.nodes if inp.name in nd.inputs)
    n1 = next((nd for nd in graph.nodes if n0.outputs[0] in nd.inputs), None)
    w = graph.initializers
    c = np.asarray(w[n0.inputs[1]], np.float64).reshape(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        if n0.op == "Sub":
            x = c + u / np.asarray(w[n1.inputs[1]], np.float64).reshape(-1)
        elif n1 is not None and n1.op == "Add" and n1.inputs[1] in w:
            x = (u - np.asarray(w[n1.inputs[1]], np.float64).reshape(-1)) / c
        else:
            x = u / c
    return np.where(np.isfinite(x), x, 0.0)


_UNIT_FUNCS = ("Sigmoid", "Tanh", "Softmax", "Erf")
_SAME = ("Relu", "Neg", "Identity")


def box_bounds(graph, box: np.ndarray, cfg: FixedPointConfig, bias_in_sum: bool = False) -> dict | None:
    """Per-element magnitude bounds for every input in the box (interval arithmetic on
    |values|; error terms from error_bound are added as a margin). None when the graph has
    an op this pass does not follow (callers then use error_bound's scalar analysis).
    ``bias_in_sum``: a Gemm's bias counts towards its sum of products (crisp)."""
    W = {k: np.abs(np.asarray(v, np.float64)) for k, v in graph.initializers.items()}
    M: dict[str, np.ndarray] = {graph.inputs[0].name: np.asarray(box, np.float64).reshape(1, -1)}
    if len(graph.inputs) != 1 or len(graph.inputs[0].shape) != 2:
        return None
    risks: list[dict] = []
    tau = cfg.resolution

    def get(name):
        return W[name] if name in W else M[name]

    for n in graph.nodes:
        op, ins = n.op, n.inputs
        if any(i not in W and i not in M for i in ins):
            return None
        if op in ("Add", "Sub"):
            y = get(ins[0]) + get(ins[1])
            lim, what = cfg.max_abs, "value"
            acc = y
        elif op == "Mul":
            y = get(ins[0]) * get(ins[1])
            acc, lim, what = y, cfg.product_max_abs, "product"
        elif op == "Gemm" and ins[1] in W and M[ins[0]].ndim == 2:
            acc = (M[ins[0]] + tau) @ W[ins[1]]
            y = acc + (W[ins[2]] if len(ins) > 2 else 0.0)
            lim, what = cfg.product_max_abs, "product"
            if bias_in_sum and len(ins) > 2:
                acc, what = y, "product with bias"
        elif op in _SAME:
            y = acc = M[ins[0]]
            lim, what = cfg.max_abs, "value"
        elif op in _UNIT_FUNCS:
            y = acc = np.ones_like(M[ins[0]])
            lim, what = cfg.max_abs, "value"
        elif op == "Concat" and all(np.ndim(get(i)) == 2 for i in ins):
            parts = [np.broadcast_to(get(i), (1, graph.shapes[i][-1])) for i in ins]
            y = acc = np.concatenate(parts, axis=-1)
            lim, what = cfg.max_abs, "value"
        else:
            return None
        y = np.atleast_2d(np.asarray(y, np.float64))
        M[n.outputs[0]] = y
        top = float(np.max(np.abs(acc))) if np.size(acc) else 0.0
        if top >= lim or float(np.max(y)) >= cfg.max_abs:
            risks.append({"node": n.name, "op": op, "what": what if top >= lim else "value",
                          "bound": top if top >= lim else float(np.max(y)),
                          "limit": lim if top >= lim else cfg.max_abs})
    out = graph.output_names[0]
    return {"tensors": {k: float(np.max(v)) for k, v in M.items()}, "output_max_abs": float(np.max(M[out])),
            "risks": risks}


def describe_risk(r: dict, cfg: FixedPointConfig, protocol: str | None = None) -> str:
    if r["what"] == "product with bias":
        who = f"protocol {protocol!r}" if protocol else "this protocol"
        return (f"node {r['node']!r} ({r['op']}): its sum of products plus the bias reaches {r['bound']:.4g} but "
                f"{cfg.name} holds only {r['limit']:.4g} there ({who} adds the bias before the truncation, in "
                f"one step; the sum of products alone fits, so a protocol that adds the bias after the "
                f"truncation, such as the reference, computes it); {fix_hint(cfg, protocol)}")
    what = "sum of products (before truncation)" if r["what"] == "product" else "value"
    return (f"node {r['node']!r} ({r['op']}): its {what} reaches {r['bound']:.4g} but {cfg.name} holds "
            f"only {r['limit']:.4g}; {fix_hint(cfg, protocol)}")


def limit_violation(graph, x, limit: float) -> dict | None:
    """The first node whose float value reaches ``limit`` on the query (None if none)."""
    from secinfer.ir.float_exec import run_float_all

    vals = run_float_all(graph, x, intermediates=True)
    for n in graph.nodes:
        for o in n.outputs:
            v = np.asarray(vals[o])
            m = float(np.max(np.abs(v))) if v.size else 0.0
            if not math.isfinite(m) or m >= limit:
                return {"node": n.name, "op": n.op, "what": "value", "bound": m, "limit": limit}
    return None


def check_run(graph, x, cfg: FixedPointConfig, *, protocol: str | None = None,
              limits: dict | None = None, exact: bool | None = None, bias_in_sum: bool = False) -> list[str]:
    """Everything checked before launch for one query; raises FixedPointRangeError (or
    ModelError for bad weights) and returns notes (e.g. that the exact check was skipped).

    ``limits`` (optional, from the protocol): {"input": max |x|, "values": max |value| of
    any node output} when the protocol's own encoding holds less than the reference's.
    ``bias_in_sum`` (``ProtocolSpec.bias_in_sum``): the protocol truncates acc + b 2^f in one
    step (crisp), so the exact check also refuses where that sum leaves the ring."""
    notes: list[str] = []
    check_weights(graph, cfg)
    lim = limits or {}
    check_query(graph, x, cfg, lim.get("input"))
    batch = int(np.shape(x)[0]) if np.ndim(x) else 1
    if exact is None:
        exact = graph.stats()["macs"] * max(batch, 1) <= EXACT_CHECK_MACS
    if exact:
        over = overflow_nodes(graph, x, cfg, bias_in_sum=bias_in_sum)
        if over:
            raise FixedPointRangeError(
                f"this input overflows the fixed-point ring of {cfg.name}, so the protocol (which computes the "
                f"bit-exact reference) would return a wrong answer: {describe_risk(over[0], cfg, protocol)}"
                + (f" (also at {', '.join(repr(o['node']) for o in over[1:4])})" if len(over) > 1 else ""))
    else:
        notes.append(f"the model is too large for the exact pre-launch overflow check "
                     f"(> {EXACT_CHECK_MACS:,} multiply-accumulates); only inputs and weights were checked")
    box, desc, scaled = calibrated_box(graph, OUT_OF_RANGE_SPREAD)
    ob = outside_box(x, box) if scaled else None
    if ob is not None:
        notes.append(f"input [{ob[0]}, {ob[1]}] = {ob[2]:.6g} is outside the model's calibrated range ({desc}: "
                     f"|x| <= {ob[3]:.4g}); it was checked exactly and does not overflow")
    if lim.get("values") is not None:
        hit = limit_violation(graph, x, float(lim["values"]))
        if hit is not None:
            raise FixedPointRangeError(
                f"this input takes node {hit['node']!r} ({hit['op']}) to {hit['bound']:.4g}, beyond what "
                f"protocol {protocol!r} holds (|value| < {hit['limit']:.4g} at its fixed-point precision); "
                f"refused rather than wrapped (the reference executor would compute it: use another protocol "
                f"or rescale the input)")
    return notes
