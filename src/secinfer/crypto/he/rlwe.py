"""RLWE in the coefficient domain, LWE extraction and repacking, and encryption with
caller-visible randomness.

Coefficient encoding: a vector v becomes the plaintext polynomial sum_j round(v_j * scale) X^j
(no CKKS slot transform). This is what the hybrid scheme works with [SAFHIRE Sec. 2.1,
Fig. 3 steps 2-10]: the client encrypts layer inputs as polynomial coefficients, the server
extracts LWE ciphertexts of chosen coefficients (partial extraction), forms linear
combinations with small integer weights, and packs the results back into one RLWE
ciphertext by automorphism (trace) key switching [SAFHIRE Sec. 2.3-2.4].

For SAFHIRE use :mod:`secinfer.crypto.he.packing` instead of :func:`extract_lwe` /
:func:`pack_lwe`: batches as numpy arrays, partial trace extraction at level gamma (the
client's m(X^d) powers), exact batched linear layers (``lwe_linear``), packing with
N/2^gamma - 1 key switches per N coefficients, ``threads``, and the b = 8/12/16 profiles.
:func:`pack_lwe` keeps its signature and runs the same tree packer at depth 0.
"""

from __future__ import annotations

import ctypes as C

import numpy as np

from secinfer.crypto.he import _native as N
from secinfer.crypto.he.errors import HEArgumentError
from secinfer.crypto.he.evaluator import Evaluator
from secinfer.crypto.he.linmap import delta_bytes
from secinfer.crypto.he.objects import Ciphertext, LWEBatch, Plaintext, PublicKey, SecretKey
from secinfer.crypto.he.params import CKKSParams


def coeff_encode(params: CKKSParams, values, scale: float, level: int = 0) -> Plaintext:
    """Plaintext with coefficients round(values[j] * scale) (len(values) <= N)."""
    v = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
    h = N.new_handle("he_coeff_encode", params.handle, N.ptr(v, N.f64), len(v), int(level),
                     float(scale))
    return Plaintext(params, h)


def encode_limbs(params: CKKSParams, a: np.ndarray, b: np.ndarray, log_scale: int, level: int = 0,
                 delta: int | None = None) -> Plaintext:
    """Plaintext with coefficients Delta a_j + b_j, exactly, with Delta = 2^log_scale or the
    integer ``delta`` (any positive integer, e.g. the inverse of a plaintext modulus mod Q)
    and scale metadata 2^log_scale:
    ``a``, ``b`` are signed multi-limb integers, int64 arrays (L, N) with
    x_j = sum_l x[l, j] 2^(40 l) (``linmap.to_limbs``), 1 <= L <= 8. For coefficients far
    beyond float64 (crisp's mask plaintexts -Delta R + F) in one call."""
    la = np.ascontiguousarray(a, dtype=np.int64)
    lb = np.ascontiguousarray(b, dtype=np.int64)
    for x in (la, lb):
        if x.ndim != 2 or x.shape[1] != params.n:
            raise HEArgumentError(f"limb arrays must have shape (L, {params.n})")
    db = np.zeros(1, np.uint8) if delta is None else delta_bytes(delta)
    h = N.new_handle("he_encode_limbs", params.handle, int(level), int(log_scale),
                     N.ptr(db, N.C.c_ubyte), 0 if delta is None else db.size, la.shape[0],
                     N.ptr(la, N.i64), lb.shape[0], N.ptr(lb, N.i64))
    return Plaintext(params, h)


def coeff_decode(params: CKKSParams, pt: Plaintext, scale: float) -> np.ndarray:
    """Centred coefficients of ``pt`` divided by ``scale`` (length N, float64)."""
    out = np.zeros(params.n, dtype=np.float64)
    N.call("he_coeff_decode", params.handle, params._own(pt, "plaintext"), N.ptr(out, N.f64),
           params.n, float(scale))
    return out


def coeff_encrypt(params: CKKSParams, values, key: PublicKey | SecretKey, scale: float,
                  level: int = 0) -> Ciphertext:
    with coeff_encode(params, values, scale, level) as pt:
        return params.encrypt(pt, key)


def coeff_decrypt(params: CKKSParams, ct: Ciphertext, sk: SecretKey, scale: float) -> np.ndarray:
    with params.decrypt(ct, sk) as pt:
        return coeff_decode(params, pt, scale)


def extract_lwe(params: CKKSParams, ct: Ciphertext, indices) -> LWEBatch:
    """LWE ciphertexts of the chosen coefficients of ``ct`` [SAFHIRE Sec. 4.3 partial extraction]."""
    idx = np.ascontiguousarray(indices, dtype=np.int64).reshape(-1)
    h = N.new_handle("he_lwe_extract", params.handle, params._own(ct, "ciphertext"),
                     N.ptr(idx, N.i64), len(idx))
    return LWEBatch(params, h)


