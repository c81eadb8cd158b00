"""ZKB++ proofs of correct certified-data encryption (Python API over ``go/zkbpp``).

The statement [CRISP-certified Sec. 4-6.1, summarised in issue #19]: for public signed
digests h_i, a public key (pk0, pk1), a ciphertext (c0, c1) modulo Q and a BDOP
commitment (C1, C2) to the encryption noises, the prover knows messages msg_i, u, e0, e1
and the commitment randomness r_0..r_4 with

* h_i = SHA-256(msg_i)                       (Boolean part, 447-bit blocks chained)
* d_i = the data point(s) inside msg_i        (their bits converted to Z_Q; a message may
                                               carry a batch of points, ``points``)
* (c0, c1) = (pk0 u + e0 + E d, pk1 u + e1)   (exact CKKS encoding E, encryption)
* C1 = r0 + sum a_j r_j, C2_j = r_j + b_j r4 + (u, e0, e1)_j   (BDOP, n = 1, k = 5)

proven with ZKB++ [Chase et al., CCS 2017]: MPC-in-the-head over a (2,3)-decomposition,
Fiat-Shamir with SHA-256, 128-bit seeds, SHA-256 commitments to the views, two of three
views opened per repetition. Soundness error (2/3)^reps: 219 repetitions give 2^-128.1
[CRISP-certified Sec. 6.1: "kappa = 128, which corresponds to 219 iterations"].

The shortness of u, e0, e1 is *not* part of this circuit: it is the BDOP bound proof's
job (``secinfer.crypto.zk.bdop``), on the same commitment.

Every proof is bound to a verifier-chosen session context (``ctx``): the challenge is
SHA-256 over the statement, the context and every repetition's commitments and output
hashes, so a proof from another session, or made for a guessed context, fails.
"""

from __future__ import annotations

import ctypes as C
import math
from dataclasses import dataclass

import numpy as np

from secinfer.native import lib as N
from secinfer.crypto.he.objects import Plaintext
from secinfer.crypto.he.params import CKKSParams
from secinfer.errors import ConfigError, SerializationError

SECURITY_BITS = 128
PRODUCTION_REPS = 219   # [CRISP-certified Sec. 6.1]
NUM_SECRET_POLYS = 8    # u, e0, e1, r0..r4
NUM_PUBLIC_POLYS = 9    # pk0, pk1, a1..a4, b1..b3
NUM_OUTPUT_POLYS = 6    # c0, c1, C1, C2_1..3

FAIL_CHALLENGE, FAIL_VIEW, FAIL_DIGEST, FAIL_ENCRYPTION, FAIL_MALFORMED = 1, 2, 4, 8, 16

_ERRORS = {2: SerializationError, 4: ConfigError}


def soundness_bits(reps: int) -> float:
    """-log2 of ZKB++'s soundness error (2/3)^reps (3-special soundness)."""
    return reps * math.log2(3 / 2)


def reps_for(bits: int = SECURITY_BITS) -> int:
    return math.ceil(bits / math.log2(3 / 2))


@dataclass(frozen=True)
class ZKConfig:
    """The circuit's shape. ``primes``: the ciphertext modulus at the encryption level."""

    log_n: int
    primes: tuple[int, ...]
    reps: int
    msg_bytes: int
    data_bits: int
    n_msgs: int
    log_scale: int
    points: int = 1     # data points per message (a signed batch), its first bytes

    @property
    def n(self) -> int:
        return 1 << self.log_n

    @property
    def n_points(self) -> int:
        """Data points in all (message i carries points i*points .. (i+1)*points - 1)."""
        return self.n_msgs * self.points

    @property
    def soundness_bits(self) -> float:
        return soundness_bits(self.reps)

    def _arrays(self):
        cfg = np.array([self.log_n, self.reps, self.msg_bytes, self.data_bits, self.n_msgs,
                        self.log_scale, len(self.primes), self.points], dtype=np.int64)
        return cfg, np.array(self.primes, dtype=np.uint64)


@dataclass
class Statement:
    """Public input: digests (n_msgs x 32 bytes), public polys (9, L, N), outputs (6, L, N)."""

    digests: list[bytes]
    public: np.ndarray
    output: np.ndarray


@dataclass
class Witness:
    msgs: list[bytes]
    polys: np.ndarray   # (8, N) int64: u, e0, e1, r0..r4 (centred)


def _digests(cfg: ZKConfig, digests) -> np.ndarray:
    if len(digests) != cfg.n_msgs or any(len(d) != 32 for d in digests):
        raise ConfigError(f"need {cfg.n_msgs} SHA-256 digests")
    return np.frombuffer(b"".join(digests), dtype=np.uint8).copy()


def _polys(cfg: ZKConfig, arr, count: int, what: str) -> np.ndarray:
    a = np.ascontiguousarray(arr, dtype=np.uint64)
    if a.shape != (count, len(cfg.primes), cfg.n):
        raise ConfigError(f"{what} must have shape ({count}, {len(cfg.primes)}, {cfg.n}), "
                          f"not {a.shape}")
    return a


def _witness(cfg: ZKConfig, w: Witness):
    if len(w.msgs) != cfg.n_msgs or any(len(m) != cfg.msg_bytes for m in w.msgs):
        raise ConfigError(f"need {cfg.n_msgs} messages of {cfg.msg_bytes} bytes")
    msgs = np.frombuffer(b"".join(w.msgs), dtype=np.uint8).copy()
    polys = np.ascontiguousarray(w.polys, dtype=np.int64)
    if polys.shape != (NUM_SECRET_POLYS, cfg.n):
        raise ConfigError(f"witness polynomials must have shape ({NUM_SECRET_POLYS}, {cfg.n})")
    return msgs, polys


