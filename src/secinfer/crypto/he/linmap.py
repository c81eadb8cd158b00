"""The encryption map with arbitrary-size arguments, for proofs of plaintext knowledge.

    f(m, u, e0, e1) = (pk0 u + e0 + Delta m,  pk1 u + e1)   in R_Q at ``level``

is the equation of :func:`secinfer.crypto.he.rlwe.encrypt_with_randomness` (plaintext
Delta m), but here every argument may be any integer polynomial: a Sigma protocol's masked
responses (~30-100 bits per coefficient) go through the same map. Exact RNS arithmetic in
the Go layer (``go/popk/popk.go``).

Argument format ("limbs"): component x (in the order m, u, e0, e1) is an int64 array of
shape (L_x, N) with x_j = sum_l x[l, j] 2^(40 l) (limbs may be negative); e0 may have
and e1 may have L = 0 limbs (absent: the proof of plaintext knowledge rounds them away,
``round_prime``). An argument row is
the concatenation of the four components; ``rows`` stacks several arguments.
"""

from __future__ import annotations

import numpy as np

from secinfer.native import lib as N
from secinfer.crypto.he.errors import HEArgumentError
from secinfer.crypto.he.objects import Ciphertext, PublicKey
from secinfer.crypto.he.params import CKKSParams

LIMB_BITS = 40


def to_limbs(values, n_limbs: int) -> np.ndarray:
    """Python integers (any size, sign) -> (n_limbs, len) int64 limbs, low limbs in
    [0, 2^40), the top limb signed (tests and small inputs; the prover uses numpy)."""
    vals = [int(v) for v in np.asarray(values, dtype=object).reshape(-1)]
    out = np.zeros((n_limbs, len(vals)), dtype=np.int64)
    mask = (1 << LIMB_BITS) - 1
    for j, v in enumerate(vals):
        for l in range(n_limbs - 1):
            out[l, j] = v & mask
            v >>= LIMB_BITS
        if not -(1 << 63) <= v < 1 << 63:
            raise HEArgumentError(f"value {vals[j]} needs more than {n_limbs} limbs")
        out[n_limbs - 1, j] = v
    return out


