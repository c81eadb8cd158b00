"""Pure-MPC building blocks of the Falcon+ baseline over replicated sharing [Falcon, ABY3].

Falcon+ is STAMP's baseline [STAMP 5.1]: Falcon's three-party replicated-sharing
protocols with the non-linear layers computed without any trusted device.

* multiplication: local 3-out-of-3 product + one reshare (the same as STAMP's linear
  layers), several independent products batched into one round;
* truncation: Falcon/ABY3 probabilistic truncation, one round (semi-honest: the
  2-out-of-2 local shift of [ABY3 Pi_trunc1] re-shared; malicious: open x - r with a
  preprocessed (r, r >> f) pair [ABY3 Pi_trunc2]). Error budget: +-1 unit of 2^-f with
  probability about 1 - 2^(l_x + 1 - l) for |x| < 2^l_x, and a large error otherwise
  (inherent to probabilistic truncation in Z_2^32; docs/protocols/stamp.md);
* comparison (DReLU): the wrap of x = x_0 + x_1 + x_2 is resolved with a bit-sliced
  carry computation on boolean replicated shares (carry-save step, then a 5-level
  parallel-prefix carry chain) giving the sign bit, then the sign is injected into the
  arithmetic domain and multiplied: 10 rounds for ReLU, as Falcon's [STAMP Table 7];
* malicious: every product (arithmetic or AND) is verified with a triple as in
  ABY3/Falcon: rho and sigma are opened in the product's own round, the deltas of one
  protocol are opened together at its end (one extra round). The triples are generated
  by the three parties in the offline phase (``triples.py``: random replicated a, b from
  the pairwise PRF keys, semi-honest c = f(a, b), joint shuffle, cut-and-choose and
  bucket sacrifice [Furukawa et al. 2017 / Araki et al. 2017 as ABY3 and Falcon use it]).
  The malicious truncation's pairs (r, r >> f) are made by the parties too: r from l
  random shared bits, each injected into Z_2^l with verified products [ABY3 5.1.1 /
  Pi_trunc2] (``triples.TruncPairSource``).
"""

from __future__ import annotations

import math

import numpy as np

from secinfer.arith.fixed import FixedPointConfig
from secinfer.errors import ProtocolError
from secinfer.net.channel import ArraySpec
from secinfer.protocols.falcon import compare
from secinfer.protocols.falcon.compare import PcSource
from secinfer.protocols.falcon.triples import P, Request, TripleSource, TruncPairSource
from secinfer.protocols.stamp.engine import Engine, digest
from secinfer.sharing import replicated as rss
from secinfer.sharing.replicated import Pair

U64 = np.uint64
SMALL = ("p", "bit")        # kinds sent as one byte per element


DRELU_MODES = ("pc", "carry")


