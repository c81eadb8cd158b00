"""STAMP's backend for the graph executor: every non-linear step goes through the LTEE.

Semi-honest: a linear node's 3-out-of-3 product goes straight into the device path
(truncation, bias and the following ReLU / MaxPool / BatchNorm fused, [Protocol 5]);
two rounds for MatMul + non-linearity instead of at least three [4.3].
Malicious: the product is re-shared, verified with an LTEE-made triple
(``Engine.reshare_verified``, checked by ``flush_checks`` before any reveal), then the duplicated device path runs [Protocol 5 blue].
Batches are split across the three parties [4.2].
"""

from __future__ import annotations

import numpy as np

from secinfer.ir.graph import Node
from secinfer.protocols.stamp import kernels
from secinfer.protocols.stamp.engine import Engine
from secinfer.protocols.stamp.nonlinear import Job, StampOps, split_batch
from secinfer.sharing import replicated as rss
from secinfer.sharing.replicated import Pair

_PER_SAMPLE = ("Relu", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
               "BatchNormalization", "Sigmoid", "Tanh", "Erf", "Gelu", "Exp", "Sqrt")


def _splittable(nodes: list[Node]) -> bool:
    for n in nodes:
        if n.op in _PER_SAMPLE:
            continue
        if n.op in ("LayerNormalization", "Softmax") and int(n.attrs.get("axis", -1)) != 0:
            continue
        return False
    return True


class StampBackend:
    def __init__(self, eng: Engine, ops: StampOps) -> None:
        self.eng, self.ops = eng, ops
        self.ring = eng.ring
        self._rot = 0
        self.counts = {"device_calls": 0, "products": 0}

    # ---- job construction ------------------------------------------------------------
    def _run(self, data, steps: list, params: list[Pair], out_shape: tuple, path: str, split: bool) -> Pair:
        n = (data.a if isinstance(data, Pair) else data).shape[0] if len(out_shape) else 1
        ranges = [r for r in split_batch(n) if r[1] > r[0]] if split and n >= 2 else [(0, n)]
        jobs = []
        for c, (lo, hi) in enumerate(ranges):
            leader = c if len(ranges) > 1 else self._rot % 3
            chunk = Pair(data.a[lo:hi], data.b[lo:hi]) if isinstance(data, Pair) else data[lo:hi]
            if len(ranges) == 1:
                chunk = data
            ishape = (chunk.a if isinstance(chunk, Pair) else chunk).shape
            oshape = ((hi - lo),) + tuple(out_shape[1:]) if len(ranges) > 1 else tuple(out_shape)
            spec = {"shape": [int(d) for d in ishape], "out_shape": [int(d) for d in oshape],
                    "params": [[int(d) for d in p.a.shape] for p in params], "steps": steps}
            jobs.append(Job(leader, spec, chunk, list(params)))
        if len(ranges) == 1:
            self._rot += 1
        outs = self.ops.run(jobs, path)
        self.counts["device_calls"] += 1
        if len(outs) == 1:
            return outs[0]
        return Pair(np.concatenate([o.a for o in outs]), np.concatenate([o.b for o in outs]))

    @staticmethod
    def _node_steps(nodes: list[Node], first_param: int, params: list[list[Pair]]):
        steps, flat, k = [], [], first_param
        for node, ps in zip(nodes, params):
            idx = list(range(k, k + len(ps)))
            k += len(ps)
            flat.extend(ps)
            steps.append({"op": "node", "node": node.to_json(), "params": idx})
        return steps, flat

    # ---- backend interface -------------------------------------------------------------
    def product(self, node: Node, x: Pair, w: Pair, bias: Pair | None, chain: list[Node],
                params: list[list[Pair]], out_shape: tuple) -> Pair:
        ring, eng = self.ring, self.eng
        f = kernels.bilinear(node.op, node.attrs, ring)
        z3 = rss.bilinear_local(ring, f, x, w)
        steps = [{"op": "trunc"}]
        plist: list[Pair] = []
        if bias is not None:
            steps.append({"op": "bias", "axis": 1 if node.op == "Conv" else -1, "param": 0})
            plist.append(bias)
        nsteps, nparams = self._node_steps(chain, len(plist), params)
        steps += nsteps
        plist += nparams
        self.counts["products"] += 1
        split = (_splittable(chain) and len(out_shape) >= 1 and z3.ndim >= 1
                 and z3.shape[0] == out_shape[0])
        if not eng.malicious:
            return self._run(z3, steps, plist, out_shape, "3of3", split)
        triple = self.ops.triple(node.op, node.attrs, x.a.shape, w.a.shape, z3.shape)
        z = eng.reshare_verified(f, x, w, z3, triple)
        return self._run(z, steps, plist, out_shape, "rss", split)

    def chain(self, x: Pair, nodes: list[Node], params: list[list[Pair]], out_shape: tuple) -> Pair:
        steps, plist = self._node_steps(nodes, 0, params)
        return self._run(x, steps, plist, out_shape, "rss", _splittable(nodes) and x.a.ndim >= 1)

    def softmax(self, x: Pair, node: Node) -> Pair:
        axis = int(node.attrs.get("axis", -1)) % x.a.ndim
        perm = None
        if axis != x.a.ndim - 1:
            perm = [i for i in range(x.a.ndim) if i != axis] + [axis]
            x = rss.apply(x, lambda v: np.ascontiguousarray(np.transpose(v, perm)))
        shp = x.a.shape
        flat = rss.apply(x, lambda v: v.reshape(-1, shp[-1]))
        y = self._run(flat, [{"op": "softmax"}], [], flat.a.shape, "exp", True)
        y = rss.apply(y, lambda v: v.reshape(shp))
        if perm is not None:
            inv = list(np.argsort(perm))
            y = rss.apply(y, lambda v: np.ascontiguousarray(np.transpose(v, inv)))
        return y