def lwe_from_arrays(params: CKKSParams, b: np.ndarray, a: np.ndarray, log_scale: float = 0.0) -> LWEBatch:
    """Inverse of :meth:`LWEBatch.to_arrays` (values are checked against the moduli)."""
    b = np.ascontiguousarray(b, dtype=np.uint64)
    a = np.ascontiguousarray(a, dtype=np.uint64)
    if b.ndim != 2 or a.shape != (b.shape[0], b.shape[1], params.n):
        raise HEArgumentError("b must be (count, L) and a (count, L, N)")
    h = N.new_handle("he_lwe_import", params.handle, b.shape[1] - 1, b.shape[0],
                     N.ptr(b, N.u64), N.ptr(a, N.u64), float(log_scale))
    return LWEBatch(params, h)


def lwe_decrypt(params: CKKSParams, batch: LWEBatch, sk: SecretKey, scale: float) -> np.ndarray:
    """(b + <a, s>) centred / scale for each member (tests and debugging)."""
    out = np.zeros(len(batch), dtype=np.float64)
    N.call("he_lwe_decrypt", params.handle, params._own(sk, "sk"),
           params._own(batch, "LWE batch"), N.ptr(out, N.f64), float(scale))
    return out


def spread_positions(count: int, n: int) -> np.ndarray:
    """Positions i * (n / count') for count' = next power of two >= count: the layout whose
    packing shares the trace (count' - 1 + log2(n / count') key switches in total)."""
    if count < 1 or count > n:
        raise HEArgumentError(f"cannot pack {count} values into {n} coefficients")
    cp = 1 << (count - 1).bit_length()
    return np.arange(count, dtype=np.int64) * (n // cp)


def pack_lwe(ev: Evaluator, batch: LWEBatch, positions=None) -> Ciphertext:
    """One RLWE ciphertext whose coefficient positions[t] encrypts batch[t] and whose other
    coefficients are zero [SAFHIRE Sec. 2.4]. Default positions: :func:`spread_positions`.
    Needs evaluation keys made with ``pack=True``."""
    params = ev.params
    if positions is None:
        positions = spread_positions(len(batch), params.n)
    pos = np.ascontiguousarray(positions, dtype=np.int64).reshape(-1)
    h = N.new_handle("he_lwe_pack", params.handle, ev.handle, params._own(batch, "LWE batch"),
                     N.ptr(pos, N.i64), len(pos))
    return Ciphertext(params, h)


def expand(ev: Evaluator, ct: Ciphertext, log_gap: int = 0) -> dict[int, Ciphertext]:
    """Lattigo's Expand: {i: ciphertext whose constant coefficient is coefficient i of ct}
    for i a multiple of 2^log_gap. Needs keys made with ``expand=True``."""
    params = ev.params
    cap = params.n >> log_gap if 0 <= log_gap <= params.log_n else 0
    idx = np.zeros(max(cap, 1), dtype=np.int64)
    hs = np.zeros(max(cap, 1), dtype=np.uint64)
    n = C.c_int(0)
    N.call("he_expand", params.handle, ev.handle, params._own(ct, "ciphertext"), int(log_gap),
           N.ptr(idx, N.i64), N.ptr(hs, N.u64), len(hs), C.byref(n))
    return {int(i): Ciphertext(params, int(h)) for i, h in zip(idx[: n.value], hs[: n.value])}


def trace(ev: Evaluator, ct: Ciphertext, log_n_out: int) -> Ciphertext:
    """Normalised trace down to the subring of degree 2^log_n_out (Lattigo Trace, scaled by
    2^(log_n_out - logN)): with log_n_out = 0 the constant coefficient is kept and all
    others are zeroed. Needs keys made with ``trace_to=log_n_out``."""
    params = ev.params
    return Ciphertext(params, N.new_handle("he_trace", params.handle, ev.handle,
                                           params._own(ct, "ciphertext"), int(log_n_out)))


# ---------------------------------------------------------------- encryption randomness


class EncryptionRandomness:
    """The ephemeral ternary u and Gaussian errors e0, e1 of a public-key encryption:
    c0 = pk0*u + e0 + m, c1 = pk1*u + e1 (mod Q at the plaintext's level)."""

    def __init__(self, u: np.ndarray, e0: np.ndarray, e1: np.ndarray) -> None:
        self.u, self.e0, self.e1 = u, e0, e1


def encrypt_with_randomness(params: CKKSParams, pt: Plaintext, pk: PublicKey,
                            randomness: EncryptionRandomness | None = None,
                            seed: bytes | None = None) -> tuple[Ciphertext, EncryptionRandomness]:
    """Encrypt and expose (or take) the randomness, for proofs of correct encryption
    [CRISP-certified Sec. 4: the user proves ct = Enc(pk, m; u, e0, e1)]. Either give
    ``randomness`` (checked: u ternary, |e| <= the error bound) or a >=16-byte ``seed`` from
    the injected PRG, from which u, e0, e1 are sampled."""
    n = params.n
    if randomness is not None:
        u = np.ascontiguousarray(randomness.u, dtype=np.int64)
        e0 = np.ascontiguousarray(randomness.e0, dtype=np.int64)
        e1 = np.ascontiguousarray(randomness.e1, dtype=np.int64)
        if u.shape != (n,) or e0.shape != (n,) or e1.shape != (n,):
            raise HEArgumentError(f"u, e0, e1 must each have N = {n} coefficients")
        mode, seed_b = 1, b""
    else:
        if seed is None or len(seed) < 16:
            raise HEArgumentError("give randomness or a seed of at least 16 bytes")
        u, e0, e1 = (np.zeros(n, dtype=np.int64) for _ in range(3))
        mode, seed_b = 0, bytes(seed)
    h = N.new_handle("he_encrypt_rand", params.handle, params._own(pk, "public key"),
                     params._own(pt, "plaintext"), mode, seed_b, len(seed_b),
                     N.ptr(u, N.i64), N.ptr(e0, N.i64), N.ptr(e1, N.i64))
    return Ciphertext(params, h), EncryptionRandomness(u.copy(), e0.copy(), e1.copy())


def keygen_seeded(params: CKKSParams, a_seed: bytes, key_seed: bytes):
    """Key pair for a uniform a chosen by the *other* party (expanded from ``a_seed``,
    16..32 bytes): s ternary and e Gaussian (the parameter set's distributions) sampled
    from ``key_seed`` (>= 16 bytes, from the injected PRG), pk0 = e - a s over Q.
    Returns (KeyPair, s, e) with s, e as centred int64 arrays (the witness of the
    well-formedness proof, ``secinfer.crypto.zk.keyproof``). The public key is valid over
    Q only: encrypt with :func:`encrypt_with_randomness` (Lattigo's encryptor refuses it)."""
    from secinfer.crypto.he.params import KeyPair

    a_seed, key_seed = bytes(a_seed), bytes(key_seed)
    if not 16 <= len(a_seed) <= 32 or len(key_seed) < 16:
        raise HEArgumentError("a_seed must have 16..32 bytes and key_seed at least 16")
    s = np.zeros(params.n, dtype=np.int64)
    e = np.zeros(params.n, dtype=np.int64)
    skh, pkh = C.c_uint64(0), C.c_uint64(0)
    N.call("he_keygen_seeded", params.handle, a_seed, len(a_seed), key_seed, len(key_seed),
           N.ptr(s, N.i64), N.ptr(e, N.i64), C.byref(skh), C.byref(pkh))
    return KeyPair(SecretKey(params, int(skh.value)), PublicKey(params, int(pkh.value))), s, e


def public_key_from_parts(params: CKKSParams, a_seed: bytes, pk0: np.ndarray) -> PublicKey:
    """The verifier's copy of a key made by :func:`keygen_seeded`: a from its own seed and
    the received pk0 as coefficient-domain residues of shape (QCount, N), each reduced
    below its prime (checked). Valid over Q only."""
    a_seed = bytes(a_seed)
    if not 16 <= len(a_seed) <= 32:
        raise HEArgumentError("a_seed must have 16..32 bytes")
    p = np.ascontiguousarray(pk0, dtype=np.uint64)
    if p.shape != (len(params.q), params.n):
        raise HEArgumentError(f"pk0 must have shape ({len(params.q)}, {params.n})")
    h = N.new_handle("he_pk_from_parts", params.handle, a_seed, len(a_seed), N.ptr(p, N.u64))
    return PublicKey(params, h)


# ---------------------------------------------------------------- flooding and noise


def flooding_log_bound(params: CKKSParams, noise_log2: float, stat_bits: int = 40) -> int:
    """Flooding width 2^(noise_log2 + stat_bits): by the smudging lemma this hides any
    circuit-dependent noise of magnitude <= 2^noise_log2 up to statistical distance
    ~2^-stat_bits per coefficient."""
    return int(np.ceil(noise_log2)) + int(stat_bits)


def flood(params: CKKSParams, ct: Ciphertext, pk: PublicKey, log_bound: int,
          seed: bytes) -> Ciphertext:
    """Re-randomise ``ct`` with a fresh public-key encryption of zero and add uniform noise
    in [-2^log_bound, 2^log_bound] to every coefficient (circuit privacy before the ciphertext
    returns to the key owner). The added noise costs about log_bound - log2(scale) + 1 bits of
    CKKS precision (documented in docs/he.md)."""
    if len(seed) < 16:
        raise HEArgumentError("flooding seed must have at least 16 bytes")
    h = N.new_handle("he_flood", params.handle, params._own(pk, "public key"),
                     params._own(ct, "ciphertext"), int(log_bound), bytes(seed), len(seed))
    return Ciphertext(params, h)


def noise(params: CKKSParams, ct: Ciphertext, sk: SecretKey,
          reference: Plaintext | None = None) -> tuple[float, float]:
    """(log2 std, log2 max |.|) of dec(ct) - reference in the coefficient domain (tests and
    benchmarks only: needs the secret key)."""
    out = np.zeros(2, dtype=np.float64)
    rh = params._own(reference, "reference") if reference is not None else 0
    N.call("he_noise", params.handle, params._own(sk, "sk"), params._own(ct, "ciphertext"),
           rh, N.ptr(out, N.f64))
    return float(out[0]), float(out[1])
