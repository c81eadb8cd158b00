"""STAMP's device jobs and the graph facts the backend schedules them by (``StampBackend``):
which chains may be split across the batch [STAMP 4.2], a job per batch part with its spec,
the chain's node steps, and (malicious) the device-step outputs whose products take an
activation mask from the LTEEs. Pure functions of the public graph and shapes."""

from __future__ import annotations

from secinfer.ir.graph import Node
from secinfer.protocols.rep3.executor import LINEAR
from secinfer.protocols.stamp.nonlinear import Job
from secinfer.sharing.replicated import Pair

RESHAPES = ("Flatten", "Reshape", "Identity", "Squeeze", "Unsqueeze")   # keep the element order
_PER_SAMPLE = ("Add", "Mul", "Relu", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
               "BatchNormalization", "Sigmoid", "Tanh", "Erf", "Gelu", "Exp", "Sqrt")


def splittable(nodes: list[Node]) -> bool:
    for n in nodes:
        if n.op in _PER_SAMPLE:
            continue
        if n.op in ("LayerNormalization", "Softmax") and int(n.attrs.get("axis", -1)) != 0:
            continue
        return False
    return True


def output_of(node: Node) -> str | None:
    return node.outputs[0] if node.outputs else None


def activations(graph) -> dict:
    """Device-step outputs used as the first operand of products (and as no product's
    second operand), possibly through order-preserving reshapes: {output: (activation the
    products take, number of products, its shape, the products)}. Other consumers (a
    residual Add, a LayerNorm) are allowed: A + rho is a replicated sharing of the
    activation like any other, they use it as it is."""
    shapes = getattr(graph, "shapes", None) or {}
    outputs = set(getattr(graph, "output_names", ()) or ())
    inputs = set(getattr(graph, "input_names", ()) or ())
    cons: dict[str, list] = {}
    prod: dict[str, Node] = {}
    for nd in graph.nodes:
        for i in nd.inputs:
            cons.setdefault(i, []).append(nd)
        for o in nd.outputs:
            prod[o] = nd
    out = {}
    for t, cs in cons.items():
        if t in graph.weight_info or t in inputs or t in outputs or t not in shapes:
            continue
        prods = [c for c in cs if c.op in LINEAR]
        if not prods or not all(len(c.inputs) > 1 and c.inputs[0] == t and c.inputs[1] != t for c in prods):
            continue
        src = t
        while (src in prod and prod[src].op in RESHAPES and len(prod[src].inputs) == 1
               and len(cons.get(prod[src].inputs[0], [])) == 1):
            src = prod[src].inputs[0]
        out[src] = (t, len(prods), tuple(int(d) for d in shapes[t]), prods)
    return out


def jobs(data, steps: list, params: list[Pair], out_shape: tuple, ranges: list, leaders: list,
          batched: set, act) -> list:
    """One job per batch part [STAMP 4.2]; parameters in ``batched`` (a residual) are cut by rows
    like the data, the others (bias, LayerNorm gamma/beta) go whole to every job."""
    jobs, pos = [], 0
    for c, (lo, hi) in enumerate(ranges):
        one = len(ranges) == 1
        chunk = data if one else (Pair(data.a[lo:hi], data.b[lo:hi]) if isinstance(data, Pair) else data[lo:hi])
        jp = [p if one or k not in batched else Pair(p.a[lo:hi], p.b[lo:hi]) for k, p in enumerate(params)]
        ishape = (chunk.a if isinstance(chunk, Pair) else chunk).shape
        oshape = tuple(out_shape) if one else ((hi - lo),) + tuple(out_shape[1:])
        spec = {"shape": [int(d) for d in ishape], "out_shape": [int(d) for d in oshape],
                "params": [[int(d) for d in p.a.shape] for p in jp], "steps": steps}
        job = Job(leaders[c], spec, chunk, jp)
        if act is not None:
            k = act[3][c][2]
            spec["act"] = 1
            job.act = Pair(act[4].a.reshape(-1)[pos:pos + k], act[4].b.reshape(-1)[pos:pos + k])
            pos += k
        jobs.append(job)
    return jobs


def node_steps(nodes: list[Node], first_param: int, params: list[list[Pair]]):
    steps, flat, k = [], [], first_param
    for node, ps in zip(nodes, params):
        idx = list(range(k, k + len(ps)))
        k += len(ps)
        flat.extend(ps)
        steps.append({"op": "node", "node": node.to_json(), "params": idx})
    return steps, flat
