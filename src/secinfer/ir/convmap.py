"""Structured linear maps of SAFHIRE rounds: a round's affine map read from the graph's
layers instead of probed [SAFHIRE Sec. 4.4 step 8: convolutions, fully connected layers,
average pooling, folded batch norm and residual additions as one integer map per round].

``ConvMap`` is a zero-padded 2-D convolution (any kernel, stride, padding) between a
(ci, h, w) source and a (co, ho, wo) output, held by its kernel: the matrix of a
ResNet-18 layer (64 x 64 x 64 outputs, 576 weights each: 151M entries) is never
materialized. It acts like the round's sparse matrix where the quantizer, the oracle and
the server's product need it (``shape``, ``@``, ``abs``, ``tocsr``).

``read_round`` walks a round's linear sub-graph symbolically: per source, the map so far
is the identity, a convolution (Conv; BatchNormalization scales its output channels;
AveragePool and GlobalAveragePool on the identity are depthwise convolutions; a Gemm after
a flatten of a 1x1 result composes into the kernel), and the bias is the sub-graph run in
float on the bias tensor. Residual additions add the two operands' terms (distinct
sources). A convolution after an average pooling (ResNet-34's stem) keeps the pooling as
an integer sum stage (``Pool``) run before the convolution, the division folded into the
kernel (so the quantized map is W_int pool_sum, exact in integers). Anything else
(another convolution of a convolution, a product with a non-constant, ...) gives None:
the quantizer then probes the map (the generic path). The quantizer checks the structured map against the float sub-graph on random vectors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from secinfer.ir.float_exec import run_node_float
from secinfer.ir.graph import lift_2d
from secinfer.ir.movement import MOVEMENT

EXACT = 1 << 53          # float64 sums of integers stay exact below this


@dataclass
class Pool:
    """A depthwise integer stage z = pool(x) run before a ConvMap's convolution (the sum
    pooling of an AveragePool whose division is folded into the convolution's kernel):
    z[c] = sum_{dy, dx} weight[c, dy, dx] x[c, s y + dy - p, s x + dx - p], zero padding.
    x (c, h, w), z (c, hz, wz)."""

    weight: np.ndarray        # (c, kh, kw) int64 (all 1 for a sum pooling)
    stride: tuple
    pad: tuple                # (top, left)
    in_shape: tuple
    out_shape: tuple

    def __post_init__(self) -> None:
        self.weight = np.asarray(self.weight, dtype=np.int64)
        self.stride = tuple(int(a) for a in self.stride)
        self.pad = tuple(int(a) for a in self.pad)
        self.in_shape = tuple(int(a) for a in self.in_shape)
        self.out_shape = tuple(int(a) for a in self.out_shape)

    def apply(self, x: np.ndarray) -> np.ndarray:
        """x (c, h, w, k) -> (c, hz, wz, k), exact for integer x (int64 sums)."""
        c, h, w = self.in_shape
        _, hz, wz = self.out_shape
        (sy, sx), (py, px) = self.stride, self.pad
        kh, kw = self.weight.shape[1:]
        hp, wp = max(py + h, (hz - 1) * sy + kh), max(px + w, (wz - 1) * sx + kw)
        xp = np.zeros((c, hp, wp, x.shape[-1]), dtype=x.dtype)
        xp[:, py:py + h, px:px + w] = x
        out = np.zeros((c, hz, wz, x.shape[-1]), dtype=x.dtype)
        for dy in range(kh):
            for dx in range(kw):
                out += self.weight[:, dy, dx].astype(x.dtype)[:, None, None, None] * \
                    xp[:, dy:dy + sy * (hz - 1) + 1:sy, dx:dx + sx * (wz - 1) + 1:sx]
        return out

    def tocsr(self) -> sp.csr_matrix:
        c = self.in_shape[0]
        k = np.zeros((c, c) + self.weight.shape[1:], dtype=np.int64)
        k[np.arange(c), np.arange(c)] = self.weight
        return ConvMap(k, self.stride, self.pad, self.in_shape, self.out_shape).tocsr()

    def row_l1(self) -> int:
        return int(np.abs(self.weight).reshape(self.weight.shape[0], -1).sum(axis=1).max(initial=0))

    def geometry(self) -> dict:
        return {"stride": list(self.stride), "pad": list(self.pad), "in_shape": list(self.in_shape),
                "out_shape": list(self.out_shape)}


@dataclass
class ConvMap:
    """y = conv(kernel, x) with zero padding: x (ci, h, w) flattened, y (co, ho, wo)
    flattened. kernel float64 (a float map) or int64 (a quantized one). With ``pre`` (a
    ``Pool``), y = conv(kernel, pre(x)): ``in_shape`` is then the source's shape and the
    convolution reads pre's output (``conv_in``) [SAFHIRE Sec. 6: ResNet-34's average
    pooling followed by a convolution, one round]."""

    kernel: np.ndarray        # (co, ci, kh, kw)
    stride: tuple
    pad: tuple                # (top, left); the output shape fixes the far side
    in_shape: tuple           # (ci, h, w)
    out_shape: tuple          # (co, ho, wo)
    pre: Pool | None = None

    def __post_init__(self) -> None:
        self.stride = tuple(int(a) for a in self.stride)
        self.pad = tuple(int(a) for a in self.pad)
        self.in_shape = tuple(int(a) for a in self.in_shape)
        self.out_shape = tuple(int(a) for a in self.out_shape)

    @property
    def conv_in(self) -> tuple:
        """The convolution's input shape (pre's output, or the source's)."""
        return self.in_shape if self.pre is None else self.pre.out_shape

    def with_kernel(self, k: np.ndarray) -> "ConvMap":
        return ConvMap(k, self.stride, self.pad, self.in_shape, self.out_shape, self.pre)

    @property
    def shape(self) -> tuple[int, int]:
        return int(np.prod(self.out_shape)), int(np.prod(self.in_shape))

    @property
    def kh(self) -> int:
        return int(self.kernel.shape[2])

    @property
    def kw(self) -> int:
        return int(self.kernel.shape[3])

    @property
    def data(self) -> np.ndarray:
        """The distinct weights (the kernel), like a sparse matrix's ``data``."""
        return self.kernel.reshape(-1)

    def _valid(self, k: int, axis: int) -> int:
        """Output positions along ``axis`` (0: rows, 1: columns) whose tap k reads the input."""
        n_out = self.out_shape[1 + axis]
        n_in = self.conv_in[1 + axis]
        pos = np.arange(n_out) * self.stride[axis] + k - self.pad[axis]
        return int(np.sum((pos >= 0) & (pos < n_in)))

    @property
    def nnz(self) -> int:
        """Non-zero entries of the matrix (without building it); with ``pre``: of the
        convolution's own matrix (the stage the weights live in)."""
        total = 0
        for dy in range(self.kh):
            vy = self._valid(dy, 0)
            for dx in range(self.kw):
                total += int(np.count_nonzero(self.kernel[:, :, dy, dx])) * vy * self._valid(dx, 1)
        return total

    def row_l1(self) -> np.ndarray:
        """An upper bound on each row's l1-norm (the output channel's whole kernel)."""
        per = np.abs(self.kernel).reshape(self.kernel.shape[0], -1).sum(axis=1)
        if self.pre is not None:        # |conv(K) pre| <= |K| |pre| row by row
            per = per * self.pre.row_l1()
        return np.repeat(per.astype(np.float64), self.out_shape[1] * self.out_shape[2])

    def __abs__(self) -> "ConvMap":
        return self.with_kernel(np.abs(self.kernel))      # pre's weights are non-negative

    def scaled(self, f: float) -> "ConvMap":
        return self.with_kernel(self.kernel * f)

    def rounded(self) -> "ConvMap":
        return self.with_kernel(np.rint(self.kernel).astype(np.int64))

    def __matmul__(self, v) -> np.ndarray:
        """The map on v: (n,) or (n, k) columns. Integer kernel and integer v: exact (float64
        BLAS where every sum stays below 2^53, else integer products)."""
        v = np.asarray(v)
        one = v.ndim == 1
        x = v.reshape(self.in_shape + (-1,))
        if self.pre is not None:
            x = self.pre.apply(x)
        ci, h, w = self.conv_in
        co, ho, wo = self.out_shape
        (sy, sx), (py, px), kh, kw = self.stride, self.pad, self.kh, self.kw
        k = x.shape[-1]
        integer = np.issubdtype(self.kernel.dtype, np.integer) and np.issubdtype(v.dtype, np.integer)
        if integer:
            bound = float(np.abs(self.kernel).reshape(co, -1).sum(axis=1).max(initial=0)) * \
                float(np.abs(x).max(initial=0))
            dt = np.float64 if bound < EXACT else np.int64
        else:
            dt = np.float64
        kern = self.kernel.astype(dt)
        hp = max(py + h, (ho - 1) * sy + kh)
        wp = max(px + w, (wo - 1) * sx + kw)
        xp = np.zeros((ci, hp, wp, k), dtype=dt)
        xp[:, py:py + h, px:px + w] = x
        out = np.zeros((co, ho * wo * k), dtype=dt)
        for dy in range(kh):
            for dx in range(kw):
                tap = xp[:, dy:dy + sy * (ho - 1) + 1:sy, dx:dx + sx * (wo - 1) + 1:sx]
                out += kern[:, :, dy, dx] @ tap.reshape(ci, -1)
        if integer:
            out = np.rint(out).astype(np.int64) if dt == np.float64 else out
        out = out.reshape(co * ho * wo, k)
        return out[:, 0] if one else out

    def tocsr(self) -> sp.csr_matrix:
        """The (co ho wo, ci h w) matrix (small maps: tests, the attack, fallbacks)."""
        if self.pre is not None:
            post = ConvMap(self.kernel, self.stride, self.pad, self.conv_in, self.out_shape).tocsr()
            m = (post @ self.pre.tocsr().astype(post.dtype)).tocsr()
            m.eliminate_zeros()
            return m
        co, ci, kh, kw = self.kernel.shape
        _, h, w = self.in_shape
        _, ho, wo = self.out_shape
        rows, cols, vals = [], [], []
        oy, ox = np.meshgrid(np.arange(ho), np.arange(wo), indexing="ij")
        for dy in range(kh):
            for dx in range(kw):
                kk = self.kernel[:, :, dy, dx]
                o, i = np.nonzero(kk)
                if not len(o):
                    continue
                iy = oy * self.stride[0] + dy - self.pad[0]
                ix = ox * self.stride[1] + dx - self.pad[1]
                ok = (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
                pos_o, pos_i = (oy * wo + ox)[ok], (iy * w + ix)[ok]
                rows.append((o[:, None] * (ho * wo) + pos_o[None, :]).reshape(-1))
                cols.append((i[:, None] * (h * w) + pos_i[None, :]).reshape(-1))
                vals.append(np.repeat(kk[o, i], len(pos_o)))
        shape = self.shape
        if not rows:
            return sp.csr_matrix(shape, dtype=self.kernel.dtype)
        m = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                          shape=shape, dtype=self.kernel.dtype)
        m.sum_duplicates()
        return m

    def toarray(self) -> np.ndarray:
        return self.tocsr().toarray()

    def geometry(self) -> dict:
        g = {"stride": list(self.stride), "pad": list(self.pad), "in_shape": list(self.in_shape),
             "out_shape": list(self.out_shape)}
        if self.pre is not None:
            g["pre"] = self.pre.geometry()
        return g


