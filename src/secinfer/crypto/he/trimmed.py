"""Trimmed ciphertexts: only what the key owner needs to read chosen coefficients.

Decryption of a degree-1 ciphertext is m = c0 + c1 s (mod Q_level), so coefficient j of
m needs coefficient j of c0 and all of c1. A *trimmed* frame carries c0 at the chosen
positions only (coefficient-domain RNS residues) and c1 in full (NTT-domain residues, as
Lattigo stores it), every residue row packed at its prime's bit width like the object
serialisation (docs/he.md). It has no header: the level and the positions are public to
both sides, so both know the exact length (:func:`trimmed_size`), and the reader refuses
any other length, unreduced residues and non-zero padding bits
(``HESerializationError``). What the key owner can compute from a trimmed frame is a
function of the full ciphertext, so it learns nothing more than from the ciphertext.

The same packing without a header for one raw residue polynomial (:func:`pack_poly`,
e.g. crisp's pk0 in the setup phase): at ``ckks-n14-128``'s top level 304 bits per
coefficient (the primes' bit lengths) instead of 448.

Go: ``go/he/wire.go``, exported by ``go/trim.go`` (``he_ct_trim``, ``he_trim_len``, ``he_decrypt_trimmed``,
``he_poly_pack``, ``he_poly_unpack``).
"""

from __future__ import annotations

import ctypes as C

import numpy as np

from secinfer.native import lib as N
from secinfer.crypto.he.errors import HEArgumentError
from secinfer.crypto.he.objects import Ciphertext, SecretKey
from secinfer.crypto.he.params import CKKSParams


def _positions(params: CKKSParams, positions) -> np.ndarray:
    pos = np.ascontiguousarray(positions, dtype=np.int64).reshape(-1)
    if pos.size < 1 or pos.size > 2 * params.n or pos.min() < 0 or pos.max() >= params.n:
        raise HEArgumentError(f"between 1 and 2N positions in [0, {params.n}) are needed")
    return pos


def trimmed_size(params: CKKSParams, level: int, count: int) -> int:
    """Exact byte length of a trimmed frame at ``level`` for ``count`` positions."""
    out = N.csize(0)
    N.call("he_trim_len", params.handle, int(level), int(count), C.byref(out))
    return int(out.value)


def trim(params: CKKSParams, ct: Ciphertext, positions) -> bytes:
    """The trimmed frame of ``ct`` (degree 1) for ``positions`` (in this order)."""
    pos = _positions(params, positions)
    buf = N.P_bytes()
    n = N.csize(0)
    N.call("he_ct_trim", params.handle, params._own(ct, "ciphertext"), N.ptr(pos, N.i64),
           pos.size, C.byref(buf), C.byref(n))
    return N.take_bytes(buf, n.value)


def decrypt_trimmed(params: CKKSParams, sk: SecretKey, data, level: int, positions) -> np.ndarray:
    """Residues of the decryption m = c0 + c1 s at ``positions`` from a trimmed frame at
    ``level``: uint64 array of shape (level + 1, len(positions)), row l mod q_l (the same
    values as ``params.decrypt(ct, sk).poly(0)[:, positions]`` for the full ciphertext).
    Raises ``HESerializationError`` for a frame of the wrong length, an unreduced residue
    or non-zero padding bits."""
    pos = _positions(params, positions)
    raw = bytes(data) if not isinstance(data, np.ndarray) else data.tobytes()
    out = np.zeros((int(level) + 1, pos.size), dtype=np.uint64)
    N.call("he_decrypt_trimmed", params.handle, params._own(sk, "sk"), raw, len(raw), int(level),
           N.ptr(pos, N.i64), pos.size, N.ptr(out, N.u64))
    return out


def packed_poly_size(params: CKKSParams, level: int) -> int:
    """Exact byte length of :func:`pack_poly` for a polynomial at ``level``."""
    return sum(-(-params.n * int(q).bit_length() // 8) for q in params.q[:int(level) + 1])


def pack_poly(params: CKKSParams, residues: np.ndarray) -> bytes:
    """Coefficient residues of shape (level + 1, N), each below its prime, packed at the
    primes' widths (the level is the row count)."""
    r = np.ascontiguousarray(residues, dtype=np.uint64)
    if r.ndim != 2 or r.shape[1] != params.n or not 1 <= r.shape[0] <= len(params.q):
        raise HEArgumentError(f"residues must have shape (levels, {params.n})")
    buf = N.P_bytes()
    n = N.csize(0)
    N.call("he_poly_pack", params.handle, r.shape[0] - 1, N.ptr(r, N.u64), C.byref(buf), C.byref(n))
    return N.take_bytes(buf, n.value)


def unpack_poly(params: CKKSParams, data, level: int) -> np.ndarray:
    """Inverse of :func:`pack_poly` for a polynomial at ``level``: (level + 1, N) uint64.
    Raises ``HESerializationError`` for any other length, an unreduced residue or
    non-zero padding bits."""
    raw = bytes(data) if not isinstance(data, np.ndarray) else data.tobytes()
    out = np.zeros((int(level) + 1, params.n), dtype=np.uint64)
    N.call("he_poly_unpack", params.handle, int(level), raw, len(raw), N.ptr(out, N.u64))
    return out
