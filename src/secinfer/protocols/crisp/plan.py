"""CRISP's plan: the two-party plan (``protocols.twopc.plan``) with the FSS gate batches of
each step as its public notes. The architecture is public in CRISP [II-A threat model];
the server sends the plan to the client and the dealer, who validate it before sizing
anything (keys, masks, buffers) by it.

How CRISP runs each step kind:

    lin      Gemm / Conv / Mul / MatMul with a server weight: Pi_Lin [Fig. 2], then the
             exact truncation by f (ARS gate with MAC twin), bias folded in before it
    avgpool  AveragePool: public window sums x encode(1/count) computed locally on the
             shares (no communication), then the ARS gate
    relu     the FSS ReLU gate with MAC twin [Alg. 1-2, Fig. 1]
    maxpool  tree of max(a, b) = ReLU(a - b) + b gates [Remark 3.1]
    move     Reshape / Flatten / Identity: local on the shares

Notes: ``gates`` = [[kind, count], ..] (kind "ars" or "relu"), one key batch each.
"""

from __future__ import annotations

import numpy as np

from secinfer.arith.fixed import FixedPointConfig
from secinfer.errors import ProtocolError, UnsupportedOpError
from secinfer.ir.fixed_ops import avgpool_reciprocals
from secinfer.ir.graph import lift_2d
from secinfer.protocols.twopc import plan as twoplan
from secinfer.protocols.twopc.plan import MAX_ELEMS, maxpool_levels

LINEAR_OPS = ("Gemm", "Conv", "Mul", "MatMul")
SUPPORTED = LINEAR_OPS + twoplan.MOVE_OPS + ("Relu", "MaxPool", "AveragePool")
KINDS = ("lin", "avgpool", "relu", "maxpool", "move")


def check_graph(graph) -> None:
    inits = set(graph.initializers)
    for node in graph.nodes:
        if node.op not in SUPPORTED:
            raise UnsupportedOpError(node.op, node.name, "crisp has no protocol for it")
        if node.op in LINEAR_OPS:
            if len(node.inputs) < 2 or node.inputs[1] not in inits or node.inputs[0] in inits:
                raise UnsupportedOpError(node.op, node.name, "crisp needs an activation times a server weight")
            if len(node.inputs) > 2 and node.inputs[2] not in inits:
                raise UnsupportedOpError(node.op, node.name, "crisp needs the bias to be a weight")
        if node.op == "Conv" and len(graph.initializers[node.inputs[1]].shape) != 4:
            raise UnsupportedOpError(node.op, node.name, "crisp runs 2-D convolutions only")
        if node.op == "MaxPool":
            p = lift_2d(node)
            if any(p["pads"]) or node.attrs.get("ceil_mode") or p["spatial"] != 2:
                raise UnsupportedOpError(node.op, node.name, "crisp: MaxPool without padding/ceil_mode, 2-D")
        if node.op == "AveragePool" and lift_2d(node)["spatial"] != 2:
            raise UnsupportedOpError(node.op, node.name, "crisp runs 2-D AveragePool only")
    if len(graph.inputs) != 1:
        raise UnsupportedOpError("graph", "inputs", "crisp runs models with exactly one input")


def _gates(st) -> dict:
    """The FSS gate batches of a step (its public notes)."""
    count = st.size
    if st.op in ("lin", "avgpool"):
        return {"gates": [["ars", count]]}
    if st.op == "relu":
        return {"gates": [["relu", count]]}
    if st.op == "maxpool":
        k = lift_2d(st.node())["kernel"]
        return {"gates": [["relu", count * p] for p in maxpool_levels(k[0] * k[1])]}
    return {"gates": []}


def compile_plan(graph, cfg: FixedPointConfig, batch: int) -> twoplan.ServerPlan:
    """Server side: the checked graph's steps with their gate notes, and the weights."""
    check_graph(graph)
    return twoplan.compile_plan(graph, cfg, batch, annotate=_gates)


def _check_gates(d: dict, kind: str) -> dict:
    gates = d.get("gates")
    if not isinstance(gates, list):
        raise ProtocolError("crisp: plan step without its gate list")
    for g in gates:
        if (not isinstance(g, list) or len(g) != 2 or g[0] not in ("ars", "relu")
                or not isinstance(g[1], int) or not 0 < g[1] <= MAX_ELEMS):
            raise ProtocolError(f"crisp: bad gate entry {g!r:.80} in the plan")
    return {"gates": gates}


PARSE = {"check_notes": _check_gates, "kinds": KINDS}


def gate_list(steps: list) -> list:
    """Every gate batch in execution order: (step index, position, kind, count)."""
    return [(i, j, kind, count) for i, st in enumerate(steps[1:-1], start=1)
            for j, (kind, count) in enumerate(st.notes["gates"])]


def avgpool_multipliers(step, cfg: FixedPointConfig) -> np.ndarray:
    """Public encode(1/count) per output position (signed int64, shape (OH, OW))."""
    return cfg.ring.to_signed(avgpool_reciprocals(step.in_shape, step.node().attrs, cfg))
