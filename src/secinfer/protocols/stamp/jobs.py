"""STAMP's device jobs and the graph facts the backend schedules them by (``StampBackend``):
which chains may be split across the batch [STAMP 4.2], a job per batch part with its spec,
the chain's node steps, and (malicious) the device-step outputs whose products take an
activation mask from the LTEEs (pure functions of the public graph and shapes); the
``Job`` record itself and the batch split across the three leaders."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from secinfer.ir.graph import Node
from secinfer.protocols.rep3.executor import LINEAR
from secinfer.sharing.replicated import Pair

RESHAPES = ("Flatten", "Reshape", "Identity", "Squeeze", "Unsqueeze")   # keep the element order
_PER_SAMPLE = ("Add", "Mul", "Relu", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
               "BatchNormalization", "Sigmoid", "Tanh", "Erf", "Gelu", "Exp", "Sqrt")


@dataclass
class Job:
    """One device operation: leader index, chain spec, and the masked-path inputs.

    ``data``: Pair (rss/exp paths) or 3-of-3 component array (3of3 path), flattened data
    followed by the parameters' flattened shares (``params``: list of Pairs)."""

    leader: int
    spec: dict
    data: object
    params: list = field(default_factory=list)
    result: Pair | None = None
    # malicious rss path, result feeding products only: this host's two components of the
    # job's segment of the next product's mask A (flat), and the rho = y - A it learns
    act: Pair | None = None
    rho: np.ndarray | None = None
    # semi-honest, evaluated by the model owner whose next products take the real component
    # (``StampBackend._plan_held``): the evaluator keeps it, the third party's pair lacks it
    hold: bool = False
    # semi-honest, sent ahead (``StampOps.ahead``): the parties whose masked 3-out-of-3
    # component of this job depends on offline data only (their part of a first-layer or
    # held product), so it leaves before the online phase
    early: frozenset = frozenset()


def split_batch(n: int, parts: int = 3, light: int | None = None) -> list[tuple[int, int]]:
    """Rows of a batch of n for leaders 0, 1, 2 [STAMP 4.2]. When n is not a multiple of three,
    the part of leader ``light`` gets no extra row (its evaluator has more to do elsewhere:
    the output party's LTEE runs the whole fused output step)."""
    base, extra = divmod(n, parts)
    order = list(range(parts)) if light is None else [c for c in range(parts) if c != light] + [light]
    out, s = [], 0
    for c in range(parts):
        k = base + (1 if order.index(c) < extra else 0)
        out.append((s, s + k))
        s += k
    return out


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
