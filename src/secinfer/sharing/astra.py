"""ASTRA sharings [ASTRA 3]: [.] (2-out-of-2 between P1, P2) and [[.]] (mask/masked value).

A value v is [[.]]-shared when v = m_v - lambda_v with lambda_v = lambda_{v,1} + lambda_{v,2}:

    P0 holds (lambda_{v,1}, lambda_{v,2}),  P1 holds (m_v, lambda_{v,1}),  P2 holds (m_v, lambda_{v,2}).

``AShare`` is *one party's* view; missing components are ``None``. During the offline phase
the masks are known before the masked value, so a share with ``m=None`` at an evaluator is a
"mask-only" share that the online phase completes. Everything here is local (no messages):
linearity [ASTRA 3, "Linearity of the secret sharing schemes"] plus dealer/reconstruct helpers
for tests. Works over Z_2^l for any l in 1..64; l = 1 is the boolean ring (+ is XOR, * is AND).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from secinfer.arith.ring import Ring
from secinfer.errors import ConfigError

SERVERS = ("p0", "p1", "p2")


@dataclass
class AShare:
    """One party's [[v]]-share over Z_2^bits."""

    bits: int
    m: np.ndarray | None = None
    l1: np.ndarray | None = None
    l2: np.ndarray | None = None

    @property
    def ring(self) -> Ring:
        return Ring(self.bits)

    @property
    def shape(self) -> tuple:
        for a in (self.m, self.l1, self.l2):
            if a is not None:
                return a.shape
        raise ConfigError("empty share")

    # ---- linearity ------------------------------------------------------------------
    def _zip(self, other: "AShare", fn) -> "AShare":
        if self.bits != other.bits:
            raise ConfigError("shares over different rings")

        def f(a, b):
            if a is None or b is None:
                return None
            return fn(a, b)
        return AShare(self.bits, f(self.m, other.m), f(self.l1, other.l1), f(self.l2, other.l2))

    def __add__(self, other: "AShare") -> "AShare":
        return self._zip(other, self.ring.add)

    def __sub__(self, other: "AShare") -> "AShare":
        return self._zip(other, self.ring.sub)

    def __neg__(self) -> "AShare":
        r = self.ring
        return AShare(self.bits, *(None if a is None else r.neg(a) for a in (self.m, self.l1, self.l2)))

    def scale(self, c) -> "AShare":
        """c * [[v]] for a public constant (scalar or broadcastable array)."""
        r = self.ring
        c = r.reduce(np.asarray(c, dtype=np.uint64))
        return AShare(self.bits, *(None if a is None else r.mul(a, c) for a in (self.m, self.l1, self.l2)))

    def add_public(self, c) -> "AShare":
        """[[v + c]]: only the masked value moves (v + c = (m_v + c) - lambda_v)."""
        r = self.ring
        m = None if self.m is None else r.add(self.m, np.asarray(c, dtype=np.uint64))
        return AShare(self.bits, m, self.l1, self.l2)

    def map(self, fn) -> "AShare":
        """Apply a reshaping/indexing function to every component."""
        return AShare(self.bits, *(None if a is None else fn(a) for a in (self.m, self.l1, self.l2)))

    def with_m(self, m: np.ndarray) -> "AShare":
        """This share with masked value ``m`` (reduced; over Z_2^64 a uint64 array is taken
        as it is, not copied: the callers hand over a fresh or received array they do not
        modify afterwards -- W1 at 1000 queries copied 6.3 MB per call)."""
        m = np.asarray(m, dtype=np.uint64)
        return AShare(self.bits, m if self.bits == 64 else m & self.ring.mask, self.l1, self.l2)

    def view_for(self, role: str) -> "AShare":
        """Drop the components ``role`` must not hold (used by the dealer helper)."""
        if role == "p0":
            return AShare(self.bits, None, self.l1, self.l2)
        if role == "p1":
            return AShare(self.bits, self.m, self.l1, None)
        if role == "p2":
            return AShare(self.bits, self.m, None, self.l2)
        raise ConfigError(f"unknown server role {role!r}")


def deal(x: np.ndarray, bits: int, prg) -> dict:
    """Trusted-dealer [[x]] (tests only): {role: AShare}."""
    r = Ring(bits)
    x = r.reduce(np.asarray(x, dtype=np.uint64))
    l1, l2 = prg.ring(x.shape, bits), prg.ring(x.shape, bits)
    full = AShare(bits, r.add(r.add(x, l1), l2), l1, l2)
    return {p: full.view_for(p) for p in SERVERS}


def reconstruct(views: dict) -> np.ndarray:
    """v = m - l1 - l2 from the views of P1 and P2 (tests / the receiving party)."""
    s1, s2 = views["p1"], views["p2"]
    r = Ring(s1.bits)
    return r.sub(r.sub(s1.m, s1.l1), s2.l2)

