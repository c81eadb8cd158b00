"""Falcon's DReLU: the wrap of a masked opening, resolved by a private compare over Z_p.

[Falcon Alg. 1 (private compare), Alg. 2 (wrap), Alg. 3 (ReLU'); after SecureNN's private
compare]. Falcon takes the sign of x in Z_2^l from the wrap-around of a masked value: mask
x with a random r whose bits are shared in the small field Z_p (p = 67 > l + 2), open the
masked value, and decide the one comparison between the public opened value and the
shared mask with a private compare in Z_p. This module does the same with the two-term
wrap (the carry of x' + r' into bit l - 1) instead of Falcon's three-component wrap of 2x
(the derivation and the difference: docs/protocols/stamp.md, "Falcon's DReLU").

Two modes share the compare (``FalconMPC.drelu_mode``): "falcon" (the default, Falcon's
round structure, ``drelu_falcon``) and "pc" (``sign``: two of Falcon's steps moved out of
the online rounds, a stronger baseline than the paper's). Online "pc", x in Z_2^l,
n = l - 1, per element:

1. Open c = x + r, r = r' + 2^n rho (r' < 2^n, bits r'_0..r'_{n-1} shared in Z_p; rho a
   random bit). With x' = x mod 2^n and c' = c mod 2^n, the carry of x' + r' into bit n is
   eta = [c' < r'], so msb(x) = msb(c) xor rho xor eta.
2. eta by the private compare of the public X = 2c' + 1 with the shared Y = 2r' (l bits
   each, Y_0 = 0) [Falcon Alg. 1]: with a random bit beta and s = (-1)^beta (= 1 - 2 beta)
       term_i = s (X_i - Y_i) + 1 + sum_{k > i} (X_k xor Y_k),   i = 0..l-1
   X is odd and Y even, so they differ; term_i is 0 exactly at the first differing bit
   from the top if there Y_i = 1 (beta = 0: Y > X, i.e. r' > c') or X_i = 1 (beta = 1: X > Y,
   i.e. c' >= r'), and every term lies in [0, l + 1] (no false zero mod 67 for l <= 64).
   The top term is multiplied by a random m' in Z_p^*, the l terms are multiplied
   together (pairwise, ceil(log2 l) rounds) and the product d is opened:
   beta' = [d = 0] = eta xor beta; d is 0 or uniform in Z_p^*.
3. With g = rho xor beta (preprocessed as a bit of Z_2^l), [x >= 0] = e xor g with the
   public e = 1 xor msb(c) xor beta'. A product with the bit (ReLU: x [x >= 0]) is
   e v + (1 - 2e)(v g): the product v g runs in step 1's round.

Rounds: 1 (open c, products with g) + ceil(log2 l) (the Z_p products) + 1 (open d); the
malicious mode checks every pending product (one round of hashes) before opening d.

Online "falcon" (``drelu_falcon``; steps 1 and the tree as above, but as Falcon orders them):

1. Open c = x + r (round 1).
2. The products with beta online [Falcon Alg. 1 step 2: u_i = (-1)^beta (x_i - r_i)], one
   round of l - 1 Z_p products: u_i = s (X_i - Y_i) for i = 1..n-1 and m s (X_n - Y_n)
   (s = 1 - 2 beta, m s = m - 2 m beta from the preprocessed m, m beta: the random
   multiplier folded into the top term); u_0 = s is local (X_0 = 1, Y_0 = 0). Then
   term_i = u_i + 1 + sum_{k > i} (X_k xor Y_k) (i < n) and m term_n = m s (X_n - Y_n) + m.
3. The product tree (ceil(log2 l) rounds) and open d: [x >= 0] = e xor g as above, with g
   = rho xor beta kept as a boolean sharing (its components are the random bits'); the
   DReLU returns that boolean sharing: 3 + ceil(log2 l) rounds (8 in Z_2^32).
4. (``FalconMPC.select``, ReLU and the running maximum) Falcon's select: open b xor c for a
   fresh preprocessed random bit c shared in Z_2 and Z_2^l, b = f + (1 - 2f) c in Z_2^l,
   one product: ReLU 10 rounds in Z_2^32 [STAMP Table 7: 10]. Pow opens b in a round of
   its own (9 per step). Malicious: the check before d as in "pc", and the select's
   product is checked before anything that depends on it is opened (ReLU: 12 rounds).
Preprocessing "falcon": as "pc" without t and m r'_{n-1} (made online) and without g's
injection into Z_2^l; instead ``SelMaterial``: one random bit per select, injected into
Z_2^l by two products (``generate_select``).

Preprocessing (``PcSource``, offline, made by the three parties, no dealer), per element:
r (Z_2^l), the n bits of r' in Z_p, t_k = beta r'_k, beta (Z_p), m, m r'_{n-1}, m beta
(m uniform in Z_p^*; the multiplier is m' = m s: m' term_{l-1} = m (X_{l-1} + 1) - m r'_{n-1}
- 2 m beta) and g (Z_2^l). Random bits: boolean replicated bits from the pairwise PRF keys
(each party lacks one component), injected into Z_p and Z_2^l by two products each;
m = u_0 u_1 u_2 from components u_j in Z_p^* (two products); three more products for t,
m r'_{n-1}, m beta. Every product is ``FalconMPC.mult_round``'s: malicious, verified with
a triple made by the parties (``triples.TripleSource``) and checked before use.
"""