def diag_map(scale: np.ndarray, shape: tuple, kh: int = 1, kw: int = 1, stride=(1, 1), pad=(0, 0),
             out_shape: tuple | None = None) -> ConvMap:
    """A depthwise map as a ConvMap: channel c times scale[c] (batch norm on the identity;
    with a kernel, average pooling)."""
    c = int(shape[0])
    k = np.zeros((c, c, kh, kw))
    k[np.arange(c), np.arange(c)] = np.asarray(scale, dtype=np.float64).reshape(c, 1, 1)
    return ConvMap(k, stride, pad, shape, out_shape or shape)


# ---------------------------------------------------------------- reading a round
ID = "id"


class _Gap:
    """GlobalAveragePool of a source (kept lazy: a Gemm after it composes directly)."""

    def __init__(self, shape: tuple) -> None:
        self.shape = tuple(int(a) for a in shape)

    def conv(self) -> ConvMap:
        c, h, w = self.shape
        return diag_map(np.full(c, 1.0 / (h * w)), self.shape, h, w, (h, w), (0, 0), (c, 1, 1))


def _sum_pool(t) -> tuple[Pool, np.ndarray] | None:
    """(the integer sum pooling, per-channel factor a) when t is a depthwise map with one
    value a_c on every tap of channel c (an AveragePool, possibly scaled by a batch norm):
    t = a * sum_pool; else None."""
    if not isinstance(t, ConvMap) or t.pre is not None:
        return None
    k = t.kernel
    c = k.shape[0]
    if k.shape[1] != c or t.in_shape[0] != c:
        return None
    diag = k[np.arange(c), np.arange(c)]                # (c, kh, kw)
    off = k.copy()
    off[np.arange(c), np.arange(c)] = 0
    a = diag[:, 0, 0].copy()
    if np.any(off != 0) or np.any(diag != a[:, None, None]) or np.any(a == 0):
        return None
    return Pool(np.ones(diag.shape, dtype=np.int64), t.stride, t.pad, t.in_shape, t.out_shape), a


