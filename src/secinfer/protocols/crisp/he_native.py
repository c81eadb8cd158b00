"""crisp's own HE kernels in the Go layer (``native/go/crisp_he.go``).

* Seeded secret-key encryption (semi-honest client only): c1 = a is expanded from a
  public seed (uniform in R_Q), c0 = -a s + e + m; the client sends the seed and c0, half
  a ciphertext, and the server rebuilds c1 from the seed (:func:`load_seeded`, strict:
  exact length, reduced residues, zero padding). The standard seeded form of symmetric
  RLWE encryption; its noise is one fresh error e, below the public-key encryption's
  bound that ``budget.Budget`` assumes. A malicious client keeps public-key encryption:
  its proof of plaintext knowledge is for that form (``proof``).
  Its message-independent part, c0 = -a s + e, can be made ahead (:func:`seeded_zero`,
  offline) and finished with the plaintext online (:func:`seeded_finish`): the same frame.
* :func:`decode`: the client's exact reading of decrypted answers (CRT, centring, mod t,
  scale back, halving) in Go instead of Python integers (``HECore.decode_residues``).
* :func:`mul_blocks`: one client ciphertext times every block's weight plaintext, into
  the blocks' accumulators, in one call spread over the cores.
* :func:`montgomery`: a weight plaintext's Montgomery form (what every product reads),
  made when the plaintext is made (offline) instead of at its first product (online).
* :func:`answer`: the server's answer in one call -- acc + mask ciphertext, rescaled by
  ``drop`` primes (the same exact rounding division as ``drop`` rescales), trimmed to the
  positions the client reads (``crypto.he.trimmed``'s frame).
"""

from __future__ import annotations

import ctypes as C
import threading

import numpy as np

from secinfer.crypto.he.objects import Ciphertext
from secinfer.native import lib as N

SEED_BYTES = 16
_SIGS = {
    "crisp_encrypt_seeded": [N.H, N.H, N.H, C.c_char_p, N.csize, C.POINTER(N.P_bytes), C.POINTER(N.csize)],
    "crisp_seeded_len": [N.H, N.cint, C.POINTER(N.csize)],
    "crisp_seeded_zero": [N.H, N.H, N.cint, C.c_char_p, N.csize, N.P_u64],
    "crisp_seeded_finish": [N.H, N.H, N.H, C.POINTER(N.P_bytes), C.POINTER(N.csize)],
    "crisp_seeded_load": [N.H, N.cint, N.cint, C.c_char_p, N.csize, C.c_char_p, N.csize, N.P_u64],
    "crisp_answer": [N.H, N.H, N.H, N.cint, N.P_i64, N.cint, C.POINTER(N.P_bytes), C.POINTER(N.csize)],
    "crisp_mul_blocks": [N.H, N.H, N.P_u64, N.cint, N.P_u64, N.cint],
    "crisp_pt_montgomery": [N.H, N.H],
    "crisp_decode": [N.H, N.cint, N.P_u64, N.cint, N.cint, C.c_char_p, N.csize, N.cint, N.cint, N.P_u64,
                     C.POINTER(N.f64)],
}
_lock = threading.Lock()
_declared = False


def _declare() -> None:
    global _declared
    if _declared:
        return
    with _lock:
        lib = N.load()
        for name, args in _SIGS.items():
            fn = getattr(lib, name)
            fn.argtypes = [*args, C.c_char_p, N.cint]
            fn.restype = N.cint
        _declared = True


def seeded_size(params, level: int) -> int:
    """Bytes of a seeded ciphertext at ``level``: the seed and c0 packed."""
    _declare()
    out = N.csize(0)
    N.call("crisp_seeded_len", params.handle, int(level), C.byref(out))
    return SEED_BYTES + int(out.value)


def encrypt_seeded(params, sk, pt, seed: bytes) -> bytes:
    """seed || c0 of the encryption of ``pt`` under ``sk`` with c1 expanded from ``seed``."""
    _declare()
    if len(seed) != SEED_BYTES:
        raise ValueError(f"seed must have {SEED_BYTES} bytes")
    buf, n = N.P_bytes(), N.csize(0)
    N.call("crisp_encrypt_seeded", params.handle, params._own(sk, "sk"), params._own(pt, "plaintext"),
           seed, len(seed), C.byref(buf), C.byref(n))
    return seed + N.take_bytes(buf, n.value)


