"""Shape inference for canonical ops, with ``None`` as a symbolic (batch) dimension."""

from __future__ import annotations

from typing import Sequence

from secinfer.arith.linalg import window_output_size
from secinfer.errors import ShapeError

Shape = tuple


def _prod(dims) -> int | None:
    p = 1
    for d in dims:
        if d is None:
            return None
        p *= int(d)
    return p


def broadcast(a: Shape, b: Shape, where: str = "") -> Shape:
    """numpy broadcasting; None (symbolic) against 1 or None stays None."""
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)
    b = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x == 1:
            out.append(y)
        elif y == 1 or x == y:
            out.append(x)
        elif x is None:
            out.append(y)
        elif y is None:
            out.append(x)
        else:
            raise ShapeError(f"{where}: shapes {a} and {b} do not broadcast")
    return tuple(out)


def reshape_shape(src: Shape, spec: Sequence[int], where: str = "") -> Shape:
    out: list = []
    for i, s in enumerate(spec):
        if s == 0:
            if i >= len(src):
                raise ShapeError(f"{where}: Reshape 0 at position {i} beyond input rank {len(src)}")
            out.append(src[i])
        else:
            out.append(int(s))
    if out.count(-1) > 1:
        raise ShapeError(f"{where}: Reshape with more than one -1: {tuple(spec)}")
    total = _prod(src)
    if -1 in out:
        known = _prod([d for d in out if d != -1])
        k = out.index(-1)
        if total is None or known is None:
            out[k] = None
        else:
            if known == 0 or total % known:
                raise ShapeError(f"{where}: cannot reshape {src} to {tuple(spec)}")
            out[k] = total // known
    elif total is not None and _prod(out) is not None and _prod(out) != total:
        raise ShapeError(f"{where}: cannot reshape {src} ({total} elements) to {tuple(spec)}")
    return tuple(out)


def _axis_len(d, where):
    if d is None:
        raise ShapeError(f"{where}: operation needs a concrete size on a symbolic dimension")
    return d


def slice_len(d: int, start: int, end: int, step: int) -> int:
    return len(range(*slice(start, end, step).indices(d)))


