"""Graph passes run after import: bias fusion, BatchNorm folding, dead-code removal.

Each pass keeps float semantics exactly (up to float64 rounding of folded weights).
"""

from __future__ import annotations

import numpy as np

from secinfer.ir.graph import Graph, Node
from secinfer.ir.shapes import infer_shapes


def _single_consumer(g: Graph, tensor: str, outputs: set[str]) -> Node | None:
    if tensor in outputs:
        return None
    cons = g.consumers().get(tensor, [])
    return cons[0] if len(cons) == 1 else None


def _replace_node(g: Graph, old: Node, new: Node | None) -> None:
    i = g.nodes.index(old)
    if new is None:
        del g.nodes[i]
    else:
        g.nodes[i] = new


def fuse_gemm_bias(g: Graph, outputs: set[str]) -> bool:
    """Gemm(x, W) followed by Add(., b) with b broadcasting to (N,) -> Gemm(x, W, b)."""
    for n in g.nodes:
        if n.op != "Gemm" or len(n.inputs) != 2:
            continue
        add = _single_consumer(g, n.outputs[0], outputs)
        if add is None or add.op != "Add":
            continue
        other = add.inputs[1] if add.inputs[0] == n.outputs[0] else add.inputs[0]
        if other == n.outputs[0] or other not in g.initializers:
            continue
        b = g.initializers[other]
        nout = g.initializers[n.inputs[1]].shape[1]
        out_rank = len(g.shapes[n.outputs[0]])
        if b.ndim > out_rank or b.shape[-1:] != (nout,) or b.size != nout:
            continue
        bias = f"{other}_bias" if other in {i for m in g.nodes if m is not add for i in m.inputs} else other
        g.initializers[bias] = b.reshape(nout).copy()
        fused = Node(n.name, "Gemm", [n.inputs[0], n.inputs[1], bias], [add.outputs[0]], {})
        _replace_node(g, n, fused)
        _replace_node(g, add, None)
        return True
    return False


def fold_batchnorm(g: Graph, outputs: set[str]) -> bool:
    """BatchNorm whose input is a Conv/Gemm read by nothing else: fold into its weights."""
    prod = g.producers()
    for bn in g.nodes:
        if bn.op != "BatchNormalization":
            continue
        lin = prod.get(bn.inputs[0])
        if lin is None or lin.op not in ("Conv", "Gemm"):
            continue
        if _single_consumer(g, lin.outputs[0], outputs) is not bn:
            continue
        if lin.op == "Gemm" and len(g.shapes[lin.outputs[0]]) != 2:
            continue  # channel axis 1 is the Gemm output axis only for 2-D outputs
        s = g.initializers[bn.inputs[1]]
        t = g.initializers[bn.inputs[2]]
        w = g.initializers[lin.inputs[1]]
        if lin.op == "Conv":
            w2 = w * s.reshape((-1,) + (1,) * (w.ndim - 1))
        else:
            w2 = w * s.reshape(1, -1)
        b = g.initializers[lin.inputs[2]] if len(lin.inputs) > 2 else np.zeros(s.shape)
        b2 = b * s + t
        wn, bnm = f"{lin.inputs[1]}_bnfold", f"{bn.name}_bias"
        while wn in g.initializers:
            wn += "_"
        while bnm in g.initializers:
            bnm += "_"
        g.initializers[wn] = w2
        g.initializers[bnm] = b2
        _replace_node(g, lin, Node(lin.name, lin.op, [lin.inputs[0], wn, bnm], [bn.outputs[0]],
                                   dict(lin.attrs)))
        _replace_node(g, bn, None)
        return True
    return False


def remove_dead(g: Graph, outputs: set[str]) -> None:
    needed = set(outputs)
    keep = []
    for n in reversed(g.nodes):
        if any(o in needed for o in n.outputs):
            keep.append(n)
            needed.update(n.inputs)
    g.nodes = list(reversed(keep))
    g.initializers = {k: v for k, v in g.initializers.items() if k in needed}


def optimize(g: Graph, outputs: list[str]) -> Graph:
    outs = set(outputs)
    remove_dead(g, outs)
    while fuse_gemm_bias(g, outs) or fold_batchnorm(g, outs):
        pass
    remove_dead(g, outs)
    g.weight_info = None
    g.__post_init__()
    g.shapes = infer_shapes(g)
    return g