def delta_bytes(delta: int) -> np.ndarray:
    """Delta (a positive integer below 2^2048) as little-endian bytes for the Go layer."""
    d = int(delta)
    if not 0 < d < 1 << 2048:
        raise HEArgumentError("Delta must be a positive integer below 2^2048")
    return np.frombuffer(d.to_bytes((d.bit_length() + 7) // 8, "little"), dtype=np.uint8).copy()


def _check(params: CKKSParams, limbs, level: int) -> np.ndarray:
    ls = np.ascontiguousarray(limbs, dtype=np.int64).reshape(-1)
    if ls.shape != (4,) or np.any(ls > 8) or np.any(ls[:2] < 1) or np.any(ls[2:] < 0):
        raise HEArgumentError("limbs must give 1..8 limbs for each of m, u and 0..8 for e0, e1")
    if not 0 <= level <= params.max_level:
        raise HEArgumentError(f"level {level} out of range")
    return ls


def image_hash(params: CKKSParams, pk: PublicKey, level: int, delta: int, limbs,
               rows: np.ndarray, cts=(), chal: np.ndarray | None = None,
               round_prime: int | None = None, low: np.ndarray | None = None) -> bytes:
    """SHA-256 over A_k = f(rows[k]) - sum_j chal[k, j] cts[j], k = 0..len(rows)-1 (both
    components as coefficient residues, with a domain-separating header).

    ``round_prime`` (an index in 1..level): both components enter the hash only through
    their high parts H = (X - X mod q) / q, q = params.q[round_prime], X in [0, Q) each
    coefficient's integer (equal H means |X - X'| < q); ``low`` (uint64, shape
    (rows, 2, N), optional) then receives X mod q for every row, component, coefficient."""
    ls = _check(params, limbs, level)
    per = int(ls.sum()) * params.n
    z = np.ascontiguousarray(rows, dtype=np.int64)
    if z.ndim != 2 or z.shape[1] != per or z.shape[0] < 1:
        raise HEArgumentError(f"rows must have shape (k >= 1, {per})")
    cts = list(cts)
    hs = np.array([params._own(c, "ciphertext") for c in cts] or [0], dtype=np.uint64)
    if cts:
        ch = np.ascontiguousarray(chal, dtype=np.uint8)
        if ch.shape != (z.shape[0], len(cts)):
            raise HEArgumentError("challenge must have shape (rows, ciphertexts)")
    else:
        ch = np.zeros(1, dtype=np.uint8)
    rp = -1 if round_prime is None else int(round_prime)
    if round_prime is not None and not 1 <= rp <= level:
        raise HEArgumentError(f"round prime {rp} must be in 1..{level}")
    if low is not None and (rp < 0 or low.dtype != np.uint64 or low.shape != (z.shape[0], 2, params.n)
                            or not low.flags.c_contiguous):
        raise HEArgumentError("low must be a C-contiguous uint64 array (rows, 2, N), with a round prime")
    out = np.zeros(32, dtype=np.uint8)
    db = delta_bytes(delta)
    N.call("he_popk_hash", params.handle, params._own(pk, "public key"), int(level),
           N.ptr(db, N.C.c_ubyte), db.size,
           N.ptr(ls, N.i64), z.shape[0], N.ptr(z, N.i64), len(cts), N.ptr(hs, N.u64),
           N.ptr(ch, N.C.c_ubyte), rp, None if low is None else N.ptr(low, N.u64),
           N.ptr(out, N.C.c_ubyte))
    return out.tobytes()


def image(params: CKKSParams, pk: PublicKey, level: int, delta: int, limbs,
          row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """f(row) as coefficient-domain residues (level + 1, N) of its two components."""
    ls = _check(params, limbs, level)
    z = np.ascontiguousarray(row, dtype=np.int64).reshape(-1)
    if z.size != int(ls.sum()) * params.n:
        raise HEArgumentError("row has the wrong length for these limb counts")
    out = np.zeros((2, level + 1, params.n), dtype=np.uint64)
    db = delta_bytes(delta)
    N.call("he_popk_image", params.handle, params._own(pk, "public key"), int(level),
           N.ptr(db, N.C.c_ubyte), db.size,
           N.ptr(ls, N.i64), N.ptr(z, N.i64), N.ptr(out, N.u64))
    return out[0], out[1]


# ---- the well-formedness map of a public key: F(s, e) = e - a s over all Q primes
# (a = pk1; argument rows: ls[0] limbs of s, then ls[1] limbs of e; go/popk/keyproof.go)


def _key_limbs(limbs) -> np.ndarray:
    ls = np.ascontiguousarray(limbs, dtype=np.int64).reshape(-1)
    if ls.shape != (2,) or np.any(ls < 1) or np.any(ls > 8):
        raise HEArgumentError("limbs must give 1..8 limbs for each of s, e")
    return ls


def key_image_hash(params: CKKSParams, pk: PublicKey, limbs, rows: np.ndarray,
                   chal: np.ndarray | None = None) -> bytes:
    """SHA-256 over A_k = F(rows[k]) - chal[k] pk0 (NTT residues over Q, domain-separated);
    ``chal`` None: A_k = F(rows[k]) (the prover's commitments)."""
    ls = _key_limbs(limbs)
    per = int(ls.sum()) * params.n
    z = np.ascontiguousarray(rows, dtype=np.int64)
    if z.ndim != 2 or z.shape[1] != per or z.shape[0] < 1:
        raise HEArgumentError(f"rows must have shape (k >= 1, {per})")
    if chal is not None:
        ch = np.ascontiguousarray(chal, dtype=np.uint8).reshape(-1)
        if ch.shape != (z.shape[0],):
            raise HEArgumentError("challenge must have one bit per row")
    else:
        ch = np.zeros(1, dtype=np.uint8)
    out = np.zeros(32, dtype=np.uint8)
    N.call("he_keyproof_hash", params.handle, params._own(pk, "public key"), N.ptr(ls, N.i64),
           z.shape[0], N.ptr(z, N.i64), int(chal is not None), N.ptr(ch, N.C.c_ubyte),
           N.ptr(out, N.C.c_ubyte))
    return out.tobytes()


def key_image(params: CKKSParams, pk: PublicKey, limbs, row: np.ndarray) -> np.ndarray:
    """F(row) = e - a s as coefficient-domain residues (QCount, N)."""
    ls = _key_limbs(limbs)
    z = np.ascontiguousarray(row, dtype=np.int64).reshape(-1)
    if z.size != int(ls.sum()) * params.n:
        raise HEArgumentError("row has the wrong length for these limb counts")
    out = np.zeros((len(params.q), params.n), dtype=np.uint64)
    N.call("he_keyproof_image", params.handle, params._own(pk, "public key"), N.ptr(ls, N.i64),
           N.ptr(z, N.i64), N.ptr(out, N.u64))
    return out


__all__ = ["LIMB_BITS", "image", "image_hash", "key_image", "key_image_hash", "to_limbs", "Ciphertext"]
