"""Falcon+'s backend for the shared graph executor: every non-linear op in pure MPC.

Linear node: local product + reshare (one round), probabilistic truncation (one round),
bias; then ReLU by DReLU and Falcon's select (10 rounds with the default ``falcon_drelu="falcon"``),
MaxPool by Falcon's running maximum (option ``falcon_max="tree"``: a tree), BatchNorm in its
inference form (product with the shared scale, truncation, shift), average pooling as
a public scaling, softmax by max-subtraction, exponentiation (1 + x/2^8)^(2^8) and a
Newton-Raphson reciprocal [STAMP 5.1 "Falcon+": CrypTen's exponentiation with Falcon's
max and division], LayerNorm with a Newton-Raphson inverse square root.
"""

from __future__ import annotations

import numpy as np

from secinfer.ir import fixed_ops
from secinfer.ir.graph import Node, lift_2d
from secinfer.arith.linalg import pool_patches
from secinfer.errors import ProtocolError, UnsupportedOpError
from secinfer.protocols.falcon.mpc import FalconMPC
from secinfer.protocols.rep3 import kernels
from secinfer.sharing import replicated as rss
from secinfer.sharing.replicated import Pair

EXP_SQUARINGS = 8
SQRT_ROUNDS = 4          # Falcon's BNLayer: 4 Babylonian square-root steps