class _Sym:
    def __init__(self, terms: dict, bias: np.ndarray, shape: tuple) -> None:
        self.terms, self.bias, self.shape = terms, bias, tuple(shape)


def _spatial_one(term) -> bool:
    if isinstance(term, _Gap):
        return True
    return isinstance(term, ConvMap) and term.out_shape[1:] == (1, 1)


def _apply(node, syms: list, consts: list, out_shape: tuple) -> dict | None:
    """The new terms of node's output, or None when the structure is not one we read."""
    op = node.op
    x = syms[0]
    if op == "Add":
        if len(syms) == 1:
            return dict(x.terms)                       # + a constant: the bias only
        a, b = syms
        if set(a.terms) & set(b.terms) or a.shape != b.shape:
            return None
        return {**a.terms, **b.terms}
    if len(syms) != 1:
        return None
    if op == "Conv":
        p = lift_2d(node)
        if p["spatial"] != 2 or node.attrs.get("group", 1) != 1 or tuple(p["dilations"]) != (1, 1) \
                or len(x.shape) != 3 or len(out_shape) != 3:
            return None
        k = np.asarray(consts[0], dtype=np.float64)
        out = {}
        for c, t in x.terms.items():
            if t == ID:
                out[c] = ConvMap(k, p["strides"], p["pads"][:2], x.shape, out_shape)
                continue
            pool = _sum_pool(t)
            if pool is None:
                return None                             # a convolution of a convolution
            # conv(K, a_c pool_sum(x)) = conv(K a_c, pool_sum(x)): the pooling's division
            # (and any per-channel scale after it) goes into the convolution's kernel, whose
            # input is the pooled sum of integers [SAFHIRE Sec. 6, ResNet-34]
            pre, a = pool
            out[c] = ConvMap(k * a[None, :, None, None], p["strides"], p["pads"][:2], t.in_shape,
                             out_shape, pre)
        return out
    if op == "BatchNormalization":
        if len(x.shape) != 3:
            return None
        s = np.asarray(consts[0], dtype=np.float64).reshape(-1)
        out = {}
        for c, t in x.terms.items():
            if t == ID:
                out[c] = diag_map(s, x.shape)
            elif isinstance(t, ConvMap):
                out[c] = t.with_kernel(t.kernel * s[:, None, None, None])
            else:
                return None
        return out
    if op == "AveragePool":
        p = lift_2d(node)
        if p["spatial"] != 2 or len(x.shape) != 3 or node.attrs.get("ceil_mode", 0) or \
                tuple(p["dilations"]) != (1, 1) or \
                (any(p["pads"]) and not node.attrs.get("count_include_pad", 0)):
            return None
        if any(t != ID for t in x.terms.values()):
            return None
        kh, kw = p["kernel"]
        return {c: diag_map(np.full(x.shape[0], 1.0 / (kh * kw)), x.shape, kh, kw, p["strides"],
                            p["pads"][:2], out_shape) for c in x.terms}
    if op == "GlobalAveragePool":
        if len(x.shape) != 3 or any(t != ID for t in x.terms.values()):
            return None
        return {c: _Gap(x.shape) for c in x.terms}
    if op in MOVEMENT:
        terms = dict(x.terms)
        if len(x.shape) == 3 and tuple(x.shape[1:]) == (1, 1):
            # a (C, 1, 1) source read as it is (a pooling round's result, issue 18)
            terms = {c: diag_map(np.ones(x.shape[0]), x.shape) if isinstance(t, str) else t
                     for c, t in terms.items()}
        if int(np.prod(out_shape)) != int(np.prod(x.shape)) or \
                not all(_spatial_one(t) for t in terms.values()):
            return None
        return terms                                    # a relabelling of a (C, 1, 1) result
    if op == "Gemm":
        if len(x.shape) != 1 or not all(_spatial_one(t) for t in x.terms.values()):
            return None
        g = np.asarray(consts[0], dtype=np.float64).T   # y = x W + B with W (in, out)
        out = {}
        for c, t in x.terms.items():
            if isinstance(t, _Gap):                     # G (pooling): G[o, c] / (h w) per tap
                ch, h, w = t.shape
                k = np.broadcast_to((g / (h * w))[:, :, None, None], (g.shape[0], ch, h, w)).copy()
                out[c] = ConvMap(k, (h, w), (0, 0), t.shape, (g.shape[0], 1, 1))
                continue
            k = np.tensordot(g, t.kernel, axes=([1], [0]))
            out[c] = ConvMap(k, t.stride, t.pad, t.in_shape, (g.shape[0], 1, 1), t.pre)
        return out
    return None