from __future__ import annotations

import time
from typing import Callable, NamedTuple

import numpy as np

from secinfer.errors import ProtocolError
from secinfer.protocols.falcon.triples import P, TripleSource
from secinfer.sharing import replicated as rss
from secinfer.sharing.replicated import Pair

U64 = np.uint64
PC_CHUNK = 1 << 13        # elements per preprocessing batch (memory bound)
PC_UPFRONT_MAX = 1 << 22  # comparisons prepared before the online phase (~0.7 GB per party);
                          # beyond, each comparison's batch is made just before it (offline)


class PcMaterial(NamedTuple):
    """Preprocessing of N comparisons (flat): ring Pairs r, g; Z_p Pairs rb, tb (N x n),
    beta, m, mr, mb (N). Mode "falcon": g is the boolean sharing of rho xor beta (not
    injected into Z_2^l), tb and mr are empty (N x 0): the beta products are made online."""
    r: Pair
    g: Pair
    rb: Pair
    tb: Pair
    beta: Pair
    m: Pair
    mr: Pair
    mb: Pair

    def take(self, sl: slice) -> "PcMaterial":
        return _slice(self, sl)


class SelMaterial(NamedTuple):
    """Masks of N selects (mode "falcon", Falcon's select): a random bit c as a sharing in
    Z_2^l; its components' low bits are its boolean sharing."""
    c: Pair


def _slice(mat, sl: slice):
    return type(mat)(*(Pair(v.a[sl], v.b[sl]) for v in mat))


def _cat(parts: list):
    if len(parts) == 1:
        return parts[0]
    cls = type(parts[0])
    return cls(*(Pair(np.concatenate([p[k].a for p in parts]), np.concatenate([p[k].b for p in parts]))
                 for k in range(len(cls._fields))))


def _zero_material(n: int, bits: int) -> PcMaterial:
    z = rss.zeros
    return PcMaterial(z((n,)), z((n,)), z((n, bits - 1)), z((n, bits - 1)), z((n,)), z((n,)), z((n,)), z((n,)))


def _random_bits(mpc, shape) -> Pair:
    """Boolean replicated random bits from the pairwise PRF keys (each party lacks one
    component); zeros on a dry ``FalconMPC``."""
    if mpc.dry:
        return rss.zeros(shape)
    rb = mpc.eng.random_pair(shape)
    return Pair(rb.a & U64(1), rb.b & U64(1))


