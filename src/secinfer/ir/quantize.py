"""Post-training quantization to integer rounds, and the clear integer executor (the oracle).

A hybrid protocol [SAFHIRE Sec. 3, 4.1] splits a network into *rounds*: each round is one
affine integer map computed by the server on encrypted integers (convolutions, fully
connected layers, average pooling, folded batch norm, residual additions, input scaling:
every linear op between two non-linearities, composed into one map), followed by a
*client step* in the clear (ReLU, max pooling, then the requantization
``clip(floor(y / eta))`` [SAFHIRE Sec. 4.5]). The last round has no client step; its
integer accumulator times ``s_acc`` are the logits (softmax, if the graph ends with one,
runs at the client in float).

Quantization [SAFHIRE Sec. 3]: activations are ``act_bits``-bit integers (unsigned after
a ReLU), weights are integers of at most ``weight_bits`` bits, and every accumulator is a
``b``-bit two's-complement integer (b in {8, 12, 16}): the oracle wraps every accumulator
mod 2^b, and so does the client after decryption, so the encrypted run equals the oracle
exactly even where an input drives an accumulator out of range. The quantizer calibrates
on data (bundled split, or random inputs) so that the calibrated accumulators use at most
``HEADROOM`` of the range: per round, the accumulator scale s_acc starts as the larger of
max|y| / (HEADROOM 2^(b-1)) (float activations y) and the scale that keeps every weight
within weight_bits, and is raised until the integer accumulators of the calibration inputs,
run through the already-quantized rounds, stay within HEADROOM too (issue 18);
weights are W_int = round(M s_in / s_acc) for the composed linear map M of each source,
biases round(bias / s_acc), and the next activation scale is eta s_acc with the integer
eta = round(s_v / s_acc) >= 1 for the calibrated activation scale s_v.

Max pooling under output shuffling: the server lays a round's outputs out window by window
(``groups``: indices into the true-order output, k per window; padding repeats a member
of the same window, which never changes a max) and shuffles whole windows, so the client
takes the max of k consecutive values without knowing where the windows are.

Residual connections: a round's map may read, besides the vector the client just sent,
any earlier round's input (the server keeps those ciphertexts, unshuffled): ``sources``.

Pooling rounds (``secinfer.ir.pool_rounds``, issue 18): a global average pooling that feeds
a weighted layer ends a round of its own (staged into window poolings where its integer sum
could overflow b bits), whose client step is the requantization alone, so the next layer's
weights are not shrunk by 1/(H W) and rounded to 0; ``secinfer.ir.degeneracy`` reports the
weights that rounded to 0 and whether the quantized output still depends on the input.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from secinfer.arith import public_rng
from secinfer.arith.linalg import pool_patches
from secinfer.errors import ConfigError, ModelError, UnsupportedOpError
from secinfer.ir.calib_env import _absmax, _calib_env, _minimum
from secinfer.ir.convmap import ConvMap
from secinfer.ir.float_exec import run_node_float
from secinfer.ir.degeneracy import zero_weight_report
from secinfer.ir.graph import Graph, Node, lift_2d
from secinfer.ir.movement import MOVEMENT
from secinfer.ir.pool_rounds import pooling_cuts, residual_cuts, stage_pools, uniform_weight

ACCUMULATOR_BITS = (8, 12, 16)
# activation / maximum weight bits per accumulator precision (public) [SAFHIRE Sec. 3:
# "bit-widths of weights and activations are typically lower than the accumulator"]
ACT_BITS = {8: 4, 12: 6, 16: 8}
WEIGHT_BITS = {8: 4, 12: 6, 16: 8}
HEADROOM = 0.75
TAB_PCT = 2.0       # tabular inputs: per-feature range from the 2nd to the 98th percentile (outliers clip)
CLIENT_OPS = ("Relu", "MaxPool", "GlobalMaxPool")
LINEAR_OPS = ("Conv", "Gemm", "MatMul", "Add", "Sub", "Mul", "Neg", "BatchNormalization",
              "AveragePool", "GlobalAveragePool") + tuple(MOVEMENT)
_PROBE_CHUNK = 256


def wrap(y: np.ndarray, b: int) -> np.ndarray:
    """Two's-complement reduction to b bits (the accumulator's width)."""
    h = 1 << (b - 1)
    return ((np.asarray(y, dtype=np.int64) + h) % (1 << b)) - h


def requantize(y: np.ndarray, eta: int, lo: int, hi: int) -> np.ndarray:
    """clip(floor(y / eta)) [SAFHIRE Sec. 4.5]; integer floor division, exact."""
    return np.clip(np.floor_divide(np.asarray(y, dtype=np.int64), int(eta)), lo, hi)


def client_step(y: np.ndarray, relu: bool, k: int, eta: int, lo: int, hi: int) -> np.ndarray:
    """What the client applies to a round's decrypted outputs, in the server's layout:
    ReLU, max over each run of k consecutive values (a pooling window), requantize."""
    z = np.asarray(y, dtype=np.int64)
    if relu:
        z = np.maximum(z, 0)
    if k > 1:                             # (samples as columns: y (n, S))
        z = z.reshape((-1, k) + z.shape[1:]).max(axis=1)
    return requantize(z, eta, lo, hi)


# ---------------------------------------------------------------- structure (public)
@dataclass
class _RoundShape:
    out: str                      # linear output tensor (true order)
    sources: list[int]            # cids read (cid 0 = model input, cid r = round r-1's result)
    chain: list[Node] = field(default_factory=list)
    softmax: Node | None = None
    cut: bool = False             # ends at a pooling cut: the client step only requantizes

    @property
    def result(self) -> str:
        """The tensor the next round reads: the client chain's last output, or (a pooling
        cut with no non-linearity) the linear output itself."""
        return self.chain[-1].outputs[0] if self.chain else self.out


def split_rounds(graph: Graph, cuts: set[str] | None = None) -> tuple[list[_RoundShape], list[Node]]:
    """Cut the graph into rounds: maximal linear blocks between client non-linearities,
    and after each linear node named in ``cuts`` (default ``pooling_cuts(graph)``), where
    the client only requantizes. Returns the rounds and the linear nodes (in order). Raises
    UnsupportedOpError for anything that is neither linear nor a client op in a supported
    place."""
    if len(graph.inputs) != 1 or len(graph.outputs) != 1:
        raise ModelError("SAFHIRE quantization needs a graph with one input and one output")
    cuts = pooling_cuts(graph) if cuts is None else set(cuts)
    kind: dict[str, tuple] = {graph.inputs[0].name: ("C", 0)}
    rounds: list[_RoundShape] = []
    lin_nodes: list[Node] = []
    const = set(graph.weight_info)
    final: _RoundShape | None = None
    for node in graph.nodes:
        if final is not None:
            raise UnsupportedOpError(node.op, node.name, "nothing may follow the final softmax")
        ins = [i for i in node.inputs if i not in const]
        if node.op in CLIENT_OPS:
            k = kind.get(ins[0])
            if k is None:
                raise ModelError(f"node {node.name!r} reads an unknown tensor")
            if k[0] == "L":
                rounds.append(_RoundShape(ins[0], sorted(k[1]), [node]))
                kind[node.outputs[0]] = ("P", len(rounds) - 1)
            elif k[0] == "P" and rounds[k[1]].result == ins[0]:
                rounds[k[1]].chain.append(node)
                kind[node.outputs[0]] = k
            else:
                raise UnsupportedOpError(node.op, node.name,
                                         "a non-linearity must follow a linear block directly")
            continue
        if node.op == "Softmax":
            k = kind.get(ins[0])
            if k is None or k[0] != "L" or node.outputs[0] != graph.output_names[0]:
                raise UnsupportedOpError(node.op, node.name, "softmax only on the final logits")
            final = _RoundShape(ins[0], sorted(k[1]), softmax=node)
            continue
        if node.op not in LINEAR_OPS:
            raise UnsupportedOpError(node.op, node.name, "SAFHIRE runs linear layers at the server "
                                     "and ReLU / max pooling at the client only")
        if node.op in ("Mul", "MatMul") and len(ins) > 1:
            raise UnsupportedOpError(node.op, node.name, "a product of two activations is not linear")
        srcs: set[int] = set()
        for i in ins:
            k = kind.get(i)
            if k is None:
                raise ModelError(f"node {node.name!r} reads an unknown tensor {i!r}")
            if k[0] == "P":            # a client chain's result: the next round's input
                r = k[1]
                if rounds[r].result != i:
                    raise UnsupportedOpError(node.op, node.name, "reads the middle of a client step")
                kind[i] = k = ("C", r + 1)
            srcs |= {k[1]} if k[0] == "C" else set(k[1])
        for o in node.outputs:
            kind[o] = ("L", frozenset(srcs))
        lin_nodes.append(node)
        if node.name in cuts and node.outputs[0] != graph.output_names[0]:
            # a round ends here; its client step is the requantization alone
            rounds.append(_RoundShape(node.outputs[0], sorted(srcs), cut=True))
            kind[node.outputs[0]] = ("P", len(rounds) - 1)
    if final is None:
        out = graph.output_names[0]
        k = kind.get(out)
        if k is None or k[0] != "L":
            raise UnsupportedOpError("-", out, "the graph must end with a linear layer (logits)")
        final = _RoundShape(out, sorted(k[1]))
    rounds.append(final)
    for r, rd in enumerate(rounds):
        if r not in rd.sources or max(rd.sources) != r:
            raise UnsupportedOpError("-", rd.out, f"round {r} must read the previous round's result "
                                     "(and may read earlier ones); branches are not supported")
        if r < len(rounds) - 1 and rd.result not in kind or \
                (r < len(rounds) - 1 and kind[rd.result] != ("C", r + 1)):
            raise UnsupportedOpError("-", rd.out, f"round {r}'s result is never used")
    return rounds, lin_nodes


def _groups(chain: list[Node], shape: tuple) -> np.ndarray | None:
    """Gather indices (windows, k) of the chain's max pools into the flattened true-order
    output of shape (C, H, W); None when the chain has no pooling."""
    g = None
    cur = tuple(shape)
    for node in chain:
        if node.op == "Relu":
            continue
        idx = np.arange(int(np.prod(cur)), dtype=np.float64).reshape((1,) + cur)
        if node.op == "GlobalMaxPool":
            gg = idx.reshape(cur[0], -1).astype(np.int64)
            cur = (cur[0],) + (1,) * (len(cur) - 1)
        else:
            p = lift_2d(node)
            x4 = idx.reshape(1, cur[0], 1, cur[1]) if p["spatial"] == 1 else idx
            pt = pool_patches(x4, p["kernel"], p["strides"], p["pads"], p["dilations"], -1.0,
                              bool(node.attrs["ceil_mode"]))          # (1, C, k, OH, OW)
            c, kk, oh, ow = pt.shape[1:]
            gg = pt[0].transpose(0, 2, 3, 1).reshape(-1, kk)
            first = np.max(gg, axis=1, keepdims=True)                 # a valid member
            gg = np.where(gg < 0, first, gg).astype(np.int64)
            cur = (c, ow) if p["spatial"] == 1 else (c, oh, ow)
        g = gg if g is None else g[gg].reshape(gg.shape[0], -1)
    return g


# ---------------------------------------------------------------- the quantized model
@dataclass
class QRound:
    """One round: y = wrap_b(sum_s W[s] v[sources[s]] + bias); then the client step."""

    sources: list[int]
    weights: list[sp.csr_matrix]      # int64, (m, len(v[source]))
    bias: np.ndarray                  # int64 (m,)
    out_shape: tuple                  # true-order shape of y (no batch axis)
    s_acc: float
    relu: bool = False
    groups: np.ndarray | None = None  # (windows, k) into y; None: k = 1
    eta: int = 1
    lo: int = 0
    hi: int = 0
    worst: int = 0                    # bound on |sum W v + bias| over all valid inputs

    @property
    def m(self) -> int:
        return int(self.bias.shape[0])

    @property
    def k(self) -> int:
        return 1 if self.groups is None else int(self.groups.shape[1])

    @property
    def n_out(self) -> int:
        """Values the client receives (layout order)."""
        return self.m if self.groups is None else int(self.groups.size)

    @property
    def n_next(self) -> int:
        """Values the client sends next round."""
        return self.m if self.groups is None else int(self.groups.shape[0])

    def accumulate(self, vs: list[np.ndarray], b: int) -> np.ndarray:
        acc = self.bias.astype(np.int64).copy()
        for s, w in zip(self.sources, self.weights):
            acc = acc + w @ np.asarray(vs[s], dtype=np.int64)
        return wrap(acc, b)

    def layout(self, y: np.ndarray) -> np.ndarray:
        """True-order outputs laid out window by window (what the server packs, unshuffled)."""
        return y if self.groups is None else y[self.groups.reshape(-1)]


@dataclass
class QuantizedModel:
    b: int
    act_bits: int
    weight_bits: int
    in_shape: tuple                  # per sample, no batch axis
    in_scale: np.ndarray             # per input element (E,): one value for images, per feature for tables
    in_lo: int
    in_hi: int
    rounds: list[QRound]
    softmax: bool
    out_shape: tuple
    calib: dict = field(default_factory=dict)
    in_zero: np.ndarray | None = None  # per-feature zero point (tabular inputs), public

    # -- inputs
    def quantize_input(self, x: np.ndarray) -> np.ndarray:
        """(batch, E) integer inputs: clip(round(x / in_scale))."""
        x = np.asarray(x, dtype=np.float64).reshape(-1, int(np.prod(self.in_shape)))
        z = 0.0 if self.in_zero is None else np.asarray(self.in_zero).reshape(1, -1)
        return np.clip(np.rint((x - z) / np.asarray(self.in_scale).reshape(1, -1)), self.in_lo,
                       self.in_hi).astype(np.int64)

    # -- the oracle
    def run_int(self, v0: np.ndarray, trace: list | None = None) -> np.ndarray:
        """One sample's integers through every round; returns the final accumulator.
        ``trace`` receives each round's accumulator (true order) [SAFHIRE Sec. 6.1 check]."""
        vs = [np.asarray(v0, dtype=np.int64).reshape(-1)]
        for r, rd in enumerate(self.rounds):
            y = rd.accumulate(vs, self.b)
            if trace is not None:
                trace.append(y)
            if r == len(self.rounds) - 1:
                return y
            vs.append(client_step(rd.layout(y), rd.relu, rd.k, rd.eta, rd.lo, rd.hi))
        raise ModelError("quantized model without rounds")

    def logits(self, y_final: np.ndarray) -> np.ndarray:
        return np.asarray(y_final, dtype=np.float64) * self.rounds[-1].s_acc

    def finish(self, y_final: np.ndarray) -> np.ndarray:
        """Client's final step: real logits, softmax if the model ends with one."""
        z = self.logits(y_final).reshape(self.out_shape)
        if self.softmax:
            z = np.exp(z - z.max())
            z = z / z.sum()
        return z

    def run(self, x: np.ndarray) -> np.ndarray:
        """Float in, float out (batch first), through the integer model."""
        xq = self.quantize_input(x)
        return np.stack([self.finish(self.run_int(v)) for v in xq])

    # -- public metadata [SAFHIRE Sec. 4.2]
    def public(self) -> dict:
        return {"b": self.b, "act_bits": self.act_bits, "weight_bits": self.weight_bits,
                "in_shape": list(self.in_shape), "in_scale": np.asarray(self.in_scale).tolist(),
                "in_lo": self.in_lo, "in_hi": self.in_hi, "softmax": self.softmax,
                "in_zero": None if self.in_zero is None else np.asarray(self.in_zero).tolist(),
                "out_shape": list(self.out_shape), "s_out": self.rounds[-1].s_acc,
                "rounds": [{"n_in": [self.width(s) for s in rd.sources], "sources": rd.sources,
                            "m": rd.m, "n_out": rd.n_out, "n_next": rd.n_next, "k": rd.k,
                            "relu": rd.relu, "eta": rd.eta, "lo": rd.lo, "hi": rd.hi,
                            "worst": rd.worst} for rd in self.rounds]}

    def width(self, cid: int) -> int:
        return int(np.prod(self.in_shape)) if cid == 0 else self.rounds[cid - 1].n_next

    def public_bytes(self) -> bytes:
        return json.dumps(self.public(), sort_keys=True).encode()


