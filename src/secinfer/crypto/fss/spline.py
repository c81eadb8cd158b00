"""Interval-containment and spline gates with public pieces [BCG+21 Sec. 4-5, interval
containment and splines], one DCF key for all pieces.

A spline is f(x) = sum_i 1{p_i <= x <= q_i} P_i(x) with public signed bounds p_i <= q_i
and public integer polynomials P_i of degree <= d (the pieces may overlap; their sum is
taken). x in Z_2^n is shared, the dealer masks it with r uniform in [0, N), N = 2^n, and
the parties open x^ = x + r (one round, n bits per party) as for the other gates.

Interval containment (derivation in docs/fss.md). For public z = (x^ - p) mod N and
T = q - p + 1 in [1, N], with y = (x - p) mod N = (z - r) mod N:

    1{p <= x <= q} = 1{y < T} = D(z - T mod N) + 1{z < T} - D(z),    D(u) = 1{u < r},

i.e. two evaluations of ONE DCF with alpha = r. Its payload is the vector (r^0, ..., r^d),
so the same two evaluations give shares of r^l 1{x in I} for every l, and with
x^j = sum_l C(j, l) x^^(j-l) (-r)^l every piece's contribution is a sum of public
coefficients times those shares. All pieces share the key; each piece costs two tree walks.

Rings: for degree 0 (piecewise constant, e.g. an interval indicator) the output is an
integer combination of indicators, exact in any Z_2^k (k >= n, lifted included). For
degree >= 1 the output is computed mod 2^n (k = n), since x^j of the signed lift would need
the wrap corrections of the ReLU gate. The MAC twin (payload mu r^l, dealer mu r^l)
multiplies the output by mu.
"""

from __future__ import annotations

from math import comb

import numpy as np

from secinfer.crypto.fss.gates import FSSGate, GateKey
from secinfer.errors import ConfigError


