"""Proof of plaintext knowledge for a batch of RLWE public-key encryptions  [CRISP Fig. 2
note a; the amortised Sigma protocol of MUSE / Overdrive, with challenges from
C = {0, 1, -1, i, -i}, i = X^(N/2), instead of bits].

Statement (public: parameter set, pk = (pk0, pk1), level, Delta (a positive integer; crisp:
the inverse of its plaintext modulus mod Q), digit bits D, support S of the message;
ciphertexts c_1 .. c_n at that level):

    for every j there are integer polynomials (m_j, u_j, e0_j, e1_j) with
    2 c_j = f(m_j, u_j, e0_j, e1_j) := (pk0 u + e0 + Delta m,  pk1 u + e1)  in R_Q,
    m_j zero outside S, and (proven) ||m_j|| <= 2^(D + slack), ||u_j||, ||e_j|| <= bounds

(honest: m_j in [0, 2^D) on S, u ternary, |e| <= 20). f is R-linear, so the classic
amortised protocol works, interactive (the verifier's challenge is drawn only after the
ciphertexts and the commitment are fixed; no Fiat-Shamir). The noise components e0, e1
are not sent: they are rounded away (as in Bai-Galbraith / Dilithium). With q_r the
smallest prime of index 1..level and, for X in R_Q, H(X) the coefficient-wise high part
floor(X / q_r) of the integers X in [0, Q) and L(X) = X mod q_r, and
g(m, u) = (pk0 u + Delta m, pk1 u) (f without its noise):

1. P samples V masks y_k for the components m, u (every coefficient uniform in
   [-2^r, 2^r), r = bitlen(n * bound) + k_rej per component) and sends
   h = SHA-256(H(g(y_1)), .., H(g(y_V))) (the commitments compressed to one hash: the
   verifier recomputes them).
2. V sends a fresh 128-bit seed; both expand it into M in C^(V x n) (``challenge``; the
   support S must be closed under i, so M_kj w_j stays on S with the same coefficient
   magnitudes, and the shift bounds are those of binary challenges).
3. P computes z_k = y_k + sum_j M_kj w_j. If any coefficient falls outside
   [-2^r + n bound, 2^r - n bound), or a coefficient of L(X_k) with
   X_k = g(z_k) - sum_j M_kj c_j = g(y_k) - sum_j M_kj (e0_j, e1_j) falls outside
   [beta, q_r - beta), beta = n * E_BOUND (so H(X_k) = H(g(y_k))), it sends "restart"
   and goes back to 1 (at most MAX_ATTEMPTS times); otherwise it sends the z_k, each
   coefficient packed at r + 1 bits.
4. V checks every coefficient is in range and
   SHA-256(H(g(z_1) - sum_j M_1j c_j), ..) == h (exact RNS arithmetic in the Go layer;
   H by one pass over the residues, no CRT).

Soundness (docs/protocols/crisp.md has the argument): if some 2 c_j has no preimage with
||m|| <= 2^(r_m + 2), ||u|| <= 2^(r_u + 2), ||e0||, ||e1|| < 2 q_r, then for any fixed
commitment at most a fifth of the challenge rows C^n are answerable for each k (two
answerable rows differing only in position j, by delta = M_kj - M'_kj, give equal high
parts, i.e. g(z - z') - delta c_j = d with |d| < q_r; rho = 2 / delta lies in Z[i],
at most doubles a coefficient and keeps S, so 2 c_j = f(rho (z - z'), -rho d)), so one
attempt passes with probability <= 5^-V, all attempts with <= MAX_ATTEMPTS 5^-V <= 2^-sec
(plus a SHA-256 collision). The verifier therefore computes on 2 c_j
(``keyproof.ProvenBounds``: these bounds together with the key proof's).
Zero knowledge: given acceptance, each response coefficient is exactly uniform on its
range whatever the witness (rejection sampling with uniform masks); the band condition
of step 3 is a predicate of X_k, which the verifier computes from the responses and the
ciphertexts, and the hash is recomputable from them; a rejected attempt reveals only the
hash of the commitment (the rounded image of huge uniform masks: a uniform string in the
random-oracle model, computationally hiding without it) and the rejection event, whose
probability does not depend on the witness.
"""