def read_round(graph, lin_nodes: list, out_name: str, sources: list[int], cid_tensor: dict,
               shapes: dict) -> tuple[list, np.ndarray] | None:
    """(one map per source: ConvMap, or an empty sparse matrix for a source the output does
    not read; the bias, flattened), or None when the round is not made of the layers read
    here. Float maps (the quantizer scales and rounds them)."""
    env: dict[str, _Sym] = {}
    for c in sources:
        shp = tuple(shapes[c])
        env[cid_tensor[c]] = _Sym({c: ID}, np.zeros((1,) + shp), shp)
    inits = graph.initializers
    for node in lin_nodes:
        if node.outputs[0] in env:
            continue
        syms = [env.get(i) for i in node.inputs]
        if not any(s is not None for s in syms):
            continue
        if any(s is None and i not in inits for s, i in zip(syms, node.inputs)):
            continue                                    # reads a tensor of another round
        out_shape = tuple(int(d) for d in graph.shapes[node.outputs[0]][1:])
        acts = [s for s in syms if s is not None]
        consts = [np.asarray(inits[i]) for s, i in zip(syms, node.inputs) if s is None]
        if len(node.outputs) != 1:
            return None
        terms = _apply(node, acts, consts, out_shape)
        if terms is None:
            continue            # not read here (the round's output, if it needs it, is missing)
        feeds = [s.bias if s is not None else np.asarray(inits[i], dtype=np.float64)
                 for s, i in zip(syms, node.inputs)]
        bias = run_node_float(node, feeds)[0]
        env[node.outputs[0]] = _Sym(terms, bias, out_shape)
    y = env.get(out_name)
    if y is None:
        return None
    m = int(np.prod(y.shape))
    mats = []
    for c in sources:
        t = y.terms.get(c)
        if t is None:
            mats.append(sp.csr_matrix((m, int(np.prod(shapes[c])))))
            continue
        if t == ID:
            if len(y.shape) != 3:
                return None
            t = diag_map(np.ones(y.shape[0]), y.shape)
        elif isinstance(t, _Gap):
            t = t.conv()
        if t.shape[0] != m:
            return None
        mats.append(t)
    return mats, np.asarray(y.bias, dtype=np.float64).reshape(-1)
