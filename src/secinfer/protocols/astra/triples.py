"""Pi_trip [ASTRA App. A.1, Fig. 16] and Pi_prc [ASTRA Fig. 7] for the malicious multiplication.

``check_triples(eng, a, b, c)`` verifies that every (a_i, b_i, c_i) collected by the offline
steps of Pi_mul^m is a multiplication triple:

1. Pi_trip, optimistic generation: 2M instances of Pi_rand ([[v]] with lambda_1 from k_01,
   lambda_2 from k_02, m_v from k_12 -- no communication) and M semi-honest products
   f = d * e (Pi_mul^s: gamma from P0, m_f exchanged by P1, P2), M = B * N + C.
2. Cut and bucket: a jointly tossed permutation (commit-then-reveal coin toss, so no party
   can predict it while it produces triples), C triples opened and checked, the remaining
   B*N split into N buckets whose first triple is checked with Pi_prc against the B-1 others.
3. Pi_prc of (a, b, c) against the bucket heads; following [2] (discussed in App. A.1) the
   shuffle happens after all products are fixed, so B = ceil(s / log2 N) for s = 40.

Pi_prc opens rho = a - d, sigma = b - e with Pi_rec^m and checks tau = c - f - sigma d - rho e
- sigma rho = 0 through the three pairwise hash comparisons of [ASTRA 4.2] (tau = 0 iff
m_tau = lambda_{tau,1} + lambda_{tau,2}), so each check costs two reconstructions.

Amortised offline cost per checked product (ring elements): gamma 1 + chi 2 + Pi_prc 6
+ Pi_trip (3B for the products, 6(B-1) for the bucket checks, 9C/N for the opened ones)
= 9B + 3 + 9C/N, i.e. 21 for B = 2 [ASTRA Thm. 4.4].
"""

from __future__ import annotations

import numpy as np

from secinfer.protocols.rep3.digest import H_SPEC, digest
from secinfer.protocols.rep3.triples import bucket_params, cut_and_bucket
from secinfer.sharing.astra import AShare


def rand_shares(eng, n: int, label: str) -> AShare:
    """Pi_rand [App. A.1]: a random [[v]] with no communication."""
    r = eng.role
    l1 = eng.draw("01", label + "/l1", (n,)) if r in ("p0", "p1") else None
    l2 = eng.draw("02", label + "/l2", (n,)) if r in ("p0", "p2") else None
    m = eng.draw("12", label + "/m", (n,)) if r in ("p1", "p2") else None
    return AShare(eng.bits, m, l1, l2)


def mul_semi(eng, x: AShare, y: AShare, label: str) -> AShare:
    """Pi_mul^s [Fig. 3] run inside the offline phase (optimistic triple generation)."""
    ep, R, r = eng.ep, eng.R, eng.role
    n = x.shape
    lz1 = eng.draw("01", label + "/lz", n) if r in ("p0", "p1") else None
    lz2 = eng.draw("02", label + "/lz", n) if r in ("p0", "p2") else None
    g1 = eng.draw("01", label + "/g", n) if r in ("p0", "p1") else None
    if r == "p0":
        g2 = R.sub(R.mul(R.add(x.l1, x.l2), R.add(y.l1, y.l2)), g1)
        eng.send("p2", f"astra/trip/{label}/g2", g2)
        return AShare(eng.bits, None, lz1, lz2)
    if r == "p2":
        g2 = eng.recv1("p0", f"astra/trip/{label}/g2", n)
    i = 1 if r == "p1" else 2
    lx, ly, lz, g = (x.l1, y.l1, lz1, g1) if i == 1 else (x.l2, y.l2, lz2, g2)
    share = R.add(R.sub(R.sub(lz, R.mul(x.m, ly)), R.mul(y.m, lx)), g)
    if i == 2:
        share = R.add(share, R.mul(x.m, y.m))
    other = "p2" if i == 1 else "p1"
    eng.send(other, f"astra/trip/{label}/mf", share)
    mf = R.add(share, eng.recv1(other, f"astra/trip/{label}/mf", n))
    return AShare(eng.bits, mf, lz1, lz2)


def zero_check(eng, t: AShare, label: str, check: str) -> None:
    """tau = 0 iff m_tau - lambda_{tau,1} = lambda_{tau,2}: three pairwise hash comparisons."""
    ep, R, r = eng.ep, eng.R, eng.role
    tag = f"astra/zero/{label}"
    if r == "p0":
        mine = {"p1": digest("zero", t.l2), "p2": digest("zero", t.l1)}
    elif r == "p1":
        mine = {"p0": digest("zero", R.sub(t.m, t.l1)), "p2": digest("zero", t.l1)}
    else:
        v = digest("zero", R.sub(t.m, t.l2))
        mine = {"p0": v, "p1": v}
    for p, d in mine.items():
        ep.send(p, tag, d)
    for p, d in mine.items():
        ep.require(np.array_equal(ep.recv_one(p, tag, H_SPEC), d), check, p, "product-relation check failed")


def prc(eng, abc, def_, label: str, check: str = "prc") -> None:
    """Pi_prc [Fig. 7]: is (a, b, c) a multiplication triple, given that (d, e, f) is one."""
    a, b, c = abc
    d, e, f = def_
    rho = eng.open_all(a - d, label + "/rho")
    sigma = eng.open_all(b - e, label + "/sigma")
    R = eng.R
    tau = (c - f - d.scale(sigma) - e.scale(rho)).add_public(R.neg(R.mul(sigma, rho)))
    zero_check(eng, tau, label, check)


def _take(s: AShare, idx) -> AShare:
    return s.map(lambda v: v[idx])


def generate_triples(eng, n: int, label: str = "trip") -> tuple[AShare, AShare, AShare]:
    """Pi_trip [Fig. 16]: n verified random triples (rep3.triples' cut and buckets)."""
    bsz, c = bucket_params(n, eng.bucket, eng.opened)
    total = bsz * n + c
    d = rand_shares(eng, total, label + "/d")
    e = rand_shares(eng, total, label + "/e")
    f = mul_semi(eng, d, e, label + "/f")
    return cut_and_bucket(eng.ep, eng.role, eng.prg, n, label, "astra-trip-perm", d, e, f,
                          take=_take, open_=eng.open_all, mul=eng.R.mul,
                          sacrifice=lambda h, o, lab: prc(eng, h, o, lab, "trip-bucket"),
                          bucket=eng.bucket, opened=eng.opened)


def check_triples(eng, a: AShare, b: AShare, c: AShare) -> None:
    lab = eng._label("check")
    d, e, f = generate_triples(eng, a.shape[0], lab + "/trip")
    prc(eng, (a, b, c), (d, e, f), lab + "/prc", "prc")
