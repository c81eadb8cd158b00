"""ABY3 baseline [ASTRA ref. 55]: replicated 3-party arithmetic/boolean computation.

This is the in-repo competitor every ASTRA speed-up is measured against (the paper did the
same: "since the code for ABY3 was not available, we implemented their protocols in our
framework"). Semi-honest: multiplication and dot product by local products plus one
re-sharing message per party (3 elements per gate / per dot product, 1 round, no offline).
Malicious: every product is computed as above and verified with a preprocessed triple by
sacrifice (open rho = x - d, sigma = y - e: 6 elements; the zero test of
tau = z - f - sigma d - rho e - sigma rho is hash-only), 9 elements per product online;
triples come from the cut-and-choose of [ASTRA ref. 2] (9B - 6 elements each, 12 for B = 2).
Bit extraction: the three arithmetic components are boolean inputs known to two parties each
(local), then the carry-save + parallel-prefix MSB circuit (``msb_add3_circuit``) is evaluated
on boolean shares, one round per AND level (log2(l) + 2 rounds).
"""

from __future__ import annotations

import numpy as np

from secinfer.arith.ring import Ring
from secinfer.errors import ProtocolError
from secinfer.crypto.gc.circuit import Circuit, bits_of, msb_add3_circuit
from secinfer.net.channel import ArraySpec
from secinfer.protocols.rep3.digest import H_SPEC as _H
from secinfer.protocols.rep3.digest import RunningHashes, digest
from secinfer.protocols.rep3.triples import bucket_params, cut_and_bucket
from secinfer.protocols.rep3.wire import pack, packed_spec, unpack
from secinfer.sharing import replicated as rss
from secinfer.sharing.replicated import Pair

SERVERS = ("p0", "p1", "p2")
COMP_KEY = {0: "02", 1: "01", 2: "12"}   # x_0 held by p0, p2; x_1 by p0, p1; x_2 by p1, p2
PAIR_KEY = {0: "01", 1: "12", 2: "02"}   # k_{i,i+1}