def generate(mpc, n_el: int, mode: str = "pc") -> PcMaterial:
    """The preprocessing of ``n_el`` comparisons (three product rounds; see the module
    docstring). ``mode`` "falcon": no t = beta r' and no m r'_{n-1} (made online), g not
    injected into Z_2^l (the select has masks of its own). On a dry ``FalconMPC`` it only
    records the products' triple requests."""
    ring, l = mpc.ring, mpc.cfg.ring_bits
    n = l - 1
    faithful = mode == "falcon"
    bits = _random_bits(mpc, (n_el, n + 2))                 # columns: r'_0..r'_{n-1}, beta, g
    if mpc.dry:
        u = rss.zeros((n_el,))
    else:
        u = mpc.eng.random_pair_mod((n_el,), P - 1)         # components in Z_p^*: 1..p-1
        u = Pair(u.a + U64(1), u.b + U64(1))
    col = lambda v, idx: Pair(np.ascontiguousarray(v.a[:, idx]), np.ascontiguousarray(v.b[:, idx]))  # noqa: E731
    in_p = col(bits, slice(0, n + 1))                                   # r' bits, beta -> Z_p
    in_r = col(bits, slice(0, n) if faithful else np.r_[0:n, n + 1])    # r' bits (, g) -> Z_2^l
    bp = [mpc.comp_pair(in_p, j) for j in range(3)]
    br = [mpc.comp_pair(in_r, j) for j in range(3)]
    uc = [mpc.comp_pair(u, j) for j in range(3)]
    mul = mpc.emul
    # bit injection [ABY3 5.3, as ``FalconMPC.bit_to_arith``]: (b0 xor b1) xor b2, both rings
    p01, r01, u01 = mpc.mult_round([("p", None, bp[0], bp[1]), ("a", mul, br[0], br[1]), ("p", None, uc[0], uc[1])])
    xp = rss.mod_sub(P, rss.mod_add(P, bp[0], bp[1]), rss.mod_mul_public(P, p01, 2))
    xr = rss.sub(ring, rss.add(ring, br[0], br[1]), rss.mul_public(ring, r01, U64(2)))
    p2, r2, m = mpc.mult_round([("p", None, xp, bp[2]), ("a", mul, xr, br[2]), ("p", None, u01, uc[2])])
    bit_p = rss.mod_sub(P, rss.mod_add(P, xp, bp[2]), rss.mod_mul_public(P, p2, 2))
    bit_r = rss.sub(ring, rss.add(ring, xr, br[2]), rss.mul_public(ring, r2, U64(2)))
    r_p, beta = col(bit_p, slice(0, n)), col(bit_p, n)
    if faithful:
        r_a, g = bit_r, col(bits, n + 1)                     # g: boolean components as they are
        (mb,) = mpc.mult_round([("p", None, m, beta)])
        tb = mr = rss.zeros((n_el, 0))
    else:
        r_a, g = col(bit_r, slice(0, n)), col(bit_r, n)
        beta_n = rss.apply(beta, lambda v: np.repeat(v[:, None], n, axis=1))
        tb, mr, mb = mpc.mult_round([("p", None, beta_n, r_p), ("p", None, m, col(r_p, n - 1)), ("p", None, m, beta)])
    w = np.array([1 << k for k in range(n)], dtype=np.uint64)
    r_low = rss.apply(r_a, lambda v: ring.reduce(np.sum(ring.mul(v, w[None, :]), axis=1, dtype=np.uint64)))
    # the top bit rho = g xor beta: 2^n (g + beta) mod 2^l needs only the parities, so the
    # boolean components of beta (and, "falcon", of g) serve as they are
    top = rss.add(ring, g, col(bits, n))
    r = rss.add(ring, r_low, rss.mul_public(ring, top, U64(1 << n)))
    return PcMaterial(r, g, r_p, tb, beta, m, mr, mb)


def generate_select(mpc, n_el: int) -> SelMaterial:
    """Masks of ``n_el`` selects: random bits injected into Z_2^l (two product rounds, as
    ``FalconMPC.bit_to_arith``) [Falcon's select preprocessing: a random bit shared in Z_2
    and Z_2^l -- as we recall Falcon; the low bits of the Z_2^l components are its Z_2
    sharing]."""
    ring = mpc.ring
    bits = _random_bits(mpc, (n_el,))
    br = [mpc.comp_pair(bits, j) for j in range(3)]
    (t01,) = mpc.mult_round([("a", mpc.emul, br[0], br[1])])
    t = rss.sub(ring, rss.add(ring, br[0], br[1]), rss.mul_public(ring, t01, U64(2)))
    (v,) = mpc.mult_round([("a", mpc.emul, t, br[2])])
    return SelMaterial(rss.sub(ring, rss.add(ring, t, br[2]), rss.mul_public(ring, v, U64(2))))


def _compact(mat: PcMaterial) -> PcMaterial:
    small = lambda v: Pair(v.a.astype(np.uint8), v.b.astype(np.uint8))  # noqa: E731
    return PcMaterial(mat.r, mat.g, *(small(v) for v in mat[2:]))