class FalconBackend:
    def __init__(self, mpc: FalconMPC, sequential_max: bool = True, max_index: bool = True,
                 bn: str = "falcon") -> None:
        if bn not in ("falcon", "folded"):
            raise ProtocolError(f"falcon_bn must be 'falcon' or 'folded', not {bn!r}")
        self.mpc = mpc
        self.seq = sequential_max
        self.max_index = max_index and sequential_max
        self.bn = bn
        self.ring = mpc.ring
        self.cfg = mpc.cfg
        self.me = mpc.me
        self.counts = {"products": 0}

    # ---- small arithmetic helpers -----------------------------------------------------------
    def _mul(self, x: Pair, y: Pair) -> Pair:
        (z,) = self.mpc.mult_round([("a", self.mpc.emul, x, y)])
        return self.mpc.trunc(z)

    def _scale_public(self, x: Pair, c: np.ndarray) -> Pair:
        """trunc(x * c) for a public fixed-point c."""
        return self.mpc.trunc(rss.mul_public(self.ring, x, c))

    def _const(self, v: float, shape) -> Pair:
        return rss.public_pair(self.ring, self.me, np.broadcast_to(self.cfg.encode(v), shape).copy())

    # ---- interface ----------------------------------------------------------------------------
    def product(self, node: Node, x: Pair, w: Pair, bias: Pair | None, chain: list[Node],
                params: list[list[Pair]], out_shape: tuple) -> Pair:
        ring = self.ring
        f = kernels.bilinear(node.op, node.attrs, ring)
        (z,) = self.mpc.mult_round([("a", f, x, w)])
        y = self.mpc.trunc(z)
        if bias is not None:
            shp = [1] * y.a.ndim
            shp[1 if node.op == "Conv" else -1] = -1
            y = rss.add(ring, y, rss.apply(bias, lambda v: v.reshape(shp)))
        self.counts["products"] += 1
        self.mpc.flush()
        return self.chain(y, chain, params, out_shape) if chain else y

    def chain(self, x: Pair, nodes: list[Node], params: list[list[Pair]], out_shape: tuple) -> Pair:
        for node, ps in zip(nodes, params):
            x = self._node(x, node, ps)
            self.mpc.flush()
        return x

    def _node(self, x: Pair, node: Node, ps: list[Pair]) -> Pair:
        op, ring, cfg = node.op, self.ring, self.cfg
        if op == "Relu":
            return self.mpc.relu(x)
        if op == "Mul":   # by a one-element weight (the executor's fused scaling): as ``product``
            (z,) = self.mpc.mult_round([("a", kernels.bilinear("Mul", {}, ring), x, ps[0])])
            return self.mpc.trunc(z)
        if op == "MaxPool":
            p = lift_2d(node)
            one_d = p["spatial"] == 1
            lowest = np.uint64(1 << (cfg.ring_bits - 1))

            def patches(v, comp):
                v4 = v.reshape(v.shape[0], v.shape[1], 1, v.shape[2]) if one_d else v
                return pool_patches(v4, p["kernel"], p["strides"], p["pads"], p["dilations"],
                                    lowest if comp == 0 else np.uint64(0), bool(node.attrs["ceil_mode"]))
            cols = Pair(patches(x.a, self.me), patches(x.b, (self.me + 1) % 3))
            y = self.mpc.max_reduce(cols, 2, self.seq, self.max_index)
            return rss.apply(y, lambda v: v.reshape(v.shape[0], v.shape[1], v.shape[3])) if one_d else y
        if op == "GlobalMaxPool":
            flat = rss.apply(x, lambda v: v.reshape(v.shape[0], v.shape[1], -1))
            y = self.mpc.max_reduce(flat, 2, self.seq, self.max_index)
            return rss.apply(y, lambda v: v.reshape(x.a.shape[:2] + (1,) * (x.a.ndim - 2)))
        if op == "AveragePool":
            s = rss.apply(x, lambda v: fixed_ops.avgpool_sums(v, cfg, node.attrs))
            return self._scale_public(s, fixed_ops.avgpool_reciprocals(x.a.shape, node.attrs, cfg))
        if op == "GlobalAveragePool":
            ax = tuple(range(2, x.a.ndim))
            s = rss.apply(x, lambda v: ring.reduce(v.sum(axis=ax, dtype=np.uint64, keepdims=True)))
            return self._scale_public(s, fixed_ops.global_avgpool_reciprocal(x.a.shape, cfg))
        if op == "BatchNormalization":
            return self._batchnorm(x, ps)
        if op == "LayerNormalization":
            return self._layernorm(x, node, ps)
        if op == "Softmax":
            return self.softmax(x, node)
        raise UnsupportedOpError(op, node.name, "Falcon+ has no pure-MPC protocol for it")

    def _bcast(self, v: Pair, shape: tuple) -> Pair:
        return rss.apply(v, lambda u: np.broadcast_to(u, shape).copy())

    def _divide(self, a: Pair, b: Pair) -> Pair:
        """a / b with b broadcast over a: Falcon's division [falcon-public funcDivision /
        funcBatchNorm]: the reciprocal of each divisor once (``FalconMPC.reciprocal``: Pow
        + normalised Goldschmidt-style steps), then one product with a (2 rounds)."""
        return self._mul(a, self._bcast(self.mpc.reciprocal(b), a.a.shape))

    def _falcon_normalise(self, d: Pair, var: Pair) -> Pair:
        """d / sqrt(var) as Falcon's BN forward does it [falcon-public BNLayer::forward]:
        sigma = sqrt(var) by SQRT_ROUNDS = 4 Babylonian steps sigma <- (sigma + var/sigma)/2
        from Falcon's initial guess 1.0 (each a Falcon division), then d / sigma."""
        sigma = self._const(1.0, var.a.shape)
        for _ in range(SQRT_ROUNDS):
            sigma = self._scale_public(rss.add(self.ring, sigma, self._divide(var, sigma)), self.cfg.encode(0.5))
        return self._divide(d, sigma)

    def _batchnorm(self, x: Pair, ps: list[Pair]) -> Pair:
        """Inference BatchNorm. The IR gives it folded, y = scale x + shift (the importer
        folds mean, variance and epsilon into scale and shift). ``bn="falcon"`` (default,
        the paper's Falcon+ [STAMP Table 7: BatchNorm 335 rounds, 224n bytes]) runs Falcon's
        BN layer forward on the equivalent parameters gamma = scale, beta = shift, mean = 0,
        var + eps = 1: the same steps, rounds and bytes as Falcon's BN (4 Babylonian square-
        root divisions on the per-channel variance, the division of every element by sigma,
        the product with gamma); the values are shares, the result is scale x + shift up to
        the division's error. ``bn="folded"``: the product with the shared scale (2 rounds),
        what a baseline that folds BatchNorm would do."""
        shp = (1, -1) + (1,) * (x.a.ndim - 2)
        sc, sh = (rss.apply(q, lambda v: v.reshape(shp)) for q in ps)
        if self.bn == "falcon":
            var = self._const(1.0, sc.a.shape)
            x = self._falcon_normalise(x, var)
        return rss.add(self.ring, self._mul(x, sc), sh)

    def _layernorm(self, x: Pair, node: Node, ps: list[Pair]) -> Pair:
        """Falcon's batch-normalisation forward [Falcon 'Batch Normalization'; falcon-public
        BNLayer::forward], over LayerNorm's axes: mean, variance (+ epsilon), sigma =
        sqrt(var) by SQRT_ROUNDS = 4 Babylonian steps sigma <- (sigma + var / sigma) / 2
        from sigma = 1 (each a Falcon division), xhat = (x - mean) / sigma (a division),
        then gamma xhat + beta. Rounds: 4 + 4 x (50 + 1) + 50 + 2 = 260 [STAMP Table 7: 335].
        Error budget: the Babylonian steps from 1 converge for var in about [0.05, 20]
        (4 steps; outside, sigma is off by more than 1%); each division has relative error
        <= 5.4e-5 plus truncation."""
        ring, cfg = self.ring, self.cfg
        axis = int(node.attrs.get("axis", -1)) % x.a.ndim
        axes = tuple(range(axis, x.a.ndim))
        d_count = int(np.prod([x.a.shape[a] for a in axes]))
        inv = cfg.encode(1.0 / d_count)
        ssum = lambda p: rss.apply(p, lambda v: ring.reduce(v.sum(axis=axes, dtype=np.uint64, keepdims=True)))  # noqa: E731
        mean = self._scale_public(ssum(x), inv)
        d = rss.sub(ring, x, self._bcast(mean, x.a.shape))
        var = self._scale_public(ssum(self._mul(d, d)), inv)
        eps = float(node.attrs.get("epsilon", 1e-5))
        var = rss.add_public(ring, self.me, var, cfg.encode(eps))
        out = self._falcon_normalise(d, var)
        if ps:
            out = self._mul(out, ps[0])
            if len(ps) > 1:
                out = rss.add(ring, out, ps[1])
        return out

    def softmax(self, x: Pair, node: Node) -> Pair:
        """Falcon+'s softmax [STAMP 5.1: "the exponentiation protocol of [31] (CrypTen)
        combined with Pi_Div and Pi_Max provided by Falcon"]: the row maximum by Falcon's
        running maximum (``max_reduce``), exp(x - max) by CrypTen's limit approximation
        (1 + t/2^8)^(2^8) (8 squarings [CrypTen 'exp']), the row sum, and Falcon's
        division of every exponential by the sum (``_divide``)."""
        ring, cfg = self.ring, self.cfg
        axis = int(node.attrs.get("axis", -1)) % x.a.ndim
        mx = self.mpc.max_reduce(x, axis, self.seq, self.max_index)
        mx = rss.apply(mx, lambda v: np.broadcast_to(np.expand_dims(v, axis), x.a.shape).copy())
        d = rss.sub(ring, x, mx)                                   # <= 0
        e = rss.add_public(ring, self.me, self._scale_public(d, cfg.encode(2.0 ** -EXP_SQUARINGS)),
                           cfg.encode(1.0))
        for _ in range(EXP_SQUARINGS):                             # (1 + d/256)^256 [CrypTen]
            e = self._mul(e, e)
        s = rss.apply(e, lambda v: ring.reduce(v.sum(axis=axis, dtype=np.uint64, keepdims=True)))
        self.mpc.flush()
        return self._divide(e, s)