# ---------------------------------------------------------------- calibration + quantizer
def _probe(graph: Graph, lin_nodes: list[Node], rd: _RoundShape, cid_tensor: dict[int, str],
           feeds: dict[str, np.ndarray]) -> np.ndarray:
    """Evaluate the round's linear sub-graph on the given source tensors (float)."""
    env = dict(feeds)
    for k, v in graph.initializers.items():
        env[k] = np.asarray(v, dtype=np.float64)
    for node in lin_nodes:
        if all(i in env for i in node.inputs):
            for o, v in zip(node.outputs, run_node_float(node, [env[i] for i in node.inputs])):
                env[o] = v
    if rd.out not in env:
        raise ModelError(f"round output {rd.out!r} does not depend only on its sources")
    y = env[rd.out]
    return y.reshape(y.shape[0], -1)


def _linear_map(graph, lin_nodes, rd, cid_tensor, widths, shapes) -> tuple[list, np.ndarray]:
    """The round's affine map as (one float map per source, bias): read from the layers
    (``convmap.read_round``: convolutions, batch norm, pooling, residual additions, a
    Gemm head) and checked against the float sub-graph on random vectors; else by probing
    the composed linear sub-graph with zero and with basis vectors."""
    got = _structured_map(graph, lin_nodes, rd, cid_tensor, widths, shapes)
    if got is not None:
        return got
    return _probed_map(graph, lin_nodes, rd, cid_tensor, widths, shapes)