from __future__ import annotations

import hmac
import math

import numpy as np

from secinfer.crypto.he import linmap
from secinfer.crypto.prg import PRG
from secinfer.errors import ConfigError, FrameError

SEC = 40                 # soundness 2^-SEC per proof, over all attempts
MAX_ATTEMPTS = 16        # restarts after a rejection; 2^-3 per attempt for an honest prover
N_MAX = 64               # ciphertexts per proof (callers split larger batches)
MAX_D = 160              # digit bits (the responses then stay within the Go layer's 8 limbs)
U_BOUND = 1              # ternary u
E_BOUND = 20             # Lattigo's Gaussian error, sigma 3.2 cut at 6 sigma (19.2)
E_PROVEN = 1 << 41       # |e0|, |e1| < q_r, the rounding prime (checked below 2^41)
LB = linmap.LIMB_BITS
_MASK = (1 << LB) - 1
HASH_BYTES = 32
SEED_BYTES = 16


CHAL_SET = 5             # challenge entries {0, 1, -1, i, -i}, i = X^(N/2) (binary: 2)
FACTOR = 2               # accepted proofs guarantee a short preimage of FACTOR * c_j


def rows_for(sec: int = SEC, chal_set: int = CHAL_SET) -> int:
    """V: MAX_ATTEMPTS * chal_set^-V <= 2^-sec."""
    return math.ceil((sec + math.log2(MAX_ATTEMPTS)) / math.log2(chal_set) - 1e-9)


def rejection_bits(n_ring: int, sec: int = SEC, components: int = 4, chal_set: int = CHAL_SET) -> int:
    """k_rej: masks 2^k_rej times wider than the largest shift, so one attempt is rejected
    with probability <= (#coefficients) 2^-k_rej <= 2^-3 (#coefficients <= V * components * N)."""
    return math.ceil(math.log2(rows_for(sec, chal_set) * components * n_ring)) + 3


class Geometry:
    """Sizes of one proof: V rows; per sent component (m on the support, u; e0 and e1 are
    rounded away) the shift bound n * bound, the mask exponent r, the packed width r + 1
    and the Go limb count; ``beta`` = n * E_BOUND, the band margin of the rounding."""

    names = ("m", "u")

    def __init__(self, n_ring: int, n: int, support_size: int, D: int, sec: int = SEC) -> None:
        if not 1 <= n <= N_MAX:
            raise ConfigError(f"popk: {n} ciphertexts in one proof (1..{N_MAX})")
        if not 1 <= D <= MAX_D or not 0 < support_size <= n_ring:
            raise ConfigError(f"popk: digit bits must be 1..{MAX_D} and the support within N")
        self.N, self.n, self.D = n_ring, n, D
        self.V = rows_for(sec)
        self.k = rejection_bits(n_ring, sec)
        self.count = [support_size, n_ring]
        self.shift = [n * ((1 << D) - 1), n * U_BOUND]
        self.beta = n * E_BOUND
        _widths(self)
        self.go_limbs = [self.limbs[0], self.limbs[1], 0, 0]   # e0, e1: no limbs


