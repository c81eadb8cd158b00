"""Average pooling in rounds of its own for SAFHIRE's quantizer [issue 18].

SAFHIRE runs average pooling at the server [SAFHIRE Sec. 4.4], and the quantizer gives each
round one accumulator scale s_acc and rounds every composed weight to an integer against it
(``secinfer.ir.quantize``). A global average pooling fused with the next layer composes to
weights W / (H W): for ResNet-20's head (8 x 8 pooling, then FC) they all round to 0 at
b = 8 and 12, and the model's output is its bias for every input. Here:

* ``pooling_cuts``: each global average pooling whose result feeds a layer with weights ends
  a round of its own; the client requantizes the averages (clip(floor(y / eta))) as between
  any two rounds, and the next layer is quantized on them.
* ``stage_pools``: where even the pooling alone would not fit the accumulator (the integer
  sum of H W activations; ResNet-20 at b = 8: up to 64 x 15 against 8 bits), it averages in
  stages (windows, one round each, then the global pooling of what is left), each stage's
  integer sum within the accumulator for every input.
* ``uniform_weight``: a pooling round's weights are all equal; the quantizer gives them one
  exact integer weight W >= 1 and the scale s_in / (k W) that makes it exact.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from secinfer.ir.graph import Graph, Node

_WEIGHTED = ("Conv", "Gemm", "MatMul")


def pooling_cuts(graph: Graph) -> set[str]:
    """The global average poolings that end a round of their own: those whose result
    reaches (through any later ops) a layer with weights. Fused with that layer, the
    pooling's 1/(H W) would shrink its weights by H W against one accumulator scale and
    round them to 0 (ResNet-20's head: W_fc / 64); a round of its own lets the client
    requantize the averages first, at the price of one small round [issue 18]."""
    const = set(graph.weight_info)
    users: dict[str, list[Node]] = {}
    for n in graph.nodes:
        for i in n.inputs:
            if i not in const:
                users.setdefault(i, []).append(n)

    def feeds_weighted(t: str) -> bool:
        todo, seen = [t], set()
        while todo:
            u = todo.pop()
            for n in users.get(u, []):
                if n.op in _WEIGHTED:
                    return True
                if n.name not in seen:
                    seen.add(n.name)
                    todo.extend(n.outputs)
        return False

    return {n.name for n in graph.nodes if n.op == "GlobalAveragePool" and feeds_weighted(n.outputs[0])}


def residual_cuts(graph: Graph, client_ops: tuple) -> set[str]:
    """Opt-in (quantizer option ``residual_rounds``): for each residual addition of two
    activations, the node that produces its branch (the operand computed from the later
    non-linearity) ends a round of its own, so the client requantizes the branch with its
    own scale before the round that adds the shortcut. Fused, the addition has one
    accumulator scale for both operands; the zoo's ResNet-20 damps each branch to a few
    tenths of the shortcut, and at b = 8 the identity's weight (about 6) already fills the
    8-bit accumulator: the branch's weights round to 0 in 8 of its 9 blocks. Requantized
    alone, the branch enters the addition with an integer weight of about 3-7 (estimated
    from the zoo ResNet-20's calibration ranges). Costs one round per block."""
    const = set(graph.weight_info)
    prod = {o: (i, n) for i, n in enumerate(graph.nodes) for o in n.outputs}

    def origin(t: str) -> int:
        """Index of the non-linearity (or -1: the model input) a linear chain starts from."""
        while t in prod:
            i, n = prod[t]
            if n.op in client_ops:
                return i
            acts = [x for x in n.inputs if x not in const]
            if len(acts) != 1:
                return i
            t = acts[0]
        return -1

    cuts = set()
    for n in graph.nodes:
        acts = [x for x in n.inputs if x not in const]
        if n.op != "Add" or len(acts) != 2 or not all(a in prod for a in acts):
            continue
        o0, o1 = origin(acts[0]), origin(acts[1])
        if o0 == o1:
            continue
        branch = prod[acts[0] if o0 > o1 else acts[1]][1]
        if branch.op not in client_ops:
            cuts.add(branch.name)
    return cuts


def uniform_weight(mats: list, bias: np.ndarray, scales: list) -> float | None:
    """The real value of every weight (times the source's scale) of a map that only
    averages (one source with one scale, every non-zero entry equal and positive, no
    bias), else None."""
    if len(mats) != 1 or np.asarray(scales[0]).ndim or mats[0].nnz == 0:
        return None
    d = np.asarray(mats[0].data)
    d = d[d != 0]                       # a ConvMap's kernel holds the zeros of its diagonal
    if d.size == 0:
        return None
    w = float(d[0])
    if w <= 0 or np.max(np.abs(d - w)) > 1e-9 * w or np.max(np.abs(bias), initial=0.0) > 1e-12:
        return None
    return w * float(scales[0])


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _pool_stages(h: int, w: int, hi: int, cap: int) -> list[tuple[int, int]]:
    """Windows (kh, kw) that average an h x w image down to 1 x 1 in as few stages as the
    accumulator allows: each stage sums kh kw integer activations of at most ``hi``, and
    kh kw hi <= ``cap`` (= 2^(b-1) - 1) for every input, so no pooling sum can wrap
    (a stage of 2 fits whenever act_bits <= b - 2, as for every default and searched width;
    with wider activations the smallest stage is taken anyway and may wrap)."""
    stages = []
    while h * w > 1:
        best, pick = None, None
        for kh in _divisors(h):
            for kw in _divisors(w):
                key = (kh * kw, -abs(kh - kw))
                if kh * kw >= 2 and kh * kw * hi <= cap and (best is None or key > best):
                    best, pick = key, (kh, kw)
        if pick is None:
            pick = (_divisors(h)[1], 1) if h > 1 else (1, _divisors(w)[1])
        stages.append(pick)
        h, w = h // pick[0], w // pick[1]
    return stages


def stage_pools(graph: Graph, env: dict, act_bits: int, cap: int,
                cuts: set[str]) -> tuple[Graph, set[str] | None]:
    """Split each cut global average pooling (``pooling_cuts``) whose whole-image sum of
    integer activations might not fit the accumulator (``cap`` = 2^(b-1) - 1) into
    average poolings over windows, one round each, then the global pooling of what is
    left: the same mean, computed at the server as sums that always fit, requantized by the
    client between stages [issue 18: at b = 8, ResNet-20's 8 x 8 pooling of 4-bit
    activations sums to up to 64 x 15, far beyond 8 bits, so fused or alone it rounds its
    weights to 0]. Returns (graph, the cuts) or (graph, None) when nothing changes. The
    stage outputs join ``env`` (calibration values). ``cuts``: the rounds' cuts so far."""

    gaps = pooling_cuts(graph) & cuts
    hi = (1 << act_bits) - 1                   # the pooled ReLU outputs are unsigned
    nodes, shapes, new_cuts, changed = [], dict(graph.shapes), set(), False
    for node in graph.nodes:
        u = env.get(node.inputs[0]) if node.name in gaps else None
        if u is None or u.ndim != 4:
            nodes.append(node)
            new_cuts |= {node.name} & cuts
            continue
        stages = _pool_stages(int(u.shape[2]), int(u.shape[3]), hi, cap)
        if len(stages) <= 1:
            nodes.append(node)
            new_cuts.add(node.name)
            continue
        changed = True
        src = node.inputs[0]
        for j, (kh, kw) in enumerate(stages[:-1]):
            out = f"{node.outputs[0]}/stage{j}"
            nodes.append(Node(f"{node.name}/stage{j}", "AveragePool", [src], [out],
                              {"kernel_shape": (kh, kw), "strides": (kh, kw), "pads": (0, 0, 0, 0),
                               "dilations": (1, 1), "ceil_mode": 0, "count_include_pad": 1}))
            x = env[src]
            n, c, h, w = x.shape
            env[out] = x.reshape(n, c, h // kh, kh, w // kw, kw).mean(axis=(3, 5))
            b0 = graph.shapes.get(src, (None,))[0]
            shapes[out] = (b0, c, h // kh, w // kw)
            new_cuts.add(f"{node.name}/stage{j}")
            src = out
        nodes.append(Node(node.name, "GlobalAveragePool", [src], list(node.outputs), {}))
        new_cuts.add(node.name)
    if not changed:
        return graph, None
    return dataclasses.replace(graph, nodes=nodes, shapes=shapes), new_cuts
