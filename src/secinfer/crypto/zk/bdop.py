"""BDOP lattice commitment to the encryption noises and the proof that they are short.

Commitment [Baum, Damgard, Lyubashevsky, Oechsner, Peikert, SCN 2018 ("BDOP"), Sec. 4;
CRISP-certified Sec. 6.1: n = 1, k = 5, beta from N and q]: over R_Q = Z_Q[X]/(X^N + 1),
Q the ciphertext modulus (RNS), with the public key

    A1 = [1, a1, a2, a3, a4]            (1 x 5)
    A2 = [0, I_3, (b1, b2, b3)^T]       (3 x 5)

the commitment to x = (u, e0, e1) in R^3 (l = 3 = k - n - 1) with r in S_beta^5 is
C1 = A1 r, C2 = A2 r + x. Hiding is RLWE with secret r4 and errors r1..r3 (and r0 for C1):
the CKKS parameter set already makes RLWE over (N, Q) 128-bit hard for errors of standard
deviation >= 3.2, so beta = 6 (uniform on [-6, 6], std 3.74) -- "beta chosen according to
N and q". Binding is Module-SIS for A1 (see docs/protocols/certified.md for the estimate).

Bound proof (a Fiat-Shamir Sigma protocol with rejection sampling, the BDOP proof of
opening extended to the message part, which is what makes the noises' bound provable):
the witness s = (r, x) in R^8 with ||r_i|| <= beta, ||u|| <= 1, ||e0||, ||e1|| <= B_e, and
the public linear map F(s) = (A1 r, A2 r + x), F(s) = C.

1. P: y in R^8, coefficient i of component c uniform in [-M_c, M_c],
   M_c = 16 N w B_c (B_c the component's bound, w the challenge weight); t = F(y).
2. d = H(ctx, key, C, t) expanded into a ternary polynomial with exactly w non-zero
   coefficients (|challenge space| = binom(N, w) 2^w >= 2^128).
3. z = y + d s; restart unless every ||z_c|| <= M_c - w B_c (then z is uniform on its
   box whatever s: zero knowledge).
4. V: the norms, and H(ctx, key, C, F(z) - d C) = the proof's hash.

Two accepting answers z, z' to different challenges for one t give (d - d') s = z - z',
with ||z - z'|| <= 2 M_c: the relaxed opening of BDOP (the committed noise times a short
challenge difference is short). Q splits completely (NTT primes), so not every challenge
difference is invertible; docs/protocols/certified.md states what this proof does and does
not give.
"""

from __future__ import annotations

import ctypes as C
import hashlib
import math
from dataclasses import dataclass

import numpy as np

from secinfer.crypto.he import _native as N
from secinfer.crypto.prg import PRG
from secinfer.errors import ConfigError, ProtocolError, SerializationError

K, ELL = 5, 3                 # [CRISP-certified Sec. 6.1] n = 1, k = 5; l = 3 noises
BETA = 6                      # randomness bound (std >= the HE error's 3.2)
NOISE_BOUNDS = (1, 20, 20)    # u ternary; e0, e1 within Lattigo's ceil(6 sigma) = 20
CHALLENGE_BITS = 128
MAX_ATTEMPTS = 64
_ERRORS = {4: ConfigError}


def challenge_weight(n: int, bits: int = CHALLENGE_BITS) -> int:
    """Smallest w with log2(binom(N, w) 2^w) >= bits."""
    for w in range(1, n + 1):
        if math.log2(math.comb(n, w)) + w >= bits:
            return w
    raise ConfigError(f"ring degree {n} too small for a {bits}-bit challenge space")