class FalconMPC:
    def __init__(self, eng: Engine, cfg: FixedPointConfig, dry_run: bool = False, drelu: str = "pc") -> None:
        """``dry_run``: no messages, no key use; records the triple requests (``requests``),
        truncation pairs and comparison preprocessing of a computation on zero shares of the
        right shapes (``triples.plan_requests``). ``drelu``: "pc" (default, Falcon's wrap
        and private compare over Z_p, ``compare.py``) or "carry" (the bit-sliced carry chain)."""
        if drelu not in DRELU_MODES:
            raise ProtocolError(f"falcon_drelu must be one of {DRELU_MODES}, not {drelu!r}")
        self.eng, self.cfg = eng, cfg
        self.dry = dry_run
        self.drelu_mode = drelu
        self.requests: list[Request] = []
        self.trunc_requests: list[tuple] = []
        self.pc_requests: list[int] = []
        self.ring = cfg.ring
        self.me = eng.me
        self.lane = U64((1 << cfg.ring_bits) - 1)
        self._pending: list[tuple[str, Pair]] = []
        self._n = 0
        self.stats = {"mult_rounds": 0, "products": 0}
        self.emul = lambda u, v: self.ring.mul(u, v)   # the element-wise ring product
        self.trip_tick = 0                             # message labels of triple generation
        self.triples = TripleSource(self)
        self.trunc_pairs = TruncPairSource(self)
        self.pc = PcSource(self)

    # ---- helpers ----------------------------------------------------------------------
    def _tag(self, what: str) -> str:
        self._n += 1
        return f"fal/{what}/{self._n}"

    def comp_pair(self, x: Pair, c: int, boolean: bool = False) -> Pair:
        """Component c of x alone as a sharing (the other components zero)."""
        z = np.zeros_like(x.a)
        return Pair(x.a if self.me == c else z, x.b if (self.me + 1) % 3 == c else z.copy())

    # ---- wire and openings: "a" ring elements, "b" AND words (l-bit lanes), "p" Z_p
    # elements, "bit" single bits; "p" and "bit" travel as one byte each -------------------
    def canon(self, kind: str, v: np.ndarray) -> np.ndarray:
        """The reduced form of a component as it travels (and is hashed): uint64 ring
        elements or words, one byte per Z_p element or bit."""
        if kind == "a":
            return self.ring.reduce(v)
        if kind == "b":
            return np.asarray(v, dtype=U64) & self.lane
        if kind == "p":
            return rss.mod_reduce(P, v).astype(np.uint8)
        return (np.asarray(v) & 1).astype(np.uint8)

    def send_vals(self, peer: int, tag: str, kind: str, v: np.ndarray) -> None:
        e = self.eng
        if kind in SMALL:
            e.ep.send(e.names[peer], tag, np.ascontiguousarray(self.canon(kind, v).reshape(-1)))
        else:
            e.send_ring(peer, tag, v)

    def recv_vals(self, peer: int, tag: str, kind: str, n: int) -> np.ndarray:
        e = self.eng
        if kind in SMALL:
            (v,) = e.ep.recv(e.names[peer], tag, ArraySpec(np.uint8, (int(n),)))
            if kind == "p" and np.any(v >= P):
                raise e.ep.abort("malformed-share", e.names[peer], "a Z_p share out of range")
            return v.astype(rss.mod_dtype(P) if kind == "p" else U64)
        (v,) = e.recv_ring(peer, tag, n)
        return v

    def _open_send(self, x: Pair, tag: str, kind: str = "a") -> None:
        e = self.eng
        self.send_vals(e.nxt, tag, kind, x.a)
        if e.malicious:
            e.ep.send(e.names[e.prv], tag + "/h", digest(self.canon(kind, x.b)))

    def _open_recv(self, x: Pair, tag: str, kind: str = "a") -> np.ndarray:
        e = self.eng
        miss = self.recv_vals(e.prv, tag, kind, x.a.size).reshape(x.a.shape)
        if e.malicious:
            (h,) = e.ep.recv(e.names[e.nxt], tag + "/h", ArraySpec(np.uint8, (32,)))
            if not np.array_equal(h, digest(self.canon(kind, miss))):
                raise e.ep.abort("reconstruct-consistency", None, "the two copies of a share disagree")
        return miss

    # ---- one round of independent products ----------------------------------------------
    def mult_round(self, items: list[tuple]) -> list[Pair]:
        """items: (kind, f, x, y) with kind "a" (ring, f bilinear), "b" (AND) or "p" (Z_p,
        element-wise, f None); one round."""
        return self.mult_open_round(items, ())[0]

    def mult_open_round(self, items: list[tuple], opens: tuple | list) -> tuple[list[Pair], list[np.ndarray]]:
        """``mult_round`` and, in the same round, the opening to everyone of ``opens``
        ((kind, Pair) pairs, sent first and received first). Returns (products, opened values).
        Opened values are not preceded by a delta check: open only uniformly masked values here."""
        e, ring = self.eng, self.ring
        if self.dry:
            return self._dry_round(items), [np.zeros(x.a.shape, dtype=U64) for _, x in opens]
        tags, zs, checks, z3s, trips = [], [], [], [], []
        for kind, f, x, y in items:
            if kind == "p" and not (f is None and x.a.shape == y.a.shape):
                raise ProtocolError("Z_p products are element-wise on equal shapes")
            if kind == "a":
                z3s.append(rss.bilinear_local(ring, f, x, y))
            elif kind == "b":
                z3s.append(rss.and_local(x, y) & self.lane)
            else:
                z3s.append(rss.mod_mul_local(P, x, y))
        if e.malicious:   # verified triples (offline, three-party generation: triples.py)
            trips = [self.triples.take(self._request(kind, f, x, y, z3.shape))
                     for (kind, f, x, y), z3 in zip(items, z3s)]
        open_tags = []
        for kind, x in opens:
            t = self._tag("open")
            self._open_send(x, t, kind)
            open_tags.append(t)
        for (kind, f, x, y), z3 in zip(items, z3s):
            if kind == "a":
                z = ring.add(z3, e.zero3(z3.shape))
            elif kind == "b":
                z = z3 ^ (e.zero3_xor(z3.shape) & self.lane)
            else:
                z = rss.mod_reduce(P, z3 + e.zero3_mod(z3.shape, P))
            tag = self._tag("m")
            self.send_vals(e.prv, tag, kind, z)
            tags.append(tag)
            zs.append(z)
        if e.malicious:   # open rho = x - a, sigma = y - b in the same round [ABY3 5.3]
            for (kind, f, x, y), (a, b, c) in zip(items, trips):
                rho, sig = self._diff(kind, x, a), self._diff(kind, y, b)
                tr, ts = self._tag("rho"), self._tag("sig")
                self._open_send(rho, tr, kind)
                self._open_send(sig, ts, kind)
                checks.append((kind, f, (a, b, c), rho, sig, tr, ts))
        opened = [self._reveal(kind, x, self._open_recv(x, t, kind)) for (kind, x), t in zip(opens, open_tags)]
        outs = []
        for (kind, *_), tag, z in zip(items, tags, zs):
            zn = self.recv_vals(e.nxt, tag, kind, z.size)
            outs.append(Pair(z, zn.reshape(z.shape)))
        for (kind, f, (a, b, c), rho, sig, tr, ts), out in zip(checks, outs):
            r = self._reveal(kind, rho, self._open_recv(rho, tr, kind))
            s = self._reveal(kind, sig, self._open_recv(sig, ts, kind))
            if kind == "a":
                d = rss.sub(ring, out, c)
                d = rss.sub(ring, d, Pair(ring.reduce(f(r, b.a)), ring.reduce(f(r, b.b))))
                d = rss.sub(ring, d, Pair(ring.reduce(f(a.a, s)), ring.reduce(f(a.b, s))))
                d = rss.add_public(ring, self.me, d, ring.neg(ring.reduce(f(r, s))))
            elif kind == "b":
                d = rss.xor(out, c)
                d = rss.xor(d, Pair(r & b.a, r & b.b))
                d = rss.xor(d, Pair(a.a & s, a.b & s))
                d = rss.xor_public(self.me, d, r & s)
            else:
                d = rss.mod_sub(P, out, c)
                d = rss.mod_sub(P, d, rss.mod_mul_public(P, b, r))
                d = rss.mod_sub(P, d, rss.mod_mul_public(P, a, s))
                d = rss.mod_add_public(P, self.me, d, (U64(P) - r * s % U64(P)) % U64(P))
            self._pending.append((kind, d))
        if items:
            self.stats["mult_rounds"] += 1
            self.stats["products"] += len(items)
        return outs, opened

    def _diff(self, kind: str, x: Pair, a: Pair) -> Pair:
        if kind == "a":
            return rss.sub(self.ring, x, a)
        if kind == "b":
            return rss.xor(x, a)
        return rss.mod_sub(P, x, a)

    def _reveal(self, kind: str, x: Pair, miss: np.ndarray) -> np.ndarray:
        if kind == "a":
            return self.ring.reduce(x.a + x.b + miss)
        if kind == "p":
            return rss.mod_reduce(P, rss.mod_reduce(P, x.a + x.b) + miss)
        if kind == "bit":
            return (x.a ^ x.b ^ miss) & U64(1)
        return (x.a ^ x.b ^ miss) & self.lane

    def open_many(self, opens: list[tuple[str, Pair]]) -> list[np.ndarray]:
        """Open several sharings ((kind, Pair)) to everyone in one round, after the pending
        delta checks (malicious: nothing is revealed before every product is verified)."""
        if self.dry:
            return [np.zeros(x.a.shape, dtype=U64) for _, x in opens]
        self.flush()
        return self.mult_open_round([], opens)[1]

    def _request(self, kind: str, f, x: Pair, y: Pair, zs: tuple) -> Request:
        ew = x.a.shape == y.a.shape == tuple(zs) and (kind in ("b", "p") or f is self.emul)
        return Request(kind, ew, None if ew else f, tuple(x.a.shape), tuple(y.a.shape), tuple(zs))

    def _dry_round(self, items: list[tuple]) -> list[Pair]:
        """Dry run: record each product's triple request, return zero shares of its shape."""
        outs = []
        for kind, f, x, y in items:
            if kind in ("b", "p") or f is self.emul:
                zs = np.broadcast_shapes(x.a.shape, y.a.shape)
            else:
                zs = np.shape(f(x.a, y.a))
            self.requests.append(self._request(kind, f, x, y, zs))
            outs.append(rss.zeros(zs))
        return outs

    def flush(self) -> None:
        """Check that every pending delta is zero, in one round of 32-byte messages (as
        STAMP's ``Engine.flush_checks`` [ABY3 5.3: compare by hash]): party p sends the hash
        of its second component to the party that lacks it, and compares the hash it
        receives with -(d_p + d_{p+1}) (ring, Z_p) or d_p ^ d_{p+1} (boolean); any non-zero
        delta makes an honest party abort."""
        if not self._pending or self.dry:
            return
        e, ring = self.eng, self.ring
        mine, want = [], []
        for kind, d in self._pending:
            da, db = d.a.reshape(-1), d.b.reshape(-1)
            if kind == "b":
                mine.append(db & self.lane)
                want.append((da ^ db) & self.lane)
            elif kind == "p":
                mine.append(db % U64(P))
                want.append((U64(2 * P) - (da + db) % U64(P)) % U64(P))
            else:
                mine.append(ring.reduce(db))
                want.append(ring.neg(ring.add(da, db)))
        self._pending = []
        tag = self._tag("delta")
        e.ep.send(e.names[e.prv], tag, digest(np.concatenate(mine).astype(U64)))
        (h,) = e.ep.recv(e.names[e.nxt], tag, ArraySpec(np.uint8, (32,)))
        if not np.array_equal(h, digest(np.concatenate(want).astype(U64))):
            raise e.ep.abort("multiplication-check", None, "a product does not match its verification triple")

    # ---- truncation ---------------------------------------------------------------------
    def trunc(self, x: Pair) -> Pair:
        """Probabilistic truncation by f, one round (see the module docstring)."""
        e, ring, cfg = self.eng, self.ring, self.cfg
        f = cfg.frac_bits
        me = self.me
        if self.dry:
            self.trunc_requests.append(tuple(x.a.shape))
            return x
        if e.malicious:     # [ABY3 Pi_trunc2]: open x - r, add r >> f (pair from triples.py)
            r, rt = self.trunc_pairs.take(tuple(x.a.shape))
            d = rss.sub(ring, x, r)
            tag = self._tag("trunc")
            self._open_send(d, tag)
            dv = ring.reduce(d.a + d.b + self._open_recv(d, tag))
            return rss.add_public(ring, me, rt, cfg.trunc(dv))
        # [ABY3 Pi_trunc1]: t0 = x_0 >> f (parties 0, 2), t1 = (x_1 + x_2) >> f (party 1),
        # re-shared as (t0, r, t1 - r) with r from the key of parties 0 and 1.
        shape = x.a.shape
        r = e.random_pair(shape)             # component 1 is known to parties 0 and 1
        tag = self._tag("trunc")
        if me == 1:
            t1 = ring.arshift(ring.add(x.a, x.b), f)
            c2 = ring.sub(t1, r.a)           # party 1's r.a is component 1
            e.send_ring(2, tag, c2)
            return Pair(r.a, c2)
        if me == 0:
            return Pair(ring.arshift(x.a, f), r.b)   # components 0 and 1
        (c2,) = e.recv_ring(1, tag, x.a.size)
        return Pair(c2.reshape(shape), ring.arshift(x.b, f))   # components 2 and 0

    # ---- comparison ---------------------------------------------------------------------
    def _shl(self, x: Pair, k: int) -> Pair:
        return Pair((x.a << U64(k)) & self.lane, (x.b << U64(k)) & self.lane)

    def drelu(self, x: Pair) -> Pair:
        """Boolean sharing (bit 0) of [x >= 0]: Falcon's wrap and private compare over Z_p
        (``compare.sign``, 7 rounds in Z_2^32), or the carry chain (option "carry")."""
        if self.drelu_mode == "carry":
            return self._drelu_carry(x)
        res = compare.sign(self, x)
        return rss.xor_public(self.me, Pair(res.g.a & U64(1), res.g.b & U64(1)), res.e)

    def _select(self, e: np.ndarray, v: Pair, vg: Pair) -> Pair:
        """v [x >= 0] from e, v and v g when [x >= 0] = e xor g: e v + (1 - 2e) v g (local)."""
        ring = self.ring
        return rss.add(ring, rss.mul_public(ring, v, e), rss.mul_public(ring, vg, ring.reduce(U64(1) - U64(2) * e)))

    def sign_bits(self, x: Pair) -> np.ndarray:
        """[x >= 0] opened to all three parties (Falcon's Pow opens its comparison bits)."""
        if self.drelu_mode == "carry":
            return self.open_bits(self.drelu(x))
        return compare.sign(self, x, open_bit=True).bit

    def _drelu_carry(self, x: Pair) -> Pair:
        """Boolean sharing (bit 0) of [x >= 0] by a bit-sliced carry chain: the wrap of
        x_0 + x_1 + x_2 by a carry-save step and a parallel-prefix carry chain, 7 AND rounds."""
        bits = self.cfg.ring_bits
        A, B, C = (self.comp_pair(x, c) for c in range(3))
        s = rss.xor(rss.xor(A, B), C)
        (mj,) = self.mult_round([("b", None, rss.xor(A, C), rss.xor(B, C))])
        carry = self._shl(rss.xor(mj, C), 1)
        P0 = rss.xor(s, carry)
        (G,) = self.mult_round([("b", None, s, carry)])
        Pk = P0
        k = 1
        while k < bits - 1:
            items = [("b", None, Pk, self._shl(G, k))]
            last = 2 * k >= bits - 1
            if not last:
                items.append(("b", None, Pk, self._shl(Pk, k)))
            got = self.mult_round(items)
            G = rss.xor(G, got[0])
            if not last:
                Pk = got[1]
            k *= 2
        sh = U64(bits - 1)
        msb = Pair(((P0.a >> sh) ^ (G.a >> U64(bits - 2))) & U64(1), ((P0.b >> sh) ^ (G.b >> U64(bits - 2))) & U64(1))
        return rss.xor_public(self.me, msb, np.ones_like(msb.a))

    def bit_to_arith(self, b: Pair) -> Pair:
        """Boolean bit -> arithmetic sharing, two product rounds (b0 xor b1, then xor b2)."""
        ring = self.ring
        a0, a1, a2 = (self.comp_pair(b, c) for c in range(3))
        mul = self.emul
        (t01,) = self.mult_round([("a", mul, a0, a1)])
        t = rss.sub(ring, rss.add(ring, a0, a1), rss.mul_public(ring, t01, U64(2)))
        (v,) = self.mult_round([("a", mul, t, a2)])
        return rss.sub(ring, rss.add(ring, t, a2), rss.mul_public(ring, v, U64(2)))

    # ---- Falcon's Pow and division ----------------------------------------------------------
    def open_bits(self, b: Pair) -> np.ndarray:
        """Open a boolean sharing (bit 0) to all three parties, after the pending checks
        (malicious: the deltas are opened first, so nothing is revealed unchecked)."""
        if self.dry:
            return np.zeros(b.a.shape, dtype=np.uint64)
        (v,) = self.open_many([("b", b)])
        return v & U64(1)

    def pow2(self, b: Pair) -> np.ndarray:
        """Falcon's Pow [Falcon Sec. 3 'Pow'; falcon-public funcPow]: per element, the public
        alpha with 2^alpha <= b < 2^(alpha+1) (b > 0, raw ring value), by a binary search over
        the ceil(log2 l) bits of alpha (5 in Z_2^32): step j compares b with 2^(2^j + alpha)
        by a DReLU and *opens* the bit, as Falcon does -- alpha is public (the leakage of
        Falcon's protocol: the divisor's order of magnitude). 5 x (7 + 1) = 40 rounds."""
        ring, bits = self.ring, self.cfg.ring_bits
        alpha = np.zeros(b.a.shape, dtype=np.int64)
        for j in range(int(math.ceil(math.log2(bits))) - 1, -1, -1):
            t = alpha + (1 << j)
            ok = t < bits - 1           # 2^t >= 2^(l-1) exceeds every positive value: known 0
            thr = np.where(ok, np.left_shift(U64(1), np.clip(t, 0, bits - 2).astype(np.uint64)), U64(0))
            c = self.sign_bits(rss.add_public(ring, self.me, b, ring.neg(ring.reduce(thr))))
            alpha = np.where(ok & (c == 1), t, alpha)
        return alpha

    def _trunc_many(self, xs: list[Pair]) -> list[Pair]:
        """Several truncations in one round (one message)."""
        flat = Pair(np.concatenate([x.a.reshape(-1) for x in xs]), np.concatenate([x.b.reshape(-1) for x in xs]))
        t = self.trunc(flat)
        out, off = [], 0
        for x in xs:
            m = x.a.size
            out.append(rss.apply(t, lambda v: v[off:off + m].reshape(x.a.shape)))
            off += m
        return out

    def reciprocal(self, b: Pair) -> Pair:
        """1/b for b > 0 by Falcon's division [Falcon 'Division'; falcon-public funcDivision]:
        alpha = Pow(b) (public); b normalised to bn = b / 2^(alpha+1) in [0.5, 1) (a public
        power-of-two scaling, one truncation); initial approximation w0 = 2.9142 - 2 bn;
        e0 = 1 - bn w0; 1/bn ~ w0 (1 + e0)(1 + e0^2) (Falcon's PRECISE_DIVISION,
        relative error e0^4 <= 0.0858^4 = 5.4e-5); scaled back by 2^(f-1-alpha).

        Falcon computes at precision alpha + 1 with one alpha for the whole vector (its
        code keeps the first element's); here alpha is per element and the arithmetic
        stays at f fractional bits (the same steps; no overflow in Z_2^32).
        Domain: b in [2^-f, 2^(f-1)) (alpha <= 2f - 1); larger divisors are not
        normalised and the result is wrong. Rounds: Pow 40 + 1 + 2 + 2 + 2 + 1 = 48."""
        ring, cfg, me = self.ring, self.cfg, self.me
        f = cfg.frac_bits
        alpha = self.pow2(b)
        up = np.clip(2 * f - 1 - alpha, 0, 2 * f).astype(np.uint64)      # bn = trunc(b * 2^(2f-1-alpha))
        (bn,) = self._trunc_many([rss.mul_public(ring, b, np.left_shift(U64(1), up))])
        enc = lambda v: ring.reduce(np.asarray(cfg.encode(v), dtype=np.uint64))  # noqa: E731
        w0 = rss.add_public(ring, me, rss.neg(ring, rss.mul_public(ring, bn, U64(2))), enc(2.9142))
        (xw0,) = self.mult_round([("a", self.emul, bn, w0)])
        (xw0,) = self._trunc_many([xw0])
        e0 = rss.add_public(ring, me, rss.neg(ring, xw0), enc(1.0))
        one_e0 = rss.add_public(ring, me, e0, enc(1.0))
        e1, t = self.mult_round([("a", self.emul, e0, e0), ("a", self.emul, w0, one_e0)])
        e1, t = self._trunc_many([e1, t])
        (inv,) = self.mult_round([("a", self.emul, t, rss.add_public(ring, me, e1, enc(1.0)))])
        (inv,) = self._trunc_many([inv])                                 # ~ 1/bn in (1, 2]
        s = (f - 1) - alpha                                              # 1/b = (1/bn) 2^(f-1-alpha)
        down = np.clip(f + np.minimum(s, 0), 0, f).astype(np.uint64)
        (r,) = self._trunc_many([rss.mul_public(ring, inv, np.left_shift(U64(1), down))])
        return rss.mul_public(ring, r, np.left_shift(U64(1), np.maximum(s, 0).astype(np.uint64)))

    def relu(self, x: Pair) -> Pair:
        """ReLU(x) = x [x >= 0]. "pc": the product x g runs in the comparison's first round and
        the bit is applied locally (7 rounds in Z_2^32); "carry": the bit injected into Z_2^l
        (2 rounds) and one product: 10 rounds."""
        if self.drelu_mode == "carry":
            d = self.bit_to_arith(self.drelu(x))
            (y,) = self.mult_round([("a", self.emul, x, d)])
            return y
        res = compare.sign(self, x, lambda g: [("a", self.emul, x, g)])
        return self._select(res.e, x, res.outs[0])

    def maximum(self, a: Pair, b: Pair) -> Pair:
        return rss.add(self.ring, b, self.relu(rss.sub(self.ring, a, b)))

    def max_reduce(self, x: Pair, axis: int, sequential: bool = True, track_index: bool = False) -> Pair:
        """Maximum along ``axis``. ``sequential``: Falcon's running maximum [falcon-public
        funcMaxpool]: max <- a_i + ReLU(max - a_i) over the k elements, k - 1 dependent
        comparisons (a ReLU each: 7 rounds with "pc", 10 with "carry"). ``track_index``: as
        Falcon's funcMaxpool, also keep the one-hot argmax (its ``maxPrime``, k entries per
        output) updated after every comparison by the comparison bit -- Table 7's
        12(w^2 - 1) rounds count Falcon's two-round select for it after the ReLU; here the
        update is one more product in the ReLU's product round (bytes, no extra round).
        Otherwise a tree (ceil(log2 k) comparison layers)."""
        x = rss.apply(x, lambda v: np.moveaxis(v, axis, -1))
        ring = self.ring
        if sequential:
            k = x.a.shape[-1]
            m = rss.apply(x, lambda v: np.ascontiguousarray(v[..., 0]))
            eye = np.eye(k, dtype=np.uint64)
            idx = rss.public_pair(ring, self.me, np.broadcast_to(eye[0], x.a.shape).copy()) if track_index else None
            spread = lambda v: np.broadcast_to(v[..., None], x.a.shape).copy()  # noqa: E731
            for j in range(1, k):
                xj = rss.apply(x, lambda v: np.ascontiguousarray(v[..., j]))
                diff = rss.sub(ring, m, xj)
                ej = rss.public_pair(ring, self.me, np.broadcast_to(eye[j], x.a.shape).copy()) if track_index else None
                if self.drelu_mode == "carry":
                    d = self.bit_to_arith(self.drelu(diff))          # [max >= a_j]
                    items = [("a", self.emul, diff, d)]
                    if track_index:
                        items.append(("a", self.emul, rss.apply(d, spread), rss.sub(ring, idx, ej)))
                    got = self.mult_round(items)
                else:                                                # products with the mask bit g
                    di = rss.sub(ring, idx, ej) if track_index else None

                    def prods(g, diff=diff, di=di):
                        items = [("a", self.emul, diff, g)]
                        if track_index:
                            items.append(("a", self.emul, rss.apply(g, spread), di))
                        return items
                    res = compare.sign(self, diff, prods)
                    got = [self._select(res.e, diff, res.outs[0])]
                    if track_index:
                        got.append(self._select(spread(res.e), di, res.outs[1]))
                m = rss.add(ring, xj, got[0])
                if track_index:
                    idx = rss.add(ring, ej, got[1])
            return m
        while x.a.shape[-1] > 1:
            k = x.a.shape[-1]
            h = k // 2
            lo = rss.apply(x, lambda v: v[..., :h])
            hi = rss.apply(x, lambda v: v[..., h:2 * h])
            m = self.maximum(lo, hi)
            if k % 2:
                m = rss.apply(Pair(np.concatenate([m.a, x.a[..., -1:]], -1), np.concatenate([m.b, x.b[..., -1:]], -1)),
                              lambda v: v)
            x = m
        return rss.apply(x, lambda v: v[..., 0])