def _structured_map(graph, lin_nodes, rd, cid_tensor, widths, shapes):
    """``convmap.read_round``'s map if the float sub-graph agrees with it on two random
    vectors per source (relative 1e-9; a misread layer is off by far more), else None."""
    from secinfer.ir.convmap import read_round

    got = read_round(graph, lin_nodes, rd.out, rd.sources, cid_tensor, shapes)
    if got is None:
        return None
    mats, bias = got
    rng = public_rng("quantize/structured-map-check", 4321)
    vals = {c: rng.standard_normal((2, widths[c])) for c in rd.sources}
    feeds = {cid_tensor[c]: v.reshape((2,) + tuple(shapes[c])) for c, v in vals.items()}
    ref = _probe(graph, lin_nodes, rd, cid_tensor, feeds)
    mine = sum(m @ vals[c].T for m, c in zip(mats, rd.sources)).T + bias[None, :]
    if ref.shape != mine.shape or not np.allclose(mine, ref, rtol=1e-9,
                                                  atol=1e-9 * max(1.0, float(np.max(np.abs(ref))))):
        return None
    return mats, bias


def _probed_map(graph, lin_nodes, rd, cid_tensor, widths, shapes) -> tuple[list[sp.csr_matrix], np.ndarray]:
    """The round's affine map by probing the composed linear sub-graph with zero and with
    basis vectors (few probes for local maps: ``_colored_map``)."""
    def feeds_for(src_vals: dict[int, np.ndarray]) -> dict[str, np.ndarray]:
        nb = next(iter(src_vals.values())).shape[0]
        out = {}
        for c in rd.sources:
            v = src_vals.get(c, np.zeros((nb, widths[c])))
            out[cid_tensor[c]] = v.reshape((nb,) + shapes[c])
        return out

    bias = _probe(graph, lin_nodes, rd, cid_tensor, feeds_for({rd.sources[0]: np.zeros((1, widths[rd.sources[0]]))}))[0]

    def probe(c: int, e: np.ndarray) -> np.ndarray:
        y = _probe(graph, lin_nodes, rd, cid_tensor, feeds_for({c: e})) - bias
        y[np.abs(y) < 1e-12 * max(1.0, float(np.max(np.abs(y), initial=0)))] = 0.0
        return y

    mats = []
    for c in rd.sources:
        m = _colored_map(probe, c, shapes[c], _round_out_shape(graph, rd, shapes, cid_tensor), widths[c])
        if m is None:                                # generic: one probe per input value
            cols = []
            for s in range(0, widths[c], _PROBE_CHUNK):
                cols.append(sp.csc_matrix(probe(c, np.eye(widths[c])[s:s + _PROBE_CHUNK]).T))
            m = sp.hstack(cols).tocsr()
        mats.append(m)
    return mats, bias


