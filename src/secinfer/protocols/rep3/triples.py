"""The one triple factory of the three-party protocols [ASTRA App. A.1, Fig. 16], after
Araki et al. 2017 ("cut-and-choose with bucketing"): T = B*N + C triples made
optimistically (a corrupt party can only add an error to c), a public permutation from a
commit-then-reveal ``coin_toss`` tossed after every c is fixed (``shuffle``), C opened and
checked (the cut), the other B*N in N buckets whose head is sacrificed against the B-1
others (``buckets``); B = ceil(40 / log2 N) (``bucket_params``). ``cut_and_bucket`` runs it
over any share type (astra, aby3); falcon's pipelined groups use the pieces.
"""

from __future__ import annotations

import hashlib
import math
from typing import Callable

import numpy as np

from secinfer.crypto.prg import PRG
from secinfer.net.channel import ArraySpec
from secinfer.protocols.rep3.digest import H_SPEC, digest

STAT_SECURITY = 40
SERVERS = ("p0", "p1", "p2")


def bucket_params(n: int, bucket: int | None = None, opened: int | None = None) -> tuple[int, int]:
    """(B, C) for N triples: B = max(2, ceil(40 / log2 N)) unless given, C = B unless given."""
    b = bucket if bucket else max(2, math.ceil(STAT_SECURITY / math.log2(max(n, 2))))
    c = opened if opened is not None else b
    return b, c


def coin_toss(ep, role: str, prg, label: str) -> bytes:
    """Commit-then-reveal joint 16-byte seed of the three servers (one abort check,
    ``coin-toss``). The tags keep the ``astra/coin`` prefix of the first user, so the
    bytes on the wire are those of every earlier release."""
    mine = prg.derive(f"coin-{label}").seed() if prg is not None else hashlib.sha256(label.encode()).digest()[:16]
    others = [p for p in SERVERS if p != role]
    com = digest("coin", np.frombuffer(mine, np.uint8))
    for p in others:
        ep.send(p, f"astra/coin/{label}/c", com)
    coms = {p: ep.recv_one(p, f"astra/coin/{label}/c", H_SPEC) for p in others}
    for p in others:
        ep.send(p, f"astra/coin/{label}/o", np.frombuffer(mine, np.uint8))
    seed = bytearray(mine)
    for p in others:
        o = ep.recv_one(p, f"astra/coin/{label}/o", ArraySpec(np.uint8, (16,)))
        ep.require(np.array_equal(digest("coin", o), coms[p]), "coin-toss", p,
                   "opening does not match the commitment")
        seed = bytearray(a ^ b for a, b in zip(seed, o.tobytes()))
    return bytes(seed)


def shuffle(seed: bytes, domain: str, total: int) -> np.ndarray:
    """The public permutation of ``total`` triples from a tossed seed."""
    return np.argsort(PRG(seed, domain).uint64((total,)), kind="stable")


def buckets(cut: int, bsz: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """After a cut of ``cut``: (heads, heads repeated B-1 times, the others) as indices,
    bucket j = heads[j] and others[j::n]."""
    rest = np.arange(cut, cut + bsz * n).reshape(bsz, n)
    return rest[0], np.tile(rest[0], bsz - 1), rest[1:].reshape(-1)


def cut_and_bucket(ep, role: str, prg, n: int, label: str, domain: str, d, e, f, *,
                   take: Callable, open_: Callable, mul: Callable, sacrifice: Callable,
                   bucket: int | None = None, opened: int | None = None, cut_check: str = "trip-cut"):
    """Steps 2-4 over T = B*N + C optimistic triples (d, e, f) (the caller made them for
    ``bucket_params(n, bucket, opened)``). ``take(s, idx)`` selects elements of a share,
    ``open_(s, label)`` opens one to every server, ``mul(x, y)`` is the public product,
    ``sacrifice(heads, others, label)`` checks heads against others (and aborts with its
    own check). Returns the N checked heads (d, e, f)."""
    bsz, c = bucket_params(n, bucket, opened)
    perm = shuffle(coin_toss(ep, role, prg, label), domain, bsz * n + c)
    d, e, f = (take(s, perm) for s in (d, e, f))
    if c:
        cut = np.arange(c)
        dv, ev, fv = (open_(take(s, cut), f"{label}/cut{i}") for i, s in enumerate((d, e, f)))
        ep.require(np.array_equal(mul(dv, ev), fv), cut_check, None, "an opened triple is not a multiplication triple")
    head, heads, others = buckets(c, bsz, n)
    if bsz > 1:
        sacrifice(tuple(take(s, heads) for s in (d, e, f)), tuple(take(s, others) for s in (d, e, f)),
                  label + "/bucket")
    return tuple(take(s, head) for s in (d, e, f))
