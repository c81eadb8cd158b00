"""Proof that an RLWE public key is well formed: knowledge of short (s, e) with
pk0 + a s = e in R_Q, for a uniform a the *verifier* chose  [the key-side complement of
CRISP Fig. 2 note a; the same amortised Sigma protocol as ``popk``, one statement].

Setting: the verifier sends a fresh seed; both expand it into a uniform a in R_Q (all Q
primes, ``he.rlwe.keygen_seeded`` / ``public_key_from_parts``); the prover samples s
ternary, e Gaussian (the parameter set's distributions) and publishes pk0 = e - a s.

Statement: pk0 = F(s, e) := e - a s with ||s|| <= 2^(r_s + 1), ||e|| <= 2^(r_e + 1).

Protocol (interactive, binary challenges, V = 44 rows; the shape of ``popk``, whose
ciphertext proofs use five-element challenges instead -- here the statement must be
about pk0 itself, not 2 pk0):

1. P: masks y_k = (ys_k, ye_k), every coefficient uniform in [-2^r_x, 2^r_x),
   r_x = bitlen(b_x) + k_rej with b = (1, 20) (ternary s, |e| <= 19.2) and
   k_rej = ceil(log2(V 2N)) + 3; sends h = SHA-256(F(y_1), .., F(y_V)).
2. V: a fresh 16-byte seed -> challenge bits c_1 .. c_V.
3. P: z_k = y_k + c_k (s, e); if any coefficient is outside [-2^r_x + b_x, 2^r_x - b_x):
   restart (at most ``popk.MAX_ATTEMPTS``); else the z_k packed at r_x + 1 bits.
4. V: every coefficient in range and SHA-256(F(z_k) - c_k pk0, k = 1..V) = h.

Soundness: if pk0 has no preimage with ||s|| <= 2^(r_s + 1), ||e|| <= 2^(r_e + 1), then
for a fixed commitment each row can be answered for at most one of c_k = 0, 1 (both
would give F(z' - z) = pk0 with z' - z in range): 2^-V per attempt, 16 2^-44 = 2^-40 over
all attempts (plus a SHA-256 collision). Zero knowledge as for ``popk`` (rejection
sampling: accepted responses are uniform on their ranges whatever (s, e)).
"""

from __future__ import annotations

import numpy as np

from secinfer.crypto.he import linmap
from secinfer.crypto.prg import PRG
from secinfer.crypto.zk import popk
from secinfer.errors import ConfigError

S_BOUND = 1          # ternary secret
E_BOUND = popk.E_BOUND


class KeyGeometry:
    """Sizes of the key proof: V rows, components (s, e) over all N coefficients."""

    names = ("s", "e")

    def __init__(self, n_ring: int, sec: int = popk.SEC) -> None:
        self.N, self.n = n_ring, 1
        self.V = popk.rows_for(sec, chal_set=2)
        self.k = popk.rejection_bits(n_ring, sec, components=2, chal_set=2)
        self.count = [n_ring, n_ring]
        self.shift = [S_BOUND, E_BOUND]
        popk._widths(self)
        # what an accepted proof guarantees: the difference of two in-range responses
        self.proven = (1 << (self.r[0] + 1), 1 << (self.r[1] + 1))


class _KeySide:
    def _key_init(self, params, pk, sec: int) -> None:
        self.params, self.pk = params, pk
        self.support = np.arange(params.n, dtype=np.int64)
        self.g = KeyGeometry(params.n, sec)

    def _challenge(self, seed: bytes) -> np.ndarray:
        return popk.binary_challenge(seed, self.g.V, 1)

    def _hash(self, parts, cts=(), m=None, low=None) -> bytes:   # no rounding: low unused
        return linmap.key_image_hash(self.params, self.pk, self.g.limbs, self._rows(parts),
                                     None if not cts else np.asarray(m)[:, 0])


class KeyProver(_KeySide, popk.Prover):
    """Client side: the key pair's witness (s, e) as int64 arrays of length N."""

    def __init__(self, params, pk, s, e, prg: PRG, sec: int = popk.SEC) -> None:
        self._key_init(params, pk, sec)
        s = np.asarray(s, np.int64).reshape(-1)
        e = np.asarray(e, np.int64).reshape(-1)
        if s.shape != (params.n,) or e.shape != (params.n,):
            raise ConfigError("keyproof: s and e must have N coefficients")
        self.w = [s[None, :], e[None, :]]
        self.rounded = None          # nothing rounded away: every component is sent
        self.prg = prg
        self._y = self._low = None


class KeyVerifier(_KeySide, popk.Verifier):
    """Server side, for the public key rebuilt from its own seed of a and the received pk0."""

    CHECK = "crisp-pk"

    def __init__(self, params, pk, sec: int = popk.SEC) -> None:
        self._key_init(params, pk, sec)
        self.cts = ["pk0"]      # one statement: the target is pk0 itself


class ProvenBounds:
    """What the accepted proofs of a session guarantee, soundness slack included (here, as
    it combines ``popk``'s for the ciphertexts with this module's for the key): for *every*
    ciphertext c_j of a batch, ``factor`` c_j = f(m_j, u_j, e0_j, e1_j) (factor = 2: popk) with
    m_j of at most D + m_extra_bits bits, zero outside the support, ||u_j|| <= u,
    ||e_j|| <= e (independent of D and of the batch size n <= N_MAX); for the client's
    public key (its proof of well-formedness, above), pk0 + a s = e_pk with
    ||s|| <= s_pk, ||e_pk|| <= e_pk. The verifier must therefore compute on factor c_j."""

    factor = popk.FACTOR

    def __init__(self, n_ring: int, sec: int = popk.SEC, n_max: int = popk.N_MAX) -> None:
        k = popk.rejection_bits(n_ring, sec)
        # difference of two in-range responses (< 2^(r + 1)) times 2 / delta (at most
        # doubles a coefficient): one bit more than with binary challenges
        self.m_extra_bits = n_max.bit_length() + k + 2
        self.u = 1 << (n_max * popk.U_BOUND).bit_length() + k + 2
        self.e = 2 * popk.E_PROVEN          # e0 and e1: rounded away (popk), times 2
        self.s_pk, self.e_pk = KeyGeometry(n_ring, sec).proven
        self.n_ring = n_ring

    def noise_bound(self) -> float:
        """|phase - Delta m| = |e_pk u + e0 + e1 s| <= N ||e_pk|| ||u|| + ||e0|| + N ||e1|| ||s||
        with every norm the proven one (the key's as well)."""
        n = self.n_ring
        return float(n * self.e_pk * self.u + self.e + n * self.e * self.s_pk)