def _round_out_shape(graph, rd, shapes, cid_tensor) -> tuple | None:
    shp = graph.shapes.get(rd.out)
    return None if shp is None else tuple(int(d) for d in shp[1:])


def _colored_map(probe, c: int, in_shape: tuple, out_shape: tuple | None, width: int):
    """The map from a (C, H, W) source to a (C', H', W') output with few probes, when its
    spatial footprint is local (convolutions, pooling, residual adds): basis vectors of one
    channel on a grid of spacing d, with d larger than twice the footprint's radius, have
    disjoint output supports, so one probe measures ~(H/d)(W/d) columns; each output is
    credited to the nearest probed position. The result is checked against a probe with a
    random vector and discarded (None: probe every column) on any mismatch, or when the
    shapes are not images or the footprint is not local. [speed-up of SAFHIRE Sec. 4.5's
    quantization of ResNets; exact, not an approximation]"""
    if len(in_shape) != 3 or out_shape is None or len(out_shape) != 3:
        return None
    C, H, W = in_shape
    Co, Ho, Wo = out_shape
    if H * W < 64 or Ho < 1 or H % Ho or W % Wo:
        return None
    sy, sx = H // Ho, W // Wo
    # footprint radius (in input coordinates) from a centre basis vector of every channel
    e = np.zeros((C, C, H, W))
    for ch in range(C):
        e[ch, ch, H // 2, W // 2] = 1.0
    y = probe(c, e.reshape(C, -1)).reshape(C, Co, Ho, Wo)
    nz = np.nonzero(np.any(y != 0, axis=(0, 1)))
    if len(nz[0]) == 0:
        return sp.csr_matrix((Co * Ho * Wo, width))
    r = int(max(np.max(np.abs(nz[0] * sy - H // 2)), np.max(np.abs(nz[1] * sx - W // 2)))) + max(sy, sx)
    d = 2 * r + 1
    if d * d * 4 > H * W:
        return None
    rows, cols, vals = [], [], []
    oy_in = (np.arange(Ho) * sy)[:, None]
    ox_in = (np.arange(Wo) * sx)[None, :]
    for ch in range(C):
        batch, keys = [], []
        for py in range(d):
            for px in range(d):
                v = np.zeros((C, H, W))
                v[ch, py::d, px::d] = 1.0
                batch.append(v.reshape(-1))
                keys.append((py, px))
        ys = probe(c, np.asarray(batch)).reshape(len(batch), Co, Ho, Wo)
        for (py, px), yp in zip(keys, ys):
            # the probed input row/column nearest to each output position
            iy = py + d * np.rint((oy_in - py) / d).astype(np.int64)
            ix = px + d * np.rint((ox_in - px) / d).astype(np.int64)
            ok = (iy >= 0) & (iy < H) & (ix >= 0) & (ix < W)
            co, oy, ox = np.nonzero(yp)
            keep = ok[oy, ox]
            co, oy, ox = co[keep], oy[keep], ox[keep]
            rows.append((co * Ho + oy) * Wo + ox)
            cols.append((ch * H + iy[oy, 0]) * W + ix[0, ox])
            vals.append(yp[co, oy, ox])
    m = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                      shape=(Co * Ho * Wo, width))
    # check: the recovered map reproduces the real one on random vectors
    rng = public_rng("quantize/colored-map-check", 12345)
    t = rng.standard_normal((2, width))
    ref = probe(c, t)
    got = (m @ t.T).T
    if not np.allclose(got, ref, rtol=1e-9, atol=1e-9 * max(1.0, float(np.max(np.abs(ref))))):
        return None
    return m


def _as_scalable(m, scale):
    """A ConvMap takes one input scale; a per-element scale (tabular input) needs the matrix."""
    if isinstance(m, ConvMap) and np.ptp(np.asarray(scale, dtype=np.float64)) != 0:
        return m.tocsr()
    return m


def _max_scaled(m, scale) -> float:
    if isinstance(m, ConvMap):
        return float(np.max(np.abs(m.kernel), initial=0)) * float(np.asarray(scale).reshape(-1)[0])
    if m.nnz == 0:
        return 0.0
    return float(abs(m.multiply(_row(scale))).max())


def _row(scale) -> np.ndarray:
    """A source's scale as a (1, E) row (broadcast over a map's columns) or a scalar."""
    a = np.asarray(scale, dtype=np.float64)
    return a.reshape(1, -1) if a.ndim else a


def calibration_inputs(graph: Graph, data: np.ndarray | None, count: int, prg=None) -> np.ndarray:
    """The user's calibration data, or ``count`` random inputs (uniform [-1, 1], from the
    injected PRG when given) for networks without a data set."""
    if data is not None:
        return np.asarray(data, dtype=np.float64)
    shape = tuple(int(d) for d in graph.inputs[0].shape[1:])
    if prg is not None:
        u = prg.uint64((count,) + shape).astype(np.float64) / 2.0 ** 64
    else:
        u = public_rng("ir/quantize/calibration").random((count,) + shape)   # analysis only
    return 2.0 * u - 1.0


def batch_free(graph: Graph) -> Graph:
    """The same graph with a symbolic batch axis on its input (zoo graphs fix batch 1), so
    calibration and probing run many samples at once."""
    import dataclasses

    from secinfer.ir.graph import TensorInfo

    t = graph.inputs[0]
    if t.shape and t.shape[0] is None:
        return graph
    return dataclasses.replace(graph, inputs=[TensorInfo(t.name, (None,) + tuple(t.shape[1:]), t.dtype)])


def quantize(graph: Graph, b: int, calib: np.ndarray, act_bits: int | None = None,
             weight_bits: int | None = None, headroom: float = HEADROOM,
             residual_rounds: bool = False, measured: bool = True) -> QuantizedModel:
    """Post-training quantization of ``graph`` for accumulator precision ``b`` [SAFHIRE
    Sec. 3], calibrated on ``calib`` (batch-first float inputs). ``residual_rounds``: each
    residual branch gets a round of its own (``pool_rounds.residual_cuts``).

    Round by round, the calibration inputs run through the already-quantized prefix, and
    each round's s_acc is raised until its integer accumulators on those inputs use at most
    ``headroom`` of the b-bit range (issue 18: a scale fitted to the float model's
    activations alone let the quantized model's drifted ones wrap the accumulator).
    ``measured=False`` keeps the float-activation scale alone (the earlier choice, for
    comparison); the calibration report (``qm.calib``) counts the wraps either way."""
    graph = batch_free(graph)
    if b not in ACCUMULATOR_BITS:
        raise ConfigError(f"accumulator precision b must be one of {ACCUMULATOR_BITS}, got {b!r}")
    a = int(act_bits or ACT_BITS[b])
    wb = int(weight_bits or WEIGHT_BITS[b])
    if not 2 <= a < b or not 2 <= wb < b:
        raise ConfigError(f"activation bits {a} and weight bits {wb} must lie in [2, b)")
    graph.require_weights()
    rounds_s, lin_nodes = split_rounds(graph)
    calib = np.asarray(calib, dtype=np.float64)
    if calib.ndim < 2 or calib.shape[0] < 1:
        raise ConfigError("calibration data must be a non-empty batch")
    env = _calib_env(graph, calib, residual_rounds)
    cuts = pooling_cuts(graph) | (residual_cuts(graph, CLIENT_OPS) if residual_rounds else set())
    if residual_rounds:
        rounds_s, lin_nodes = split_rounds(graph, cuts)
    graph, staged = stage_pools(graph, env, a, (1 << (b - 1)) - 1, cuts)
    if staged is not None:
        rounds_s, lin_nodes = split_rounds(graph, staged)
    in_name = graph.inputs[0].name
    cid_tensor = {0: in_name}
    for r, rd in enumerate(rounds_s[:-1]):
        cid_tensor[r + 1] = rd.result
    shapes = {c: tuple(env[t].shape[1:]) for c, t in cid_tensor.items()}
    widths = {c: int(np.prod(s)) for c, s in shapes.items()}

    # input scale
    x0 = env[in_name]
    signed_in = bool(np.min(x0) < 0) or x0.ndim == 2
    in_hi = (1 << (a - 1)) - 1 if signed_in else (1 << a) - 1
    in_lo = -in_hi if signed_in else 0
    # tabular inputs (rank 2): a public scale and zero point per feature (features live on
    # different scales and offsets; the server folds both into the first layer's weights
    # and bias); images: one scale, zero point 0
    xf = x0.reshape(x0.shape[0], -1)
    top = max(float(np.max(np.abs(xf))), 1e-12)
    in_zero = None
    if x0.ndim == 2:
        lo_f, hi_f = np.percentile(xf, TAB_PCT, axis=0), np.percentile(xf, 100 - TAB_PCT, axis=0)
        in_zero = (lo_f + hi_f) / 2.0
        in_scale = np.maximum((hi_f - lo_f) / 2.0, 1e-3 * top) / in_hi
    else:
        in_scale = np.full(xf.shape[1], top / in_hi)
    scales = {0: in_scale}
    vmax = {0: max(abs(in_lo), in_hi)}
    bounds = {0: (in_lo, in_hi)}
    qrounds: list[QRound] = []
    qm = QuantizedModel(b, a, wb, shapes[0], in_scale, in_lo, in_hi, qrounds,
                        rounds_s[-1].softmax is not None,
                        tuple(env[graph.output_names[0]].shape[1:]), in_zero=in_zero)
    # the calibration inputs through the quantized prefix, samples as columns (E_c, S)
    vq = {0: qm.quantize_input(calib).T.copy()}
    last_use = {c: max(r for r, rd in enumerate(rounds_s) if c in rd.sources)
                for c in range(len(rounds_s))}
    n_over, use, raised = 0, np.zeros(len(rounds_s)), {}
    bad_in = np.zeros(calib.shape[0], dtype=bool)
    nnz_float: list[list[int]] = []
    for r, rd in enumerate(rounds_s):
        mats, bias = _linear_map(graph, lin_nodes, rd, cid_tensor, widths, shapes)
        if in_zero is not None and 0 in rd.sources:      # x = s x_int + z: M z joins the bias
            bias = bias + mats[rd.sources.index(0)] @ in_zero
        y = env[rd.out]
        mats = [_as_scalable(m, scales[c]) for m, c in zip(mats, rd.sources)]
        w_need = max(_max_scaled(m, scales[c]) for m, c in zip(mats, rd.sources)) / ((1 << (wb - 1)) - 1)
        s_acc = max(_absmax(y) / (headroom * (1 << (b - 1))), w_need, 1e-30)
        pool = uniform_weight(mats, bias, [scales[c] for c in rd.sources]) if rd.cut else None
        if pool is not None:
            # an average pooling alone: one integer weight W >= 1 for every summand and the
            # scale that makes it exact, s_acc = w s_in / W (rounding a uniform weight
            # would only rescale every average by the same wrong factor), and no larger
            # than keeps the sum of k activations within the accumulator for every input
            k = -(-mats[0].nnz // mats[0].shape[0])
            fit = ((1 << (b - 1)) - 1) // (k * vmax[rd.sources[0]])
            w_int = min((1 << (wb - 1)) - 1, max(1, min(fit, int(math.floor(pool / s_acc)))))
            s_acc = pool / w_int
        lim, s0 = 1 << (b - 1), s_acc
        for it in range(40):
            # the quantized prefix's own activations on the calibration inputs [issue 18]
            wints = [_int_weights(m, scales[c], s_acc) for m, c in zip(mats, rd.sources)]
            bint = np.rint(bias / s_acc).astype(np.int64)
            acc = bint.reshape(-1, 1) + sum(w @ vq[c] for w, c in zip(wints, rd.sources))
            top = float(np.max(np.abs(acc), initial=0))
            if not measured or pool is not None or top <= headroom * lim or \
                    (it >= 8 and top < lim):
                break
            s_acc *= max(top / (headroom * lim), 1.01)   # W_int ~ 1 / s_acc
            raised[r] = round(s_acc / s0, 4)
        nnz_float.append([int(m.nnz) if isinstance(m, ConvMap) else int(np.count_nonzero(m.data))
                          for m in mats])
        yw = wrap(acc, b)
        use[r] = top / lim
        n_over += int(np.sum(yw != acc))
        bad_in |= np.any(yw != acc, axis=0)
        for c in [c for c in vq if last_use.get(c, -1) <= r]:
            del vq[c]
        worst = worst_bound(wints, rd.sources, bint, bounds)
        qr = QRound(rd.sources, wints, bint, tuple(env[rd.out].shape[1:]), s_acc, worst=worst)
        if r < len(rounds_s) - 1:
            qr.relu = any(n.op == "Relu" for n in rd.chain)
            qr.groups = _groups(rd.chain, qr.out_shape)
            v = env[cid_tensor[r + 1]]
            signed = not qr.relu and _minimum(v) < 0
            qr.hi = (1 << (a - 1)) - 1 if signed else (1 << a) - 1
            qr.lo = -qr.hi if signed else 0
            s_v = max(_absmax(v), 1e-12) / qr.hi
            qr.eta = max(1, int(round(s_v / s_acc)))
            scales[r + 1] = qr.eta * s_acc
            vmax[r + 1] = max(abs(qr.lo), qr.hi)
            bounds[r + 1] = (qr.lo, qr.hi)
            vq[r + 1] = client_step(qr.layout(yw), qr.relu, qr.k, qr.eta, qr.lo, qr.hi)
        qrounds.append(qr)
        for name in {rd.out, rd.result} - {in_name, *graph.output_names}:
            env.pop(name, None)                  # read by this round only
    # calibration report: per round the largest |accumulator| over the calibration inputs
    # as a share of 2^(b-1) (> 1: wrapped), the wraps, and the inputs that saw one
    finals = {np.ascontiguousarray(col).tobytes() for col in yw.T}
    qm.calib = {"samples": int(calib.shape[0]), "max_acc_use": [round(float(u), 4) for u in use],
                "wrapped_accumulators": n_over, "wrapped_inputs": int(np.sum(bad_in)),
                "headroom": headroom, "scale_from": "quantized" if measured else "float",
                "raised_scales": {str(k): v for k, v in raised.items()},
                **zero_weight_report(qm, nnz_float), "distinct_outputs": len(finals)}
    return qm


def _int_weights(m, scale, s_acc: float):
    """W_int = round(M s_in / s_acc) for one source's map (ConvMap or sparse matrix)."""
    if isinstance(m, ConvMap):
        return m.scaled(float(np.asarray(scale).reshape(-1)[0]) / s_acc).rounded()
    q = sp.csr_matrix(m.multiply(_row(scale) / s_acc))
    q.data = np.rint(q.data)
    q = q.astype(np.int64)
    q.eliminate_zeros()
    return q


def accuracy_report(graph: Graph, qm: QuantizedModel, x: np.ndarray, labels: np.ndarray | None = None,
                    task: str | None = None) -> dict:
    """Float vs quantized on held-out data. Classifiers (several outputs, task not
    "regression"): accuracy (argmax) and prediction agreement. Regressors (one output, or
    task "regression"): an argmax means nothing there; the error of the quantized output
    against float (RMSE, max, RMSE relative to the float outputs' spread) and, with
    targets, both models' RMSE against them."""
    from secinfer.ir.float_exec import run_float

    f = run_float(batch_free(graph), x).reshape(len(x), -1)
    q = qm.run(x).reshape(len(x), -1)
    out: dict = {"samples": int(len(x))}
    if task == "regression" or (task is None and f.shape[1] == 1):
        err = q - f
        rmse = float(np.sqrt(np.mean(err ** 2)))
        spread = float(np.std(f)) or float(np.max(np.abs(f))) or 1.0
        out.update(task="regression", rmse=rmse, max_abs_err=float(np.max(np.abs(err))),
                   rel_rmse=rmse / spread)
        if labels is not None:
            yl = np.asarray(labels, dtype=np.float64).reshape(len(x), -1)
            out["float_rmse"] = float(np.sqrt(np.mean((f - yl) ** 2)))
            out["quantized_rmse"] = float(np.sqrt(np.mean((q - yl) ** 2)))
        return out
    out.update(task="classification", agreement=float(np.mean(np.argmax(f, 1) == np.argmax(q, 1))))
    if labels is not None:
        out["float_accuracy"] = float(np.mean(np.argmax(f, 1) == labels))
        out["quantized_accuracy"] = float(np.mean(np.argmax(q, 1) == labels))
    return out


def default_calibration(graph: Graph, count: int = 64, prg=None) -> tuple[np.ndarray, str]:
    """Calibration data for a graph: the bundled model's own data set (first half of the
    held-out split; the second half stays for evaluation) when the graph is a bundled
    model, else random inputs."""
    from secinfer.ir import bundled

    name = str(graph.name).replace("_", "-")
    if name in bundled.bundled_names():
        x, _ = bundled.bundled_testset(name)
        half = len(x) // 2
        return x[:half], f"bundled:{name} held-out split, first {half} rows"
    return calibration_inputs(graph, None, count, prg), f"random uniform [-1, 1] ({count} inputs)"


def _signs(w):
    """(W with its negative entries zeroed, W with its positive entries zeroed)."""
    if isinstance(w, ConvMap):
        # with a (non-negative) pooling stage first: an upper bound, not attained
        return w.with_kernel(np.maximum(w.kernel, 0)), w.with_kernel(np.minimum(w.kernel, 0))
    w = sp.csr_matrix(w)
    return w.maximum(0), w.minimum(0)


def worst_bound(weights: list, sources: list, bias: np.ndarray, bounds: dict) -> int:
    """max |sum_s W_s v_s + bias| over every input with v_c in [lo_c, hi_c] elementwise (the
    accumulators the ciphertexts must hold without wrapping mod q): per row the largest sum
    takes hi where W > 0 and lo where W < 0, the smallest the reverse (tighter than
    sum |W| max(|lo|, |hi|) for unsigned inputs after a ReLU)."""
    top = np.asarray(bias, dtype=np.int64).copy()
    bot = top.copy()
    for w, c in zip(weights, sources):
        lo, hi = (int(a) for a in bounds[c])
        pos, neg = _signs(w)
        n = int(w.shape[1])
        lo_v, hi_v = np.full(n, lo, dtype=np.int64), np.full(n, hi, dtype=np.int64)
        top += np.asarray(pos @ hi_v).reshape(-1) + np.asarray(neg @ lo_v).reshape(-1)
        bot += np.asarray(pos @ lo_v).reshape(-1) + np.asarray(neg @ hi_v).reshape(-1)
    return int(max(np.max(np.abs(top), initial=0), np.max(np.abs(bot), initial=0)))


def log2_worst(qm: QuantizedModel) -> int:
    return max(int(math.ceil(math.log2(rd.worst + 1))) for rd in qm.rounds)


def quantize_searched(graph: Graph, b: int, calib: np.ndarray, max_tries: int = 12,
                      residual_rounds: bool = False) -> QuantizedModel:
    """``quantize`` with the (activation bits, weight bits) pair that agrees best with the
    float model on the calibration data (argmax for classifiers, relative error for one output) (ties: the default pair), trying at most
    ``max_tries`` pairs around the defaults. Cheap for small models; the chosen pair is
    public metadata like the rest."""
    from secinfer.ir.float_exec import run_float

    graph = batch_free(graph)
    ref = run_float(graph, calib).reshape(len(calib), -1)

    def score(q: np.ndarray) -> float:
        q = q.reshape(len(calib), -1)
        if ref.shape[1] > 1:                       # classifier: argmax agreement
            return float(np.mean(np.argmax(q, 1) == np.argmax(ref, 1)))
        return 1.0 - float(np.mean(np.abs(q - ref)) / max(float(np.mean(np.abs(ref))), 1e-12))

    best, best_score = None, -np.inf
    pairs = [(ACT_BITS[b], WEIGHT_BITS[b])]
    pairs += [(a, w) for a in range(2, b - 1) for w in range(2, b - 1)
              if abs(a - ACT_BITS[b]) <= 2 and abs(w - WEIGHT_BITS[b]) <= 2 and (a, w) != pairs[0]]
    for a, w in pairs[:max_tries]:
        qm = quantize(graph, b, calib, a, w, residual_rounds=residual_rounds)
        sc = score(qm.run(calib))
        if sc > best_score:
            best, best_score = qm, sc
    best.calib["calibration_agreement"] = best_score
    return best
