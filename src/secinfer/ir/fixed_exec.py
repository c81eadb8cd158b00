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


def run_fixed_all(graph: Graph, feeds, cfg: FixedPointConfig, *, ring_inputs: bool = False,
                  trace: dict | None = None, overflow: str = "warn",
                  overflows: list | None = None,
                  weights: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Run every node in the ring; returns all graph outputs (ring arrays) by name.

    feeds: one array or a name->array dict, floats (encoded here) or, with
    ``ring_inputs=True``, already-encoded ring arrays.
    trace: if a dict is given, it receives every tensor (inputs, weights, node outputs).
    overflow: "warn" (FixedPointOverflowWarning), "raise" (FixedPointRangeError),
    "collect" (only append to ``overflows``) or "ignore" (no checking, fastest).
    weights: pre-encoded weights (default: ``encode_weights(graph, cfg)``).
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
              ring_inputs: bool = False) -> np.ndarray:
    """First graph output as a ring array (uint64). See ``run_fixed_all`` for options."""
    outs = run_fixed_all(graph, x, cfg, ring_inputs=ring_inputs, trace=trace, overflow=overflow,
                         overflows=overflows)
    return outs[graph.output_names[0]]


def run_fixed_decoded(graph: Graph, x, cfg: FixedPointConfig, **kw) -> np.ndarray:
    """``cfg.decode(run_fixed(...))``: the fixed-point result in real units."""
    return cfg.decode(run_fixed(graph, x, cfg, **kw))


def derived_error_bound(graph: Graph, cfg: FixedPointConfig, input_range: float | None = None,
                        x=None) -> dict:
    """Bound on |decode(run_fixed) - run_float| for every tensor; see error_bound.py."""
    from secinfer.ir.error_bound import error_bounds

    return error_bounds(graph, cfg, input_range=input_range, x=x)