@dataclass(frozen=True)
class BDOPParams:
    log_n: int
    primes: tuple[int, ...]

    @property
    def n(self) -> int:
        return 1 << self.log_n

    @property
    def weight(self) -> int:
        return challenge_weight(self.n)

    @property
    def bounds(self) -> tuple[int, ...]:
        """Per component of s = (r0..r4, u, e0, e1)."""
        return (BETA,) * K + NOISE_BOUNDS

    @property
    def masks(self) -> tuple[int, ...]:
        return tuple(16 * self.n * self.weight * b for b in self.bounds)

    @property
    def accept(self) -> tuple[int, ...]:
        return tuple(m - self.weight * b for m, b in zip(self.masks, self.bounds))


def lincomb(bp: BDOPParams, a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """sum_i a_i x_i in R_Q (a: (count, L, N) residues, x: (count, N) small ints)."""
    a = np.ascontiguousarray(a, dtype=np.uint64)
    x = np.ascontiguousarray(x, dtype=np.int64)
    L = len(bp.primes)
    if a.ndim != 3 or a.shape[1:] != (L, bp.n) or x.shape != (a.shape[0], bp.n):
        raise ConfigError("lincomb: shapes do not match the parameters")
    pr = np.array(bp.primes, dtype=np.uint64)
    out = np.zeros((L, bp.n), dtype=np.uint64)
    N.call("zk_lincomb", bp.log_n, N.ptr(pr, N.u64), L, a.shape[0], N.ptr(a, N.u64),
           N.ptr(x, N.i64), N.ptr(out, N.u64), errors=_ERRORS, default=ConfigError)
    return out


def _one(bp: BDOPParams) -> np.ndarray:
    e = np.zeros((len(bp.primes), bp.n), dtype=np.uint64)
    e[:, 0] = 1
    return e


def commitment_key(bp: BDOPParams, seed: bytes) -> np.ndarray:
    """(a1..a4, b1..b3) uniform in R_Q from a public seed (the verifier's)."""
    prg = PRG(bytes(seed), "certified/bdop-key")
    key = np.zeros((7, len(bp.primes), bp.n), dtype=np.uint64)
    for i in range(7):
        for l, q in enumerate(bp.primes):
            key[i, l] = prg.below(q, bp.n).astype(np.uint64)
    return key


def _matrix(bp: BDOPParams, key: np.ndarray) -> list[list[np.ndarray | None]]:
    """Rows of F: output j = sum over the 8 components (r0..r4, u, e0, e1)."""
    one = _one(bp)
    rows: list[list[np.ndarray | None]] = [[one, key[0], key[1], key[2], key[3], None, None, None]]
    for j in range(ELL):
        row: list[np.ndarray | None] = [None] * 8
        row[1 + j] = one
        row[4] = key[4 + j]
        row[5 + j] = one
        rows.append(row)
    return rows


def apply_f(bp: BDOPParams, key: np.ndarray, s: np.ndarray) -> np.ndarray:
    """F(s) = (A1 r, A2 r + x) as (4, L, N) residues; s: (8, N) = (r0..r4, u, e0, e1)."""
    out = []
    for row in _matrix(bp, key):
        idx = [i for i, a in enumerate(row) if a is not None]
        out.append(lincomb(bp, np.stack([row[i] for i in idx]), s[idx]))
    return np.stack(out)


def sample_randomness(bp: BDOPParams, prg: PRG) -> np.ndarray:
    """r in S_beta^5: coefficients uniform in [-beta, beta]."""
    return prg.below(2 * BETA + 1, (K, bp.n)) - BETA


def commit(bp: BDOPParams, key: np.ndarray, noises: np.ndarray, r: np.ndarray) -> np.ndarray:
    """(C1, C2_1, C2_2, C2_3) as (4, L, N) residues for noises (u, e0, e1) (3, N)."""
    return apply_f(bp, key, np.vstack([r, noises]).astype(np.int64))


def _hash(bp: BDOPParams, ctx: bytes, key: np.ndarray, com: np.ndarray, t: np.ndarray) -> bytes:
    h = hashlib.sha256(b"secinfer/certified/bdop-bound/v1\0")
    h.update(len(ctx).to_bytes(8, "little") + bytes(ctx))
    h.update(np.array([bp.log_n, *bp.primes], dtype=np.uint64).tobytes())
    for a in (key, com, t):
        h.update(np.ascontiguousarray(a, dtype=np.uint64).tobytes())
    return h.digest()


def challenge_poly(bp: BDOPParams, digest: bytes) -> np.ndarray:
    """Ternary polynomial with exactly w non-zero coefficients, from a hash."""
    prg = PRG(hashlib.sha256(b"bdop-challenge" + digest).digest()[:16], "bdop-challenge")
    pos = prg.permutation(bp.n)[: bp.weight]
    signs = prg.bits(bp.weight).astype(np.int64) * 2 - 1
    d = np.zeros(bp.n, dtype=np.int64)
    d[pos] = signs
    return d


def negacyclic_small(a: np.ndarray, d: np.ndarray) -> np.ndarray:
    """a * d in Z[X]/(X^N + 1) for small integer vectors (exact, int64)."""
    n = a.shape[-1]
    out = np.zeros_like(a, dtype=np.int64)
    for i in np.nonzero(d)[0]:
        rolled = np.roll(a, i, axis=-1)
        rolled[..., :i] *= -1
        out += int(d[i]) * rolled
    return out


def within(bp: BDOPParams, s: np.ndarray, bounds) -> bool:
    return all(int(np.max(np.abs(s[c]))) <= b for c, b in enumerate(bounds))


def _responds(bp: BDOPParams, z: np.ndarray) -> bool:
    """The rejection-sampling test: z is released only inside the acceptance box."""
    return within(bp, z, bp.accept)


def prove_bound(bp: BDOPParams, key: np.ndarray, com: np.ndarray, noises: np.ndarray,
                r: np.ndarray, prg: PRG, ctx: bytes) -> bytes:
    """Proof that ``com`` commits to noises within NOISE_BOUNDS (see module docstring)."""
    s = np.vstack([r, noises]).astype(np.int64)
    if s.shape != (8, bp.n):
        raise ConfigError(f"need 5 randomness and 3 noise polynomials of {bp.n} coefficients")
    if not within(bp, s, bp.bounds):
        raise ConfigError("the committed noises or randomness exceed their bounds")
    for _ in range(MAX_ATTEMPTS):
        y = np.stack([prg.below(2 * m + 1, bp.n) - m for m in bp.masks]).astype(np.int64)
        t = apply_f(bp, key, y)
        digest = _hash(bp, ctx, key, com, t)
        z = y + negacyclic_small(s, challenge_poly(bp, digest))
        if _responds(bp, z):
            return digest + z.astype("<i4").tobytes()
    raise ProtocolError(f"bound proof: no accepted response in {MAX_ATTEMPTS} attempts")


def proof_bytes(bp: BDOPParams) -> int:
    return 32 + 8 * bp.n * 4


@dataclass(frozen=True)
class BoundVerdict:
    norms_ok: bool
    relation_ok: bool

    @property
    def ok(self) -> bool:
        return self.norms_ok and self.relation_ok


def verify_bound(bp: BDOPParams, key: np.ndarray, com: np.ndarray, proof: bytes,
                 ctx: bytes) -> BoundVerdict:
    if len(proof) != proof_bytes(bp):
        raise SerializationError(f"bound proof must have {proof_bytes(bp)} bytes")
    digest = bytes(proof[:32])
    z = np.frombuffer(proof[32:], dtype="<i4").astype(np.int64).reshape(8, bp.n)
    norms_ok = within(bp, z, bp.accept)
    d = challenge_poly(bp, digest)
    fz = apply_f(bp, key, z)
    dc = np.stack([lincomb(bp, com[j][None], d[None]) for j in range(4)])
    t = np.zeros_like(fz)
    for l, q in enumerate(bp.primes):
        qq = np.uint64(q)
        t[:, l] = (fz[:, l] + (qq - dc[:, l])) % qq
    return BoundVerdict(norms_ok, _hash(bp, ctx, key, com, t) == digest)