class PcSource:
    """Falcon's comparison preprocessing (and, mode "falcon", the selects' masks), generated
    by the parties (offline) in batches of ``PC_CHUNK`` and handed out in order. Malicious:
    each batch's products are verified with triples of their own (``TripleSource``) and
    checked before the batch is used."""

    def __init__(self, mpc) -> None:
        self.mpc = mpc
        self.buf: list[PcMaterial] = []          # comparisons
        self.sel_buf: list[SelMaterial] = []     # select masks
        self.stats = {"pc_elements": 0, "pc_batches": 0, "sel_elements": 0, "pc_just_in_time_cpu_s": 0.0}

    def _queue(self, kind: str) -> list:
        return self.buf if kind == "pc" else self.sel_buf

    def available(self, kind: str = "pc") -> int:
        return sum(m[0].a.shape[0] for m in self._queue(kind))

    def left(self) -> int:
        """Prepared items not used (comparisons and select masks)."""
        return self.available("pc") + self.available("sel")

    def take(self, n_el: int) -> PcMaterial:
        return self._take("pc", n_el)

    def take_select(self, n_el: int) -> SelMaterial:
        return self._take("sel", n_el)

    def _take(self, kind: str, n_el: int):
        mpc = self.mpc
        if mpc.dry or n_el == 0:
            if n_el:
                (mpc.pc_requests if kind == "pc" else mpc.sel_requests).append(n_el)
            return _zero_material(n_el, mpc.cfg.ring_bits) if kind == "pc" else SelMaterial(rss.zeros((n_el,)))
        short = n_el - self.available(kind)
        if short > 0:     # not prepared: made now, metered offline, its CPU time counted apart
            t0 = time.thread_time()
            with mpc.eng.ep.phase("offline"):
                self._prepare(kind, [short])
            self.stats["pc_just_in_time_cpu_s"] += time.thread_time() - t0
        q = self._queue(kind)
        parts, need = [], n_el
        while need:
            head = q[0]
            k = head[0].a.shape[0]
            if k <= need:
                parts.append(q.pop(0))
                need -= k
            else:
                parts.append(_slice(head, slice(0, need)))
                q[0] = _slice(head, slice(need, k))
                need = 0
        return _cat(parts)

    def prepare(self, sizes: list[int], selects: list[int] = ()) -> None:
        """Make the comparisons' (``sizes``) and the selects' (``selects``) preprocessing."""
        self._prepare("pc", sizes)
        self._prepare("sel", selects)

    def _prepare(self, kind: str, sizes) -> None:
        total = int(sum(sizes))
        while total > 0:
            k = min(total, PC_CHUNK)
            self._queue(kind).append(self._batch(kind, k))
            total -= k

    def _batch(self, kind: str, k: int):
        mpc = self.mpc
        mal = mpc.eng.malicious
        mode = mpc.drelu_mode
        gen = (lambda m_, k_: generate(m_, k_, mode)) if kind == "pc" else generate_select
        saved_src, saved_stats, saved_pending = mpc.triples, dict(mpc.stats), mpc._pending
        mpc._pending = []
        stats: dict = {}
        try:
            if mal:                                   # this batch's own verified triples
                mpc.triples = TripleSource(mpc)
                dry = type(mpc)(mpc.eng, mpc.cfg, dry_run=True, drelu=mode)
                gen(dry, k)
                mpc.triples.prepare(dry.requests)
            mat = gen(mpc, k)
            mpc.flush()                               # every product verified before use
            if mal and mpc.triples.queue:
                raise ProtocolError("Falcon+ comparison preprocessing left triples unused")
            stats = dict(mpc.triples.stats) if mal else {}
        finally:
            mpc.triples, mpc.stats, mpc._pending = saved_src, saved_stats, saved_pending
        for key, v in stats.items():
            saved_src.stats[key] += v
        if kind == "sel":
            self.stats["sel_elements"] += k
            return mat
        self.stats["pc_elements"] += k
        self.stats["pc_batches"] += 1
        return _compact(mat)


class SignResult(NamedTuple):
    e: np.ndarray          # public bit: [x >= 0] = e xor g
    g: Pair                # the preprocessed mask bit, arithmetic in Z_2^l
    outs: list             # the products requested for step 1's round
    bit: np.ndarray | None  # [x >= 0] in the clear (``open_bit``)