class SplineGate(FSSGate):
    """Public piecewise polynomial on a masked input. ``pieces``: [(p, q, [a_0, ..., a_d])]."""

    kind = "spline"

    def __init__(self, n_bits, out_bits=None, mac=False, degree: int = 0, pieces=None):
        super().__init__(n_bits, out_bits, mac, 0)
        if not 0 <= degree <= 8:
            raise ConfigError(f"spline degree must be in 0..8, got {degree}")
        if degree >= 1 and self.k != self.n:
            raise ConfigError("splines of degree >= 1 are computed in Z_2^n (out_bits = n)")
        self.degree = degree
        self.f = degree          # stored in the key header's parameter slot
        self.pieces = None if pieces is None else self._check_pieces(pieces)

    def _check_pieces(self, pieces) -> list:
        half = 1 << (self.n - 1)
        out = []
        for p, q, coeffs in pieces:
            p, q, coeffs = int(p), int(q), [int(a) for a in coeffs]
            if not -half <= p <= q < half:
                raise ConfigError(f"spline piece [{p}, {q}] is not an interval of signed {self.n}-bit values")
            if not 1 <= len(coeffs) <= self.degree + 1:
                raise ConfigError(f"spline piece needs 1..{self.degree + 1} coefficients, got {len(coeffs)}")
            out.append((p, q, coeffs + [0] * (self.degree + 1 - len(coeffs))))
        if not out:
            raise ConfigError("a spline needs at least one piece")
        return out

    def with_pieces(self, pieces) -> "SplineGate":
        return SplineGate(self.n, self.k, self.mac, self.degree, pieces)

    # ---- declarative parts -----------------------------------------------------------
    @property
    def dcf_domains(self):
        return [self.n]

    @property
    def _powers(self) -> list:
        return ["one", "r"] + [f"rp{l}" for l in range(2, self.degree + 1)]

    @property
    def payloads(self):
        base = self._powers[:self.degree + 1]
        return [base + (["mu_" + p for p in base] if self.mac else [])]

    @property
    def dealer_fields(self):
        powers = ["r"] + [f"rp{l}" for l in range(2, self.degree + 1)]
        return tuple(powers) + (tuple(["mu"] + ["mu_" + p for p in powers]) if self.mac else ())

    @property
    def outputs(self):
        return ("y",) + (("mu_y",) if self.mac else ())

    def cost(self):
        c = super().cost()
        full = 1 << self.n
        walks = 2 * sum(q - p + 1 != full for p, q, _ in self.pieces) if self.pieces is not None else 2
        return type(c)(c.gate, c.key_bytes, c.key_bits_paper, c.online_bits, c.online_wire_bytes,
                       c.rounds, c.messages, self.n * walks)

    def _secret_values(self, r, mu):
        g = self.group
        v = {"one": g.from_u64(np.ones_like(r)), "r": g.from_u64(r)}
        for l in range(2, self.degree + 1):
            v[f"rp{l}"] = g.mul(v[f"rp{l - 1}" if l > 2 else "r"], v["r"])
        if mu is not None:
            for name in list(v):
                v["mu_" + name] = g.mul(mu, v[name])
            v["mu"] = mu
        return v

    # ---- online ------------------------------------------------------------------------
    def eval_local(self, key: GateKey, xhat: np.ndarray) -> dict:
        if self.pieces is None:
            raise ConfigError("this spline gate has no pieces; use with_pieces(...)")
        xhat = np.asarray(xhat, np.uint64).reshape(-1)
        self._check_key(key, xhat.shape)
        if self.n < 64 and np.any(xhat >> np.uint64(self.n)):
            raise ConfigError(f"masked input exceeds {self.n} bits")
        g, n, party = self.group, self.n, key.party
        mask = (1 << n) - 1
        prefixes = [""] + (["mu_"] if self.mac else [])
        acc = {pre: g.zeros(xhat.shape) for pre in prefixes}
        # shares of r^l (l = 0..d): r^0 = 1 is public (party 0), times mu it is [mu]
        powers = {pre: [None] + [key.shares[pre + ("r" if l == 1 else f"rp{l}")]
                                 for l in range(1, self.degree + 1)] for pre in prefixes}
        xpow = [np.ones_like(xhat)]
        for _ in range(self.degree):
            xpow.append(xpow[-1] * xhat)             # x^^j mod 2^64, reduced below
        for p, q, coeffs in self.pieces:
            t_len = q - p + 1
            full = t_len == 1 << n                       # the piece covers the whole domain
            if not full:
                z = (xhat - np.uint64(p & mask)) & np.uint64(mask)
                z2 = (z - np.uint64(t_len)) & np.uint64(mask)
                d_z2, d_z = dcf_eval_pair(key, z2, z)
                below = (z < np.uint64(t_len)).astype(np.uint64)
            for pre in prefixes:
                base = self.payloads[0].index(pre + "one")
                rind = []                                # shares of (mu) r^l 1{x in I}, l = 0..d
                for l in range(self.degree + 1):
                    pw = self._power_share(party, pre, l, powers, key, xhat.shape)
                    if full:
                        rind.append(pw)
                    else:
                        term = g.sub(d_z2[:, base + l], d_z[:, base + l])
                        rind.append(g.add(term, g.select(below, pw)))
                for j, a_j in enumerate(coeffs):
                    if a_j == 0:
                        continue
                    for l in range(j + 1):
                        const = g.from_int(comb(j, l) * a_j * (-1) ** l)
                        term = g.mul(rind[l], const)
                        if j > l:
                            term = g.mul_u64(term, xpow[j - l])
                        acc[pre] = g.add(acc[pre], term)
        out = {"y": acc[""]}
        if self.mac:
            out["mu_y"] = acc["mu_"]
        return out

    def _power_share(self, party, pre, l, powers, key, shape):
        """Share of mu^[pre] r^l: r^0 = 1 is public (party 0 holds it), mu r^0 = [mu]."""
        g = self.group
        if l == 0:
            if pre:
                return key.shares["mu"]
            return g.from_u64(np.ones(shape, np.uint64)) if party == 0 else g.zeros(shape)
        return powers[pre][l]


def dcf_eval_pair(key: GateKey, u: np.ndarray, v: np.ndarray):
    """The gate's DCF at two points per instance: (D(u), D(v)), each (B, P, L)."""
    from secinfer.crypto.fss.dcf import dcf_eval
    both = dcf_eval(key.dcfs[0], np.stack([u, v], axis=1))
    return both[:, 0], both[:, 1]
