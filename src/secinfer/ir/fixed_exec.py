"""The bit-exact fixed-point reference executor: THE ORACLE every secure protocol matches.

``run_fixed(graph, x, cfg)`` encodes the input (round half up at scale 2^f), encodes every
weight the same way (``fixed_ops.encode_weights``), and runs each node with the kernel of
``secinfer.ir.fixed_ops``; semantics are written out in docs/fixed-point.md. The result
is a ring array (uint64 holding Z_2^l); ``cfg.decode`` turns it into floats.

``derived_error_bound`` (in ``secinfer.ir.error_bound``) bounds |decode(fixed) - float|.
"""

from __future__ import annotations

import warnings

import numpy as np

from secinfer.arith.fixed import FixedPointConfig
from secinfer.errors import ConfigError, FixedPointRangeError
from secinfer.ir.fixed_ops import OverflowRecord, encode_weights, run_node
from secinfer.ir.graph import Graph

_OVERFLOW_MODES = ("warn", "raise", "ignore", "collect")


class FixedPointOverflowWarning(UserWarning):
    """A sum of products left the ring's range: the fixed-point result is wrong."""


_BIASED_OPS = ("Gemm", "MatMul", "Conv")


def bias_sum_record(node, y: np.ndarray, b: np.ndarray, cfg: FixedPointConfig) -> OverflowRecord | None:
    """For a protocol that truncates acc + b 2^f in one step (crisp's ARS gate,
    docs/protocols/crisp.md "Bias"): a record when that integer leaves [-2^(l-1), 2^(l-1)),
    the signed range of the ring, for some element; None otherwise.

    Exact, from the node's output y = trunc(acc) + b: t = y - b is floor(acc / 2^f) (while
    acc itself fits the ring, which the product record checks), and t + b =
    floor((acc + b 2^f) / 2^f) as an integer; acc + b 2^f lies in [-2^(l-1), 2^(l-1)) iff
    t + b lies in [-2^(l-1-f), 2^(l-1-f)), because 2^(l-1) is a multiple of 2^f."""
    ring = cfg.ring
    bb = np.asarray(b, np.uint64)
    if node.op == "Conv":
        bb = bb.reshape((1, -1) + (1,) * (y.ndim - 2))
    t = ring.to_signed(ring.sub(y, bb))
    # |t| < 2^(l-1-f) <= 2^62; a bias clipped to +-2^62 is still outside the range: no int64 wrap
    v = t + np.clip(ring.to_signed(np.broadcast_to(bb, y.shape)), -(1 << 62), 1 << 62)
    half = 1 << (cfg.ring_bits - 1 - cfg.frac_bits)
    bad = (v >= half) | (v < -half)
    if not np.any(bad):
        return None
    worst = float(np.max(np.abs(v[bad]).astype(np.float64))) * cfg.resolution
    return OverflowRecord(node.name, node.op, "product with bias", worst, cfg.product_max_abs)


def run_fixed_all(graph: Graph, feeds, cfg: FixedPointConfig, *, ring_inputs: bool = False,
                  trace: dict | None = None, overflow: str = "warn",
                  overflows: list | None = None,
                  weights: dict[str, np.ndarray] | None = None,
                  bias_in_sum: bool = False) -> dict[str, np.ndarray]:
    """Run every node in the ring; returns all graph outputs (ring arrays) by name.

    feeds: one array or a name->array dict, floats (encoded here) or, with
    ``ring_inputs=True``, already-encoded ring arrays.
    trace: if a dict is given, it receives every tensor (inputs, weights, node outputs).
    overflow: "warn" (FixedPointOverflowWarning), "raise" (FixedPointRangeError),
    "collect" (only append to ``overflows``) or "ignore" (no checking, fastest).
    weights: pre-encoded weights (default: ``encode_weights(graph, cfg)``).
    bias_in_sum: also check, for every Gemm / MatMul / Conv with a bias, that acc + b 2^f
    fits the ring (``bias_sum_record``), for protocols that truncate it in one step
    (``ProtocolSpec.bias_in_sum``: crisp). The computed values are unchanged.
    """
    if overflow not in _OVERFLOW_MODES:
        raise ConfigError(f"overflow must be one of {_OVERFLOW_MODES}, got {overflow!r}")
    feeds = graph.resolve_feeds(feeds)
    env: dict[str, np.ndarray] = {}
    for k, v in feeds.items():
        env[k] = cfg.ring.reduce(np.asarray(v, dtype=np.uint64)) if ring_inputs else cfg.encode(v)
    env.update(encode_weights(graph, cfg) if weights is None else weights)
    report: list[OverflowRecord] | None = None if overflow == "ignore" else []
    for node in graph.nodes:
        outs = run_node(node, [env[i] for i in node.inputs], cfg, report)
        for o, v in zip(node.outputs, outs):
            env[o] = v
        if bias_in_sum and report is not None and node.op in _BIASED_OPS and len(node.inputs) > 2:
            rec = bias_sum_record(node, outs[0], env[node.inputs[2]], cfg)
            if rec is not None:
                report.append(rec)
        if report:
            if overflow == "raise":
                raise FixedPointRangeError(str(report[0]))
            if overflow == "warn":
                for r in report:
                    warnings.warn(str(r), FixedPointOverflowWarning, stacklevel=2)
            if overflows is not None:
                overflows.extend(report)
            report.clear()
    if trace is not None:
        trace.update(env)
    return {k: env[k] for k in graph.output_names}


def run_fixed(graph: Graph, x, cfg: FixedPointConfig, *, trace: dict | None = None,
              overflow: str = "warn", overflows: list | None = None,
              ring_inputs: bool = False, bias_in_sum: bool = False) -> np.ndarray:
    """First graph output as a ring array (uint64). See ``run_fixed_all`` for options."""
    outs = run_fixed_all(graph, x, cfg, ring_inputs=ring_inputs, trace=trace, overflow=overflow,
                         overflows=overflows, bias_in_sum=bias_in_sum)
    return outs[graph.output_names[0]]


def run_fixed_decoded(graph: Graph, x, cfg: FixedPointConfig, **kw) -> np.ndarray:
    """``cfg.decode(run_fixed(...))``: the fixed-point result in real units."""
    return cfg.decode(run_fixed(graph, x, cfg, **kw))


def derived_error_bound(graph: Graph, cfg: FixedPointConfig, input_range: float | None = None,
                        x=None) -> dict:
    """Bound on |decode(run_fixed) - run_float| for every tensor; see error_bound.py."""
    from secinfer.ir.error_bound import error_bounds

    return error_bounds(graph, cfg, input_range=input_range, x=x)