def _public_bits(c: np.ndarray, l: int) -> np.ndarray:
    """The bits X_0..X_{l-1} of X = 2c' + 1 < 2^l (c' = c mod 2^(l-1)), int16, N x l."""
    n_el = c.size
    xv = ((c & U64((1 << (l - 1)) - 1)) << U64(1)) | U64(1)
    return np.unpackbits(xv.astype("<u8").view(np.uint8).reshape(n_el, 8), axis=1,
                         bitorder="little")[:, :l].astype(np.int16)


def _suffix(xb: np.ndarray, r_v: np.ndarray) -> np.ndarray:
    """One component of the shared part of sum_{k > i} (X_k xor Y_k), i = 0..n-1, with
    Y_k = r'_{k-1}: sum_{k > i} (1 - 2 X_k) r'_{k-1} (int16; the public sum_{k > i} X_k apart)."""
    sgn = (1 - 2 * xb[:, 1:]).astype(np.int16)                           # 1 - 2 X_k, k = 1..n
    return np.cumsum((sgn * r_v.astype(np.int16))[:, ::-1], axis=1, dtype=np.int16)[:, ::-1]


def _tree_and_open(mpc, terms: Pair, top: Pair, opens: list) -> list[np.ndarray]:
    """The product of the l terms (pairwise, ceil(log2 l) rounds of Z_p products) [Falcon
    Alg. 1 step 6], then d opened with ``opens`` (malicious: after the check of every
    pending product). Returns [d, *opened]."""
    t = Pair(np.concatenate([terms.a, top.a[:, None]], axis=1), np.concatenate([terms.b, top.b[:, None]], axis=1))
    while t.a.shape[1] > 1:
        k = t.a.shape[1]
        h = k // 2
        lo = Pair(np.ascontiguousarray(t.a[:, 0:2 * h:2]), np.ascontiguousarray(t.b[:, 0:2 * h:2]))
        hi = Pair(np.ascontiguousarray(t.a[:, 1:2 * h:2]), np.ascontiguousarray(t.b[:, 1:2 * h:2]))
        (pr,) = mpc.mult_round([("p", None, lo, hi)])
        if k % 2:
            pr = Pair(np.concatenate([pr.a, t.a[:, -1:]], axis=1), np.concatenate([pr.b, t.b[:, -1:]], axis=1))
        t = pr
    return mpc.open_many([("p", Pair(t.a[:, 0], t.b[:, 0]))] + list(opens))


def sign(mpc, x: Pair, products: Callable[[Pair], list] | None = None, open_bit: bool = False) -> SignResult:
    """[x >= 0] by Falcon's wrap and private compare, mode "pc" (module docstring).
    ``products(g)``: products with the mask bit g (shaped as x) for step 1's round;
    ``open_bit``: also open the sign bit to everyone (Falcon's Pow), in the round that opens d."""
    ring, l = mpc.ring, mpc.cfg.ring_bits
    n = l - 1
    shape, n_el = x.a.shape, x.a.size
    mat = mpc.pc.take(n_el)
    g = rss.apply(mat.g, lambda v: v.reshape(shape))
    cpair = rss.add(ring, x, rss.apply(mat.r, lambda v: v.reshape(shape)))
    outs, (c,) = mpc.mult_open_round(products(g) if products else [], [("a", cpair)])
    c = ring.reduce(c.reshape(-1))
    xb = _public_bits(c, l)
    two_x = 2 * xb[:, :n]
    pub = np.cumsum(xb[:, :0:-1], axis=1, dtype=np.int16)[:, ::-1]      # sum_{k > i} X_k, i = 0..n-1
    pub = (pub + xb[:, :n] + 1) % P                                      # X_i + 1 + sum_{k > i} X_k

    def comp(r_v, t_v, b_v):
        """One component of term_0..term_{n-1} without the public part (mod p): with
        Y_i = r'_{i-1} (Y_0 = 0), -2 X_i beta - Y_i + 2 beta Y_i + sum_{k > i} (1 - 2 X_k) Y_k.
        Small integers (|v| < 2^15 for l <= 64) in int16."""
        r_v, t_v = r_v.astype(np.int16), t_v.astype(np.int16)
        v = _suffix(xb, r_v)
        v -= two_x * b_v.astype(np.int16)[:, None]
        v[:, 1:] += 2 * t_v[:, :-1] - r_v[:, :-1]
        return (v % P).astype(np.uint16)
    terms = Pair(comp(mat.rb.a, mat.tb.a, mat.beta.a), comp(mat.rb.b, mat.tb.b, mat.beta.b))
    terms = rss.mod_add_public(P, mpc.me, terms, pub.astype(np.uint16))
    # the top term times m' = m s: m (X_n + 1) - m r'_{n-1} - 2 m beta
    top = rss.mod_mul_public(P, mat.m, (xb[:, n] + 1).astype(np.uint16))
    top = rss.mod_sub(P, rss.mod_sub(P, top, mat.mr), rss.mod_mul_public(P, mat.mb, 2))
    opens = [("bit", Pair(g.a.reshape(-1) & U64(1), g.b.reshape(-1) & U64(1)))] if open_bit else []
    got = _tree_and_open(mpc, terms, top, opens)
    beta_p = (got[0] == 0).astype(U64)
    e = (U64(1) ^ (c >> U64(n)) ^ beta_p) & U64(1)
    bit = (e ^ got[1]).reshape(shape) if open_bit else None
    return SignResult(e.reshape(shape), g, outs, bit)