def _widths(g) -> None:
    """Mask exponents r, packed widths, limb counts and payload size of a geometry
    (``g.shift``, ``g.count``, ``g.k``, ``g.V`` set). A value of component i travels
    as g.limbs[i] limbs: the low ones of LB bits, the top one signed with the rest (at most
    63 bits with its sign, so values in [-2^r, 2^r] fit: ``_limb_count``); it is packed
    the same way, the top field r + 1 - LB (L - 1) bits wide."""
    g.r = [s.bit_length() + g.k for s in g.shift]
    if max(g.r) > 300:
        raise ConfigError("popk: responses wider than 300 bits")
    g.width = [r + 1 for r in g.r]
    g.limbs = [_limb_count(w) for w in g.width]
    g.fields = [[LB] * (n - 1) + [w - LB * (n - 1)] for w, n in zip(g.width, g.limbs)]
    g.payload_bytes = sum(-(-g.V * c * f // 8) for c, fs in zip(g.count, g.fields) for f in fs)


def _limb_count(width: int) -> int:
    """Fewest limbs whose top limb (signed int64) holds a width-bit value after the low
    limbs took LB bits each: LB (L - 1) + 62 >= width."""
    return 1 if width <= 62 else 1 + -(-(width - 62) // LB)


def challenge(seed: bytes, v: int, n: int) -> np.ndarray:
    """The challenge matrix M (V x n, uint8) expanded from the verifier's seed, entries
    coded 0..4 for {0, 1, -1, i, -i} (i = X^(N/2)): 64-bit words reduced mod 5, at
    statistical distance < 5 * 2^-64 per entry from uniform (< 2^-50 for a whole matrix)."""
    return (PRG(bytes(seed), "crisp-popk/challenge").uint64((v, n)) % np.uint64(CHAL_SET)).astype(np.uint8)


def binary_challenge(seed: bytes, v: int, n: int) -> np.ndarray:
    """A binary challenge matrix (entries 0, 1: the key proof, ``keyproof``)."""
    return PRG(bytes(seed), "crisp-popk/challenge").bits((v, n))


def times_i(w: np.ndarray) -> np.ndarray:
    """i w = X^(N/2) w for polynomials given on a support closed under +N/2 (all N
    coefficients, or ``support`` = concat(base, N/2 + base)): rows (.., 2h) -> the
    coefficient at base position p becomes -w[p + N/2], the one at N/2 + p becomes w[p]."""
    h = w.shape[-1] // 2
    return np.concatenate([-w[..., h:], w[..., :h]], axis=-1)


def _split(x: int, n: int) -> list:
    """A Python integer as n limbs: the low ones in [0, 2^LB), the top one the rest."""
    out = []
    for _ in range(n - 1):
        out.append(x & _MASK)
        x >>= LB
    return out + [x]


def _norm(limbs: list) -> list:
    """The same value sum_l limbs[l] 2^(LB l) with every limb but the top in [0, 2^LB)
    (carries move up; arithmetic shifts floor, so negative limbs borrow)."""
    out = list(limbs)
    for l in range(len(out) - 1):
        out[l + 1] = out[l + 1] + (out[l] >> LB)
        out[l] = out[l] & _MASK
    return out


def _bit_positions(n: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """Word index and bit shift of value i's first bit in a stream of w-bit values packed
    LSB first into little-endian 64-bit words (value i occupies bits [i w, i w + w))."""
    pos = np.arange(n, dtype=np.uint64) * np.uint64(w)
    return (pos >> np.uint64(6)).astype(np.int64), pos & np.uint64(63)


def _pack_field(v: np.ndarray, w: int) -> bytes:
    """Values below 2^w (w <= 64) as one LSB-first bit stream, ceil(n w / 8) bytes (the
    byte order of numpy's packbits(bitorder="little") over each value's w low bits).
    Vectorised: the parts of the values starting in a word are OR-reduced into it, and
    the (at most one) value straddling into the next word adds its high part there."""
    v = np.ascontiguousarray(v, dtype=np.uint64).reshape(-1)
    n = v.size
    k, sh = _bit_positions(n, w)
    words = np.zeros((n * w + 63) // 64 + 1, dtype=np.uint64)
    if n:
        starts = np.flatnonzero(np.concatenate(([True], k[1:] != k[:-1])))
        words[k[starts]] = np.bitwise_or.reduceat(v << sh, starts)
        over = np.flatnonzero(sh > np.uint64(64 - w))
        words[k[over] + 1] |= v[over] >> (np.uint64(64) - sh[over])
    return words.astype("<u8").tobytes()[:-(-n * w // 8)]


def _unpack_field(buf: bytes, rows: int, count: int, w: int) -> np.ndarray:
    """Inverse of :func:`_pack_field` for rows x count values of w bits (int64)."""
    n = rows * count
    nbytes = -(-n * w // 8)
    words = np.zeros((n * w + 63) // 64 + 1, dtype="<u8")
    words.view(np.uint8)[:nbytes] = np.frombuffer(buf, np.uint8, count=nbytes)
    k, sh = _bit_positions(n, w)
    out = words[k] >> sh
    up = sh > np.uint64(0)
    out[up] |= words[k[up] + 1] << (np.uint64(64) - sh[up])
    if w < 64:
        out &= np.uint64((1 << w) - 1)
    return out.reshape(rows, count).astype(np.int64)


class _Side:
    def __init__(self, params, pk, level: int, delta: int, D: int, support, n: int, sec: int) -> None:
        self.params, self.pk, self.level, self.delta = params, pk, int(level), int(delta)
        self.support = np.asarray(support, np.int64).reshape(-1)
        if self.support.size and (self.support.min() < 0 or self.support.max() >= params.n
                                  or np.any(np.diff(self.support) <= 0)):
            raise ConfigError("popk: support must be increasing positions within N")
        half = params.n // 2
        h = self.support.size // 2
        if self.support.size % 2 or np.any(self.support[h:] != self.support[:h] + half):
            raise ConfigError("popk: the support must be closed under i = X^(N/2): base, then N/2 + base")
        self.g = Geometry(params.n, n, self.support.size, D, sec)
        self.rp = round_prime(params, self.level)
        self.q_r = int(params.q[self.rp])

    def _challenge(self, seed: bytes) -> np.ndarray:
        return challenge(seed, self.g.V, self.g.n)

    def _rows(self, parts) -> np.ndarray:
        """Go-layer argument rows (V, sum L_x N) from per-component limb lists."""
        g, n_ring = self.g, self.params.n
        out = np.zeros((g.V, sum(g.limbs) * n_ring), np.int64)
        off = 0
        for i, limbs in enumerate(parts):
            cols = self.support if i == 0 else slice(None)
            for l, part in enumerate(limbs):
                out[:, off + l * n_ring:off + (l + 1) * n_ring][:, cols] = part
            off += g.limbs[i] * n_ring
        return out

    def _hash(self, parts, cts=(), m=None, low=None) -> bytes:
        return linmap.image_hash(self.params, self.pk, self.level, self.delta, self.g.go_limbs,
                                 self._rows(parts), cts, m, round_prime=self.rp, low=low)

    def _offsets(self, i: int) -> tuple[list, list]:
        """(2^r - shift, the exclusive limit 2^(r+1) - 2 shift) of component i, as limbs."""
        g = self.g
        n = g.limbs[i]
        return _split((1 << g.r[i]) - g.shift[i], n), _split((1 << g.width[i]) - 2 * g.shift[i], n)


def round_prime(params, level: int) -> int:
    """Index of the rounding prime q_r: the smallest of indices 1..level (below 2^41)."""
    if level < 1:
        raise ConfigError("popk: the rounded proof needs level >= 1")
    rp = min(range(1, level + 1), key=lambda i: params.q[i])
    if params.q[rp] >= E_PROVEN:
        raise ConfigError(f"popk: rounding prime {params.q[rp]} is not below 2^41")
    return rp


def _inside(t: list, lim: list) -> np.ndarray:
    """0 <= t < lim elementwise, for normalised limbs t and the limbs of an integer lim."""
    less = np.zeros(t[0].shape, bool)
    equal = np.ones(t[0].shape, bool)
    for tl, ll in zip(reversed(t), reversed(lim)):
        less |= equal & (tl < ll)
        equal &= tl == ll
    return (t[-1] >= 0) & less


def _exact_sum(m: np.ndarray, w: np.ndarray) -> np.ndarray:
    """sum_j M_kj w_j for M (V x n) coded 0..4 (``challenge``; a binary M is the special
    case) and int64 polynomials w (n x c) on a support closed under i: row-selected int64
    additions (exact while |sum| < 2^63; honest witnesses are < 2^58)."""
    acc = np.zeros((m.shape[0], w.shape[1]), np.int64)
    rot = times_i(w)
    for j in range(w.shape[0]):
        col = m[:, j]
        acc[col == 1] += w[j]
        acc[col == 2] -= w[j]
        acc[col == 3] += rot[j]
        acc[col == 4] -= rot[j]
    return acc


def _masks(g: Geometry, prg: PRG) -> list:
    """y_1..y_V per component as limb lists, every coefficient uniform in [-2^r, 2^r)."""
    ys = []
    for i in range(len(g.count)):
        shape = (g.V, g.count[i])
        raw = [(prg.uint64(shape) & np.uint64((1 << f) - 1)).astype(np.int64) for f in g.fields[i]]
        ys.append(_norm([x - p for x, p in zip(raw, _split(1 << g.r[i], g.limbs[i]))]))
    return ys


def _witness_limbs(w) -> list:
    """A component's witnesses (n, count) as a limb list: an int64 array is one limb (its
    sums over n <= 64 rows must stay below 2^63), a list of arrays is already limbs."""
    return list(w) if isinstance(w, (list, tuple)) else [w]


def precommit(params, pk, level, delta, D, support, n: int, prg: PRG, sec: int = SEC) -> tuple:
    """The witness-independent first message, ahead of time: (mask seed, h, low residues
    L(g(y_k)), (V, 2, N) uint64) for a proof of n ciphertexts with this geometry. Use it
    once (``Prover.commit(pre)``)."""
    side = _Side(params, pk, level, delta, D, support, n, sec)
    seed = prg.seed()
    low = np.empty((side.g.V, 2, params.n), np.uint64)
    return seed, side._hash(_masks(side.g, PRG(seed, "crisp-popk/masks")), low=low), low


def expand_masks(pre: tuple, n_ring: int, n: int, support_size: int, D: int, sec: int = SEC) -> tuple:
    """(seed, h, low) -> (seed, h, low, masks): regenerate a precommitment's masks ahead
    of use (idle time), for a Prover of exactly this geometry. Each is still used once."""
    g = Geometry(n_ring, n, support_size, D, sec)
    return pre[0], pre[1], pre[2], _masks(g, PRG(pre[0], "crisp-popk/masks"))


class Prover(_Side):
    """Client side. ``witnesses``: per ciphertext (m over all N coefficients, u, e0, e1),
    int64 arrays of length N; m must vanish outside the support."""

    def __init__(self, params, pk, level, delta, D, support, witnesses, prg: PRG, sec: int = SEC) -> None:
        super().__init__(params, pk, level, delta, D, support, len(witnesses), sec)
        # m: int64 (N,) per ciphertext, or (L, N) limbs of LB bits (rlwe.encode_limbs' format)
        m = np.stack([np.asarray(w[0], np.int64).reshape(-1, params.n) for w in witnesses], axis=1)
        outside = np.ones(params.n, bool)
        outside[self.support] = False
        if np.any(m[:, :, outside]):
            raise ConfigError("popk: a message has coefficients outside the proof's support")
        rows = [np.stack([np.asarray(w[i], np.int64) for w in witnesses]) for i in (1, 2, 3)]
        m_sup = [part[:, self.support] for part in m]
        self.w = [m_sup if len(m_sup) > 1 else m_sup[0], rows[0]]     # the sent components m, u
        self.rounded = rows[1:]                    # e0, e1: rounded away (the band check)
        self.prg = prg
        self._y = self._low = None

    def commit(self, pre: tuple | None = None) -> bytes:
        """Fresh masks; returns h (32 bytes). ``pre`` = (seed, h, low) from
        :func:`precommit` (made offline for the same geometry: the masks are regenerated
        from the seed), or (seed, h, low, masks) with the masks already regenerated
        (:func:`expand_masks`)."""
        if pre is not None:
            self._y = pre[3] if len(pre) == 4 else _masks(self.g, PRG(pre[0], "crisp-popk/masks"))
            self._low = pre[2]
            return pre[1]
        self._y = _masks(self.g, self.prg)
        self._low = None if self.rounded is None else np.empty((self.g.V, 2, self.params.n), np.uint64)
        return self._hash(self._y, low=self._low)

    def respond(self, seed: bytes, force: bool = False) -> bytes | None:
        """Packed responses for the challenge from ``seed``, or None (reject: commit again).
        ``force`` (tests: a cheating prover) packs them even when out of range."""
        if self._y is None:
            raise ConfigError("popk: respond() without a fresh commit()")
        g = self.g
        mf = self._challenge(seed)
        ok, ts = True, []
        for i, y in enumerate(self._y):
            c, lim = self._offsets(i)
            t = [yl + cl for yl, cl in zip(y, c)]               # t = y + M w + c, then normalised
            for l, part in enumerate(_witness_limbs(self.w[i])):   # limb by limb (sums < 2^46)
                top = min(l, len(t) - 1)
                t[top] = t[top] + (_exact_sum(mf, part) << (LB * (l - top)))
            t = _norm(t)
            ok = ok and bool(np.all(_inside(t, lim)))
            ts.append(t)
        # L(X_k) = L(g(y_k)) - sum_j M_kj e_j must keep beta from the ends of [0, q_r)
        if self.rounded is not None:
            for c, e in enumerate(self.rounded):
                band = self._low[:, c].astype(np.int64) - _exact_sum(mf, e)
                ok = ok and bool(np.all((band >= g.beta) & (band < self.q_r - g.beta)))
        self._y = self._low = None          # a mask is never used for two challenges
        if not ok and not force:
            return None
        out = []
        for i, t in enumerate(ts):
            for part, fw in zip(t, g.fields[i]):
                out.append(_pack_field(part.astype(np.uint64) & np.uint64((1 << fw) - 1), fw))
        return b"".join(out)


class Verifier(_Side):
    """Server side, for the received (already validated) ciphertexts ``cts``."""

    CHECK = "crisp-popk"

    def __init__(self, params, pk, level, delta, D, support, cts, sec: int = SEC) -> None:
        super().__init__(params, pk, level, delta, D, support, len(cts), sec)
        self.cts = list(cts)

    def check(self, h: bytes, seed: bytes, payload: bytes) -> tuple[bool, str]:
        """(accepted, reason). A payload of the wrong length is a FrameError."""
        g = self.g
        if len(h) != HASH_BYTES or len(payload) != g.payload_bytes:
            raise FrameError(f"{self.CHECK}: response of {len(payload)} bytes, expected {g.payload_bytes}")
        pos, parts = 0, []
        for i in range(len(g.count)):
            vals = []
            for fw in g.fields[i]:
                nb = -(-g.V * g.count[i] * fw // 8)
                vals.append(_unpack_field(payload[pos:pos + nb], g.V, g.count[i], fw))
                pos += nb
            c, lim = self._offsets(i)
            if not np.all(_inside(vals, lim)):
                return False, f"response component {g.names[i]} out of range"
            parts.append(_norm([v - cl for v, cl in zip(vals, c)]))
        m = self._challenge(seed)
        if not hmac.compare_digest(self._hash(parts, self.cts, m), bytes(h)):
            return False, "f(z) - M c does not match the commitment"
        return True, ""