def infer_node(node, ins: list[Shape], is_const=lambda i: False) -> list[Shape]:
    """Output shapes of one canonical node from its input shapes."""
    op, a, w = node.op, node.attrs, f"node {node.name!r} ({node.op})"
    x = tuple(ins[0]) if ins else ()
    if op == "LayerNormalization":
        norm = x[a["axis"]:]
        for p in ins[1:]:
            if len(p) > len(norm) or broadcast(p, norm, w) != tuple(norm):
                raise ShapeError(f"{w}: scale/bias {tuple(p)} do not broadcast to {tuple(norm)}")
        return [x]
    if op in ("Relu", "Sigmoid", "Tanh", "Erf", "Gelu", "Exp", "Sqrt", "Neg", "Identity", "Softmax"):
        if op == "Softmax" and not 0 <= a["axis"] < len(x):
            raise ShapeError(f"{w}: axis {a['axis']} for rank {len(x)}")
        return [x]
    if op in ("Add", "Sub", "Mul"):
        return [broadcast(ins[0], ins[1], w)]
    if op == "BatchNormalization":
        if len(x) < 2 or any(tuple(p) != (x[1],) for p in ins[1:]) and x[1] is not None:
            raise ShapeError(f"{w}: scale/shift {[tuple(p) for p in ins[1:]]} for input {x}")
        return [x]
    if op == "Gemm":
        if len(ins[1]) != 2 or len(x) < 1:
            raise ShapeError(f"{w}: weight {tuple(ins[1])} must be (K, N), input {x}")
        k, n = ins[1]
        if x[-1] is not None and x[-1] != k:
            raise ShapeError(f"{w}: input {x} last dim does not match weight {tuple(ins[1])}")
        if len(ins) > 2 and tuple(ins[2]) != (n,):
            raise ShapeError(f"{w}: bias {tuple(ins[2])} must be ({n},)")
        return [x[:-1] + (n,)]
    if op == "MatMul":
        p, q = tuple(ins[0]), tuple(ins[1])
        if len(p) == 0 or len(q) == 0:
            raise ShapeError(f"{w}: MatMul operands must have rank >= 1")
        p2 = (1,) + p if len(p) == 1 else p
        q2 = q + (1,) if len(q) == 1 else q
        if p2[-1] is not None and q2[-2] is not None and p2[-1] != q2[-2]:
            raise ShapeError(f"{w}: inner dimensions differ: {p} @ {q}")
        batch = broadcast(p2[:-2], q2[:-2], w)
        out = batch + (p2[-2], q2[-1])
        if len(p) == 1:
            out = out[:-2] + out[-1:]
        if len(q) == 1:
            out = out[:-1]
        return [out]
    if op == "Conv":
        wt = tuple(ins[1])
        k, s, d, p = a["kernel_shape"], a["strides"], a["dilations"], a["pads"]
        nsp = len(k)
        if len(x) != nsp + 2:
            raise ShapeError(f"{w}: input of rank {len(x)} for a {nsp}-D convolution")
        if x[1] is not None and x[1] != wt[1] * a["group"]:
            raise ShapeError(f"{w}: input has {x[1]} channels, weight {wt} group {a['group']}")
        if len(wt) != nsp + 2 or a["group"] < 1 or wt[0] % a["group"]:
            raise ShapeError(f"{w}: weight {wt} for a {nsp}-D convolution with group {a['group']}")
        if len(ins) > 2 and tuple(ins[2]) != (wt[0],):
            raise ShapeError(f"{w}: bias {tuple(ins[2])} must be ({wt[0]},)")
        sp = tuple(window_output_size(_axis_len(x[2 + i], w), k[i], s[i], p[i], p[i + nsp], d[i])
                   for i in range(nsp))
        return [(x[0], wt[0]) + sp]
    if op in ("MaxPool", "AveragePool"):
        k, s, d, p = a["kernel_shape"], a["strides"], a["dilations"], a["pads"]
        nsp = len(k)
        if len(x) != nsp + 2:
            raise ShapeError(f"{w}: input of rank {len(x)} for {nsp}-D pooling")
        sp = tuple(window_output_size(_axis_len(x[2 + i], w), k[i], s[i], p[i], p[i + nsp], d[i],
                                      bool(a["ceil_mode"])) for i in range(nsp))
        return [x[:2] + sp]
    if op in ("GlobalAveragePool", "GlobalMaxPool"):
        return [x[:2] + (1,) * (len(x) - 2)]
    if op == "Flatten":
        ax = a["axis"]
        return [(_prod(x[:ax]), _prod(x[ax:]))]
    if op == "Reshape":
        return [reshape_shape(x, a["shape"], w)]
    if op == "Transpose":
        return [tuple(x[i] for i in a["perm"])]
    if op == "Concat":
        ax = a["axis"]
        tot = 0
        for s in ins:
            if len(s) != len(x):
                raise ShapeError(f"{w}: Concat inputs of different ranks {ins}")
            tot = None if tot is None or s[ax] is None else tot + s[ax]
        return [x[:ax] + (tot,) + x[ax + 1:]]
    if op == "Split":
        ax = a["axis"]
        if x[ax] is not None and sum(a["split"]) != x[ax]:
            raise ShapeError(f"{w}: split sizes {a['split']} do not add up to {x[ax]}")
        return [x[:ax] + (int(s),) + x[ax + 1:] for s in a["split"]]
    if op == "Slice":
        out = list(x)
        for st, en, ax, sp in zip(a["starts"], a["ends"], a["axes"], a["steps"]):
            out[ax] = None if x[ax] is None else slice_len(x[ax], st, en, sp)
        return [tuple(out)]
    if op == "Squeeze":
        for ax in a["axes"]:
            if x[ax] not in (1, None):
                raise ShapeError(f"{w}: cannot squeeze axis {ax} of size {x[ax]}")
        return [tuple(d for i, d in enumerate(x) if i not in a["axes"])]
    if op == "Unsqueeze":
        r = len(x) + len(a["axes"])
        it = iter(x)
        return [tuple(1 if i in a["axes"] else next(it) for i in range(r))]
    if op == "Gather":
        ax = a["axis"]
        ishape = _nested_shape(a["indices"])
        return [x[:ax] + ishape + x[ax + 1:]]
    raise ShapeError(f"{w}: no shape rule")


def _nested_shape(v) -> tuple:
    s = []
    while isinstance(v, (tuple, list)):
        s.append(len(v))
        v = v[0] if len(v) else None
    return tuple(s)


def infer_shapes(graph) -> dict[str, Shape]:
    """Shapes of every tensor of a graph from its input and weight shapes."""
    shapes: dict[str, Shape] = {t.name: tuple(t.shape) for t in graph.inputs}
    for k, t in graph.weight_info.items():
        shapes[k] = tuple(t.shape)
    for n in graph.nodes:
        outs = infer_node(n, [shapes[i] for i in n.inputs])
        for o, s in zip(n.outputs, outs):
            shapes[o] = tuple(s)
    return shapes