def drelu_falcon(mpc, x: Pair) -> Pair:
    """[x >= 0] as a boolean sharing (bit 0) with Falcon's round structure, mode "falcon"
    (module docstring): open c; the products with beta online (one round); the Z_p tree;
    open d. 3 + ceil(log2 l) rounds (8 in Z_2^32); the bit stays shared."""
    ring, l = mpc.ring, mpc.cfg.ring_bits
    n = l - 1
    shape, n_el = x.a.shape, x.a.size
    mat = mpc.pc.take(n_el)
    cpair = rss.add(ring, x, rss.apply(mat.r, lambda v: v.reshape(shape)))
    _, (c,) = mpc.mult_open_round([], [("a", cpair)])                   # round 1: open c
    c = ring.reduce(c.reshape(-1))
    xb = _public_bits(c, l)
    # round 2 [Falcon Alg. 1 step 2, u_i = (-1)^beta (X_i - Y_i)]: s = 1 - 2 beta times
    # X_i - Y_i = X_i - r'_{i-1} for i = 1..n-1, and m s times X_n - Y_n (the multiplier
    # folded into the top term); u_0 = s (X_0 = 1, Y_0 = 0) needs no product
    s = rss.mod_add_public(P, mpc.me, rss.mod_mul_public(P, mat.beta, P - 2), 1)
    ms = rss.mod_sub(P, mat.m, rss.mod_mul_public(P, mat.mb, 2))
    left = Pair(np.concatenate([np.repeat(s.a[:, None], n - 1, axis=1), ms.a[:, None]], axis=1),
                np.concatenate([np.repeat(s.b[:, None], n - 1, axis=1), ms.b[:, None]], axis=1))
    neg_y = rss.mod_mul_public(P, mat.rb, P - 1)
    diff = rss.mod_add_public(P, mpc.me, neg_y, xb[:, 1:].astype(np.uint16))
    (u,) = mpc.mult_round([("p", None, left, diff)])

    def comp(r_v, u_v, b_v):
        """One component of term_0..term_{n-1} without the public part: u_i (i >= 1) or
        -2 beta (i = 0, the shared part of s) plus the suffix sum of X_k xor Y_k."""
        v = _suffix(xb, r_v)
        v[:, 1:] += u_v[:, :n - 1].astype(np.int16)
        v[:, 0] -= 2 * b_v.astype(np.int16)
        return (v % P).astype(np.uint16)
    terms = Pair(comp(mat.rb.a, u.a, mat.beta.a), comp(mat.rb.b, u.b, mat.beta.b))
    pub = np.cumsum(xb[:, :0:-1], axis=1, dtype=np.int16)[:, ::-1] + 1     # 1 + sum_{k > i} X_k
    pub[:, 0] += 1                                                         # s = 1 - 2 beta
    terms = rss.mod_add_public(P, mpc.me, terms, (pub % P).astype(np.uint16))
    top = rss.mod_add(P, Pair(u.a[:, n - 1], u.b[:, n - 1]), mat.m)          # m term_n = m s (X_n - Y_n) + m
    (d,) = _tree_and_open(mpc, terms, top, [])
    e = (U64(1) ^ (c >> U64(n)) ^ (d == 0).astype(U64)) & U64(1)
    g = Pair(mat.g.a.reshape(-1) & U64(1), mat.g.b.reshape(-1) & U64(1))
    return rss.apply(rss.xor_public(mpc.me, g, e), lambda v: v.reshape(shape))
