"""The layer plan of one CRISP inference: the public architecture all three roles agree on.

The server compiles the IR graph (``compile_plan``) into a list of steps; the weights stay
in the server's ``ServerPlan``; the public part (ops, tensor shapes, gate counts -- the
architecture, public in CRISP [II-A threat model]) is sent as JSON to the client and the
dealer, who validate it (``parse_public_plan``) before sizing anything by it.

Steps (one per IR node):

    lin      Gemm / Conv / Mul / MatMul with a server weight: Pi_Lin [Fig. 2], then the
             exact truncation by f (ARS gate with MAC twin), bias folded in before it
    avgpool  AveragePool: public window sums x encode(1/count) computed locally on the
             shares (no communication), then the ARS gate
    relu     the FSS ReLU gate with MAC twin [Alg. 1-2, Fig. 1]
    maxpool  tree of max(a, b) = ReLU(a - b) + b gates [Remark 3.1]
    move     Reshape / Flatten / Identity: local on the shares
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from secinfer.arith.fixed import FixedPointConfig
from secinfer.errors import ProtocolError, UnsupportedOpError
from secinfer.ir.fixed_ops import avgpool_reciprocals
from secinfer.ir.graph import Node, lift_2d

LINEAR_OPS = ("Gemm", "Conv", "Mul", "MatMul")
MOVE_OPS = ("Reshape", "Flatten", "Identity")
SUPPORTED = LINEAR_OPS + MOVE_OPS + ("Relu", "MaxPool", "AveragePool")
_MAX_STEPS = 4096
_MAX_ELEMS = 1 << 26


@dataclass
class ServerPlan:
    public: list                      # list of step dicts (JSON-able)
    weights: dict = field(default_factory=dict)   # step index -> {"w": int64, "b": int64|None}


def maxpool_levels(window: int) -> list[int]:
    """Pairs compared at each level of the max tree over ``window`` elements."""
    levels, m = [], window
    while m > 1:
        levels.append(m // 2)
        m = m - m // 2
    return levels


def _shape(a) -> list[int]:
    return [int(d) for d in np.shape(a)]


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


def compile_plan(graph, cfg: FixedPointConfig, batch: int) -> ServerPlan:
    """Server side: steps with shapes from a dry run of the oracle on zeros, plus weights."""
    from secinfer.ir.fixed_exec import run_fixed_all
    from secinfer.ir.fixed_ops import encode_weights

    check_graph(graph)
    inp = graph.inputs[0]
    in_shape = tuple(batch if (d is None or (isinstance(d, int) and d < 0)) else int(d) for d in inp.shape)
    trace: dict = {}
    run_fixed_all(graph, {inp.name: np.zeros(in_shape)}, cfg, trace=trace, overflow="ignore")
    enc = encode_weights(graph, cfg)
    signed = {k: cfg.ring.to_signed(v) for k, v in enc.items()}
    steps: list = [{"op": "input", "out": inp.name, "out_shape": list(in_shape)}]
    weights: dict = {}
    for node in graph.nodes:
        x = node.inputs[0]
        st = {"name": node.name, "node_op": node.op, "in": x, "out": node.outputs[0],
              "in_shape": _shape(trace[x]), "out_shape": _shape(trace[node.outputs[0]]),
              "attrs": _jsonable_attrs(node.attrs)}
        count = int(np.prod(st["out_shape"]))
        if node.op in LINEAR_OPS:
            wmax = int(np.max(np.abs(signed[node.inputs[1]]), initial=0))
            # wbits: public bound on |W| (bit length of the largest weight) used to size
            # the HE masking of Pi_Lin; the only weight-dependent value in the plan.
            st.update(op="lin", gates=[["ars", count]], bias=len(node.inputs) > 2,
                      wbits=max(1, wmax.bit_length()))
            weights[len(steps)] = {"w": signed[node.inputs[1]],
                                   "b": signed[node.inputs[2]] if len(node.inputs) > 2 else None}
        elif node.op == "AveragePool":
            st.update(op="avgpool", gates=[["ars", count]])
        elif node.op == "Relu":
            st.update(op="relu", gates=[["relu", count]])
        elif node.op == "MaxPool":
            k = lift_2d(node)["kernel"]
            st.update(op="maxpool", gates=[["relu", count * p] for p in maxpool_levels(k[0] * k[1])])
        else:
            st.update(op="move", gates=[])
        steps.append(st)
    steps.append({"op": "output", "in": graph.output_names[0],
                  "in_shape": _shape(trace[graph.output_names[0]])})
    return ServerPlan(steps, weights)


def _jsonable_attrs(attrs: dict) -> dict:
    out = {}
    for k, v in attrs.items():
        if isinstance(v, (tuple, list)):
            out[k] = [int(a) if isinstance(a, (int, np.integer)) else a for a in v]
        elif isinstance(v, (np.integer,)):
            out[k] = int(v)
        elif isinstance(v, (int, float, str, bool)) or v is None:
            out[k] = v
        else:
            out[k] = repr(v)
    return out


def encode_public(plan: ServerPlan) -> np.ndarray:
    return np.frombuffer(json.dumps(plan.public, separators=(",", ":")).encode(), dtype=np.uint8)


def parse_public_plan(raw: np.ndarray) -> list:
    """Client/dealer side: decode and validate the server's plan (sizes bounded)."""
    try:
        steps = json.loads(bytes(raw).decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError(f"crisp: plan from the server does not decode: {e}") from None
    if not isinstance(steps, list) or not 2 <= len(steps) <= _MAX_STEPS:
        raise ProtocolError("crisp: plan must be a list of steps")
    if steps[0].get("op") != "input" or steps[-1].get("op") != "output":
        raise ProtocolError("crisp: plan must start with the input and end with the output")
    known = {"input", "output", "lin", "avgpool", "relu", "maxpool", "move"}
    for st in steps:
        if not isinstance(st, dict) or st.get("op") not in known:
            raise ProtocolError(f"crisp: unknown plan step {st!r:.80}")
        for key in ("in_shape", "out_shape"):
            if key in st:
                shp = st[key]
                if (not isinstance(shp, list) or not all(isinstance(d, int) and 0 < d for d in shp)
                        or int(np.prod(shp)) > _MAX_ELEMS):
                    raise ProtocolError(f"crisp: bad shape {shp!r:.80} in the plan")
        if st.get("op") == "lin" and not (isinstance(st.get("wbits"), int) and 1 <= st["wbits"] <= 62):
            raise ProtocolError("crisp: linear step without a valid weight bound")
        for g in st.get("gates", []):
            if (not isinstance(g, list) or len(g) != 2 or g[0] not in ("ars", "relu")
                    or not isinstance(g[1], int) or not 0 < g[1] <= _MAX_ELEMS):
                raise ProtocolError(f"crisp: bad gate entry {g!r:.80} in the plan")
    return steps


def gate_list(steps: list) -> list:
    """Every gate batch in execution order: (step index, position, kind, count)."""
    out = []
    for i, st in enumerate(steps):
        for j, (kind, count) in enumerate(st.get("gates", [])):
            out.append((i, j, kind, count))
    return out


def avgpool_multipliers(step: dict, cfg: FixedPointConfig) -> np.ndarray:
    """Public encode(1/count) per output position (signed int64, shape (OH, OW))."""
    rec = avgpool_reciprocals(step["in_shape"], _node_attrs(step), cfg)
    return cfg.ring.to_signed(rec)


def _node_attrs(step: dict) -> dict:
    a = dict(step["attrs"])
    for k in ("kernel_shape", "strides", "pads", "dilations", "shape"):
        if k in a and isinstance(a[k], list):
            a[k] = tuple(a[k])
    return a


def node_of(step: dict) -> Node:
    return Node(step.get("name", step["op"]), step["node_op"], [step["in"]], [step["out"]], _node_attrs(step))