def prove(cfg: ZKConfig, st: Statement, w: Witness, seed: bytes, ctx: bytes) -> bytes:
    """A proof that ``w`` satisfies ``st``, bound to the session context ``ctx``;
    ``seed``: >= 16 bytes from the injected PRG (every player's tape derives from it)."""
    c, pr = cfg._arrays()
    dg = _digests(cfg, st.digests)
    pub = _polys(cfg, st.public, NUM_PUBLIC_POLYS, "public polynomials")
    out = _polys(cfg, st.output, NUM_OUTPUT_POLYS, "output polynomials")
    msgs, polys = _witness(cfg, w)
    ptr, n = N.P_bytes(), N.csize(0)
    N.call("zk_prove", N.ptr(c, N.i64), N.ptr(pr, N.u64), N.ptr(dg, C.c_ubyte), N.ptr(pub, N.u64),
           N.ptr(out, N.u64), N.ptr(msgs, C.c_ubyte), N.ptr(polys, N.i64), bytes(seed), len(seed),
           bytes(ctx), len(ctx), C.byref(ptr), C.byref(n), errors=_ERRORS, default=ConfigError)
    return N.take_bytes(ptr, n.value)


@dataclass(frozen=True)
class Verdict:
    """Which checks a proof failed (all are evaluated)."""

    fails: int

    @property
    def ok(self) -> bool:
        return self.fails == 0

    challenge_ok = property(lambda self: not self.fails & FAIL_CHALLENGE)
    view_ok = property(lambda self: not self.fails & FAIL_VIEW)
    digest_ok = property(lambda self: not self.fails & FAIL_DIGEST)
    encryption_ok = property(lambda self: not self.fails & FAIL_ENCRYPTION)
    malformed = property(lambda self: bool(self.fails & FAIL_MALFORMED))


def verify(cfg: ZKConfig, st: Statement, proof, ctx: bytes) -> Verdict:
    """``proof``: bytes or a uint8 array (read in place, not copied: proofs are hundreds
    of MB)."""
    c, pr = cfg._arrays()
    pb = np.frombuffer(proof, dtype=np.uint8)
    n = pb.size
    if n == 0:
        pb = np.zeros(1, dtype=np.uint8)      # a valid pointer; the length below stays 0
    dg = _digests(cfg, st.digests)
    pub = _polys(cfg, st.public, NUM_PUBLIC_POLYS, "public polynomials")
    out = _polys(cfg, st.output, NUM_OUTPUT_POLYS, "output polynomials")
    fails = C.c_int(0)
    N.call("zk_verify", N.ptr(c, N.i64), N.ptr(pr, N.u64), N.ptr(dg, C.c_ubyte), N.ptr(pub, N.u64),
           N.ptr(out, N.u64), N.ptr(pb, C.c_ubyte), n, bytes(ctx), len(ctx), C.byref(fails),
           errors=_ERRORS, default=ConfigError)
    return Verdict(int(fails.value))


def evaluate(cfg: ZKConfig, public, w: Witness) -> tuple[list[bytes], np.ndarray]:
    """The circuit in the clear (one simulated repetition, shares recombined): the digests
    and the six output polynomials (6, L, N) that the witness produces."""
    c, pr = cfg._arrays()
    pub = _polys(cfg, public, NUM_PUBLIC_POLYS, "public polynomials")
    msgs, polys = _witness(cfg, w)
    dig = np.zeros(32 * cfg.n_msgs, dtype=np.uint8)
    out = np.zeros((NUM_OUTPUT_POLYS, len(cfg.primes), cfg.n), dtype=np.uint64)
    N.call("zk_evaluate", N.ptr(c, N.i64), N.ptr(pr, N.u64), N.ptr(pub, N.u64),
           N.ptr(msgs, C.c_ubyte), N.ptr(polys, N.i64), N.ptr(dig, C.c_ubyte), N.ptr(out, N.u64),
           errors=_ERRORS, default=ConfigError)
    raw = dig.tobytes()
    return [raw[32 * i:32 * i + 32] for i in range(cfg.n_msgs)], out


def encode(cfg: ZKConfig, data) -> np.ndarray:
    """Residues (L, N) of the exact CKKS encoding m = E d of integer data points: slot j
    holds d_j at scale 2^log_scale, with E = round(2^log_scale * 2/N * cos(pi g_j k / N))
    (Lattigo's embedding; the rounding sits in E so that encoding is linear over Z)."""
    c, pr = cfg._arrays()
    d = np.ascontiguousarray(data, dtype=np.int64).reshape(-1)
    if d.size != cfg.n_points:
        raise ConfigError(f"need {cfg.n_points} data points, got {d.size}")
    out = np.zeros((len(cfg.primes), cfg.n), dtype=np.uint64)
    N.call("zk_encode", N.ptr(c, N.i64), N.ptr(pr, N.u64), N.ptr(d, N.i64), N.ptr(out, N.u64),
           errors=_ERRORS, default=ConfigError)
    return out


def plaintext(params: CKKSParams, residues: np.ndarray, level: int, log_scale: int) -> Plaintext:
    """A slot-encoded CKKS plaintext at ``level`` with the given coefficient residues."""
    r = np.ascontiguousarray(residues, dtype=np.uint64)
    if r.shape != (level + 1, params.n):
        raise ConfigError(f"residues must have shape ({level + 1}, {params.n})")
    h = N.new_handle("zk_plaintext", params.handle, int(level), int(log_scale), N.ptr(r, N.u64))
    return Plaintext(params, h)