def seeded_zero(params, sk, level: int, seed: bytes) -> Ciphertext:
    """The message-independent part of :func:`encrypt_seeded` (c0 = -a s + e, a from
    ``seed``), made ahead: a degree-0 ciphertext for :func:`seeded_finish`."""
    _declare()
    if len(seed) != SEED_BYTES:
        raise ValueError(f"seed must have {SEED_BYTES} bytes")
    return Ciphertext(params, N.new_handle("crisp_seeded_zero", params.handle, params._own(sk, "sk"),
                                           int(level), seed, len(seed)))


def seeded_finish(params, zero: Ciphertext, pt, seed: bytes) -> bytes:
    """:func:`encrypt_seeded`'s frame from ``zero`` (:func:`seeded_zero` with this seed) and
    the plaintext; ``zero`` is consumed (closed here)."""
    _declare()
    buf, n = N.P_bytes(), N.csize(0)
    try:
        N.call("crisp_seeded_finish", params.handle, params._own(zero, "ciphertext"),
               params._own(pt, "plaintext"), C.byref(buf), C.byref(n))
    finally:
        zero.close()
    return seed + N.take_bytes(buf, n.value)


def load_seeded(params, raw: bytes, level: int, log_scale: int) -> Ciphertext:
    """The ciphertext of a seeded frame (``HESerializationError`` if malformed)."""
    _declare()
    seed, c0 = raw[:SEED_BYTES], raw[SEED_BYTES:]
    h = N.new_handle("crisp_seeded_load", params.handle, int(level), int(log_scale), c0, len(c0),
                     seed, len(seed))
    return Ciphertext(params, h)


def montgomery(params, pt) -> None:
    """Compute ``pt``'s Montgomery form now (kept with the plaintext; ``mul_blocks`` uses it)."""
    _declare()
    N.call("crisp_pt_montgomery", params.handle, params._own(pt, "plaintext"))


def answer(params, acc: Ciphertext, mask: Ciphertext, drop: int, positions) -> bytes:
    """Trimmed frame of (acc + mask) rescaled by ``drop`` primes, for ``positions``;
    ``acc`` is overwritten (free it afterwards)."""
    _declare()
    pos = np.ascontiguousarray(positions, dtype=np.int64).reshape(-1)
    buf, n = N.P_bytes(), N.csize(0)
    N.call("crisp_answer", params.handle, params._own(acc, "ciphertext"), params._own(mask, "mask"),
           int(drop), N.ptr(pos, N.i64), pos.size, C.byref(buf), C.byref(n))
    return N.take_bytes(buf, n.value)


def decode(params, res: np.ndarray, t_bits: int, back: int, halve: bool, limbs: int) -> tuple:
    """Residues (levels, m) of decrypted answers -> (uint64 (m, limbs): u = ([x t]_Q' mod t)
    * back mod t, halved when ``halve``; log2 of the largest |(Y - low) / t|). See
    ``HECore.decode_residues`` for the meaning."""
    _declare()
    r = np.ascontiguousarray(res, dtype=np.uint64)
    m = r.shape[1]
    out = np.zeros((m, limbs), np.uint64)
    noise = N.f64(0.0)
    bb = int(back).to_bytes(max(1, (int(back).bit_length() + 7) // 8), "little")
    N.call("crisp_decode", params.handle, r.shape[0] - 1, N.ptr(r, N.u64), m, int(t_bits), bb, len(bb),
           1 if halve else 0, int(limbs), N.ptr(out, N.u64), C.byref(noise))
    return out, float(noise.value)


def mul_blocks(params, ct: Ciphertext, pts: list, accs: list | None) -> list:
    """acc_b += ct * pts[b] for every block b (``accs`` None: new accumulators ct * pts[b]);
    returns the accumulators."""
    _declare()
    ph = np.array([params._own(p, "plaintext") for p in pts], dtype=np.uint64)
    first = accs is None
    ah = np.zeros(len(pts), np.uint64) if first else np.array(
        [params._own(a, "accumulator") for a in accs], dtype=np.uint64)
    N.call("crisp_mul_blocks", params.handle, params._own(ct, "ciphertext"), N.ptr(ph, N.u64), len(pts),
           N.ptr(ah, N.u64), 1 if first else 0)
    return [Ciphertext(params, int(h)) for h in ah] if first else accs