class Rep3Engine:
    def __init__(self, ep, role, keys, security, bits=64, prg=None, bucket=None, opened=None):
        self.ep, self.role, self.keys, self.security = ep, role, keys, security
        self.malicious = security != "semi-honest"
        self.bits, self.R = bits, Ring(bits)
        self.idx = SERVERS.index(role)
        self.next, self.prev = SERVERS[(self.idx + 1) % 3], SERVERS[(self.idx + 2) % 3]
        self.prg, self.bucket, self.opened = prg, bucket, opened
        self.out_h = RunningHashes("rep3-verify")
        self.in_h = RunningHashes("rep3-verify")
        self.to_verify: list = []     # (x, y, z) products awaiting sacrifice
        self.triples: list = []       # preprocessed (d, e, f) waiting to be consumed
        self._n = 0

    def _label(self, name):
        self._n += 1
        return f"rep3/{name}#{self._n}/{self.bits}"

    def draw(self, key, label, shape):
        return self.keys.stream(key, label).ring(tuple(shape), self.bits)

    def spec(self, shape):
        return ArraySpec(np.uint64, tuple(shape))

    def send(self, peer, tag, a):
        """Ring elements packed to the ring width (Z_2: 8 per byte), as ASTRA does."""
        self.ep.send(peer, tag, pack(a, self.bits))

    def recv1(self, peer, tag, shape):
        return unpack(self.ep.recv_one(peer, tag, packed_spec(self.bits, shape)), self.bits, shape)

    # ---- randomness --------------------------------------------------------------------
    def rand(self, shape, label) -> Pair:
        i = self.idx
        return Pair(self.draw(COMP_KEY[i], label, shape), self.draw(COMP_KEY[(i + 1) % 3], label, shape))

    def zero(self, shape, label) -> np.ndarray:
        i = self.idx
        return self.R.sub(self.draw(PAIR_KEY[i], label, shape), self.draw(PAIR_KEY[(i + 2) % 3], label, shape))

    # ---- input and output ----------------------------------------------------------------
    def input(self, owner: str, shape, label: str) -> Pair:
        """x_1 from the owner's key with {p0, p1}, x_0 from its key with {p0, p2}, x_2 sent."""
        k01, k02 = {"model_owner": ("M1", "M2"), "client": ("C1", "C2")}[owner]
        i = self.idx
        x0 = self.draw(k02, label, shape) if i in (0, 2) else None
        x1 = self.draw(k01, label, shape) if i in (0, 1) else None
        x2 = None
        if i in (1, 2):
            x2 = self.recv1(owner, f"rep3/in/{label}", shape)
            if self.malicious:
                other = "p2" if i == 1 else "p1"
                self.out_h.fold(other, "sh-consistency", x2)
                self.in_h.fold(other, "sh-consistency", x2)
        comps = [x0, x1, x2]
        return Pair(comps[i], comps[(i + 1) % 3])

    def open_all(self, s: Pair, label: str, immediate: bool = True) -> np.ndarray:
        ep, R = self.ep, self.R
        t = f"rep3/open/{label}"
        self.send(self.prev, t, s.b)
        if self.malicious:
            ep.send(self.next, t + "/h", digest("open", s.a))
        missing = self.recv1(self.next, t, s.shape)
        if self.malicious:
            h = ep.recv_one(self.prev, t + "/h", _H)
            ep.require(np.array_equal(h, digest("open", missing)), "rec-consistency", None, "replicated opening disagrees")
        return R.add(R.add(s.a, s.b), missing)

    def open_to(self, receiver: str, s: Pair, label: str) -> None:
        t = f"rep3/out/{label}"
        self.send(receiver, t, s.a)
        if self.malicious:
            self.ep.send(receiver, t + "/h", digest("out", s.b))

    # ---- products ------------------------------------------------------------------------
    def _local(self, x: Pair, y: Pair, op) -> np.ndarray:
        R = self.R
        return R.add(R.add(op(x.a, y.a), op(x.a, y.b)), op(x.b, y.a))

    def _reshare(self, z: np.ndarray, label: str) -> Pair:
        z = self.R.add(z, self.zero(z.shape, label + "/zero"))
        self.send(self.prev, f"rep3/mul/{label}", z)
        zn = self.recv1(self.next, f"rep3/mul/{label}", z.shape)
        return Pair(z, zn)

    def mul(self, x: Pair, y: Pair) -> Pair:
        lab = self._label("mul")
        z = self._reshare(self._local(x, y, self.R.mul), lab)
        if self.malicious:
            self.to_verify.append((x, y, z))
        return z

    def matmul(self, x: Pair, w: Pair) -> Pair:
        """Semi-honest: one dot product per output, 3 elements. Malicious: per-product
        multiplications (each to be verified), summed locally."""
        lab = self._label("dp")
        R = self.R
        if not self.malicious:
            return self._reshare(self._local(x, w, R.matmul), lab)
        xe = rss.apply(x, lambda a: np.ascontiguousarray(np.broadcast_to(a[:, :, None], a.shape + (w.shape[1],))))
        we = rss.apply(w, lambda a: np.ascontiguousarray(np.broadcast_to(a[None], (x.shape[0],) + a.shape)))
        z = self.mul(xe, we)
        return rss.apply(z, lambda a: R.reduce(a.sum(axis=1, dtype=np.uint64)))

    # ---- malicious: triples and sacrifice -----------------------------------------------
    def preprocess(self, n: int) -> None:
        """Offline: n verified triples by cut-and-choose with bucket sacrifice [ASTRA ref. 2]."""
        if n == 0:
            return
        b, c = bucket_params(n, self.bucket, self.opened)
        total = b * n + c
        lab = self._label("trip")
        d, e = self.rand((total,), lab + "/d"), self.rand((total,), lab + "/e")
        f = self._reshare(self._local(d, e, self.R.mul), lab + "/f")
        self.triples.append(cut_and_bucket(
            self.ep, self.role, self.prg, n, lab, "rep3-perm", d, e, f,
            take=lambda s, idx: rss.apply(s, lambda a: a[idx]), open_=self.open_all, mul=self.R.mul,
            sacrifice=lambda h, o, label: self._sacrifice(h, o, label, True), bucket=self.bucket, opened=self.opened))

    def _take_triples(self, n: int):
        got, need = [], n
        while need > 0:
            if not self.triples:
                raise ProtocolError("not enough preprocessed triples (a planning error, not a peer's)")
            t = self.triples[0]
            k = t[0].shape[0]
            if k <= need:
                got.append(self.triples.pop(0))
                need -= k
            else:
                got.append(tuple(rss.apply(s, lambda a: a[:need]) for s in t))
                self.triples[0] = tuple(rss.apply(s, lambda a: a[need:]) for s in t)
                need = 0
        return tuple(_cat([g[i] for g in got]) for i in range(3))

    def _sacrifice(self, xyz, def_, label, immediate):
        x, y, z = xyz
        d, e, f = def_
        R = self.R
        rho = self.open_all(rss.sub(R, x, d), label + "/rho")
        sigma = self.open_all(rss.sub(R, y, e), label + "/sigma")
        tau = rss.sub(R, rss.sub(R, rss.sub(R, z, f), rss.mul_public(R, d, sigma)), rss.mul_public(R, e, rho))
        tau = rss.add_public(R, self.idx, tau, R.neg(R.mul(sigma, rho)))
        mine = R.neg(R.add(tau.a, tau.b))        # should equal x_{i+2} = next party's b
        if immediate:
            self.ep.send(self.next, f"rep3/zero/{label}", digest("zero", mine))
            got = self.ep.recv_one(self.prev, f"rep3/zero/{label}", _H)
            self.ep.require(np.array_equal(got, digest("zero", tau.b)), "trip-bucket", None,
                            "a triple failed its bucket check")
        else:
            self.out_h.fold(self.next, "sacrifice", mine)
            self.in_h.fold(self.prev, "sacrifice", tau.b)

    def verify(self) -> None:
        """Check every product made so far (sacrifice, hash-only zero test) and all hashes."""
        if self.to_verify:
            flat = [tuple(rss.apply(s, lambda a: np.ascontiguousarray(a).reshape(-1)) for s in t) for t in self.to_verify]
            self.to_verify = []
            xyz = tuple(_cat([f[i] for f in flat]) for i in range(3))
            self._sacrifice(xyz, self._take_triples(xyz[0].shape[0]), self._label("verify"), False)
        ep = self.ep
        for p in (q for q in SERVERS if q != self.role):
            out = self.out_h.pop_peer(p)
            arr = np.stack([np.frombuffer(h, np.uint8) for _, h in out]) if out else np.zeros((0, 32), np.uint8)
            ep.send(p, "rep3/verify", arr)
        for p in (q for q in SERVERS if q != self.role):
            want = self.in_h.pop_peer(p)
            got = ep.recv_one(p, "rep3/verify", ArraySpec(np.uint8, (len(want), 32)))
            for i, (c, h) in enumerate(want):
                ep.require(got[i].tobytes() == h, c, p, "hash check failed")

    # ---- boolean circuits (bit extraction) ----------------------------------------------
    def eval_circuit(self, circ: Circuit, inputs: dict) -> Pair:
        """Evaluate on boolean shares (self.bits == 1); inputs name -> Pair (n, nbits)."""
        n = next(iter(inputs.values())).shape[0]
        wa = np.zeros((n, circ.n_wires), np.uint64)
        wb = np.zeros((n, circ.n_wires), np.uint64)
        for name, ws in circ.inputs.items():
            wa[:, ws], wb[:, ws] = inputs[name].a, inputs[name].b
        inv_a = np.uint64(1) if self.idx == 0 else np.uint64(0)
        inv_b = np.uint64(1) if self.idx == 2 else np.uint64(0)
        for lv in circ.levels():
            for (xa, xb, xo), (na, no) in lv["lin"]:
                wa[:, xo] = wa[:, xa] ^ wa[:, xb]
                wb[:, xo] = wb[:, xa] ^ wb[:, xb]
                wa[:, no] = wa[:, na] ^ inv_a
                wb[:, no] = wb[:, na] ^ inv_b
            a, b, o = lv["AND"]
            if len(o):
                x = Pair(wa[:, a], wb[:, a])
                y = Pair(wa[:, b], wb[:, b])
                z = self.mul(x, y)
                wa[:, o], wb[:, o] = z.a, z.b
        out = circ.outputs
        return Pair(wa[:, out], wb[:, out])

    def bitext(self, x: Pair, beng: "Rep3Engine") -> Pair:
        """msb(x) as a boolean sharing: components become boolean inputs locally."""
        l = self.bits
        i = self.idx
        comps = {i: x.a, (i + 1) % 3: x.b}
        inputs = {}
        for j in range(3):
            v = bits_of(comps[j], l).astype(np.uint64) if j in comps else None
            z = np.zeros((x.shape[0], l), np.uint64)
            a = v if j == i else z
            b = v if j == (i + 1) % 3 else z
            inputs[f"x{j}"] = Pair(a, b)
        return rss.apply(beng.eval_circuit(msb_add3_circuit(l), inputs), lambda a: a[:, 0])


def _cat(shares):
    return Pair(np.concatenate([s.a for s in shares]),
                  np.concatenate([s.b for s in shares]))


def owner_send(ep, keys, owner: str, label: str, x: np.ndarray, bits: int = 64) -> None:
    """Input owner side of ``Rep3Engine.input``."""
    k01, k02 = {"model_owner": ("M1", "M2"), "client": ("C1", "C2")}[owner]
    r = Ring(bits)
    x0 = keys.stream(k02, label).ring(x.shape, bits)
    x1 = keys.stream(k01, label).ring(x.shape, bits)
    x2 = r.sub(r.sub(r.reduce(np.asarray(x, np.uint64)), x0), x1)
    ep.send("p1", f"rep3/in/{label}", pack(x2, bits))
    ep.send("p2", f"rep3/in/{label}", pack(x2, bits))
