"""Free-XOR [Kolesnikov-Schneider] + half-gates [Zahur-Rosulek-Evans, ASTRA ref. 70] garbling,
vectorised over a batch of circuit instances and over all AND gates of one level.

Labels are 128-bit values stored as two uint64 words (``(..., 2)`` arrays); the permute bit is
the LSB of word 0 and the global offset R has it set. The gate hash is the tweakable
correlation-robust hash from a fixed-key AES permutation [ASTRA ref. 10, GLNP15]:

    H(L, t) = AES_K(sigma(L) xor t) xor sigma(L),   sigma(w0, w1) = (w0 xor w1, w0)

computed with ``cryptography`` over whole arrays (one ``update`` call per level).
Per AND gate the garbler sends two ciphertexts (T_G, T_E): 2 kappa bits.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from secinfer.crypto.gc.circuit import Circuit

_FIXED_KEY = hashlib.sha256(b"secinfer/gc/fixed-key-aes").digest()[:16]
ONE64 = np.uint64(1)


class GateHash:
    def __init__(self) -> None:
        self._enc = Cipher(algorithms.AES(_FIXED_KEY), modes.ECB()).encryptor()

    def __call__(self, labels: np.ndarray, tweak: np.ndarray) -> np.ndarray:
        lab = labels.reshape(-1, 2)
        x = np.empty_like(lab)
        x[:, 0] = lab[:, 0] ^ lab[:, 1] ^ tweak.reshape(-1)
        x[:, 1] = lab[:, 0]
        s0 = x[:, 0] ^ tweak.reshape(-1)   # sigma(L) without the tweak, for the final xor
        out = np.frombuffer(self._enc.update(x.tobytes()), dtype=np.uint64).reshape(-1, 2).copy()
        out[:, 0] ^= s0
        out[:, 1] ^= x[:, 1]
        return out.reshape(labels.shape)


def lsb(labels: np.ndarray) -> np.ndarray:
    return (labels[..., 0] & ONE64).astype(np.uint8)


def select(zero: np.ndarray, bits: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Active labels zero ^ bit * R."""
    mask = (np.uint64(0) - bits.astype(np.uint64))[..., None]
    return zero ^ (mask & r)


@dataclass
class Garbled:
    tables: np.ndarray        # (batch, n_and, 2, 2) uint64: (T_G, T_E) per AND gate
    decode: np.ndarray        # (batch, n_out) uint8: permute bits of the output zero-labels
    out_zero: np.ndarray      # (batch, n_out, 2) garbler-only
    r: np.ndarray             # (2,) garbler-only


def input_labels(circ: Circuit, batch: int, rand) -> tuple[np.ndarray, dict]:
    """Draw R and the zero-labels of every input group from ``rand(shape) -> uint64``.

    Both garblers call this with the same shared stream to get identical labels."""
    r = rand((2,))
    r[0] |= ONE64
    zeros = {name: rand((batch, len(ws), 2)) for name, ws in circ.inputs.items()}
    return r, zeros


def _plan(circ: Circuit, batch: int) -> list:
    """Per level: (linear steps, AND gate arrays, tweak pairs for this batch size); cached."""
    cache = circ.__dict__.setdefault("_gc_plans", {})
    if batch in cache:
        return cache[batch]
    n_and = circ.and_count
    inst = np.arange(batch, dtype=np.uint64)[:, None] * np.uint64(n_and)
    plan, gid = [], 0
    for lv in circ.levels():
        a, b, o = lv["AND"]
        k = len(o)
        ids = np.arange(gid, gid + k)
        base = (inst + ids.astype(np.uint64)[None, :]) * np.uint64(2)
        tw = np.concatenate([base, base + ONE64], axis=1)           # (batch, 2k): j then j'
        plan.append((lv["lin"], a, b, o, ids, tw))
        gid += k
    cache[batch] = plan
    return plan


def _mask(labels: np.ndarray) -> np.ndarray:
    """All-ones where the label's permute bit is set: (..., 1) uint64 for broadcasting."""
    return (np.uint64(0) - (labels[..., 0] & ONE64))[..., None]


def garble(circ: Circuit, r: np.ndarray, zeros: dict) -> Garbled:
    batch = next(iter(zeros.values())).shape[0]
    w = np.zeros((batch, circ.n_wires, 2), dtype=np.uint64)
    for name, ws in circ.inputs.items():
        w[:, ws] = zeros[name]
    h = GateHash()
    tables = np.zeros((batch, circ.and_count, 2, 2), dtype=np.uint64)
    for lin, a, b, o, ids, tw in _plan(circ, batch):
        for (xa, xb, xo), (na, no) in lin:
            w[:, xo] = w[:, xa] ^ w[:, xb]
            w[:, no] = w[:, na] ^ r
        k = len(o)
        if not k:
            continue
        a0, b0 = w[:, a], w[:, b]
        # one AES call for H(A0, j), H(B0, j'), H(A1, j), H(B1, j')
        lab = np.concatenate([a0, b0, a0 ^ r, b0 ^ r], axis=1)
        hh = h(lab, np.concatenate([tw, tw], axis=1))
        ha0, hb0, ha1, hb1 = hh[:, :k], hh[:, k:2 * k], hh[:, 2 * k:3 * k], hh[:, 3 * k:]
        ma, mb = _mask(a0), _mask(b0)
        tg = ha0 ^ ha1 ^ (mb & r)
        te = hb0 ^ hb1 ^ a0
        w[:, o] = ha0 ^ (ma & tg) ^ hb0 ^ (mb & (te ^ a0))
        tables[:, ids, 0] = tg
        tables[:, ids, 1] = te
    out_zero = w[:, circ.outputs]
    return Garbled(tables, lsb(out_zero), out_zero, r)


def _mul(bits: np.ndarray, lab: np.ndarray) -> np.ndarray:
    return lab & (np.uint64(0) - bits.astype(np.uint64))[..., None]


def evaluate(circ: Circuit, tables: np.ndarray, active: dict) -> np.ndarray:
    """Evaluate with the active input labels; returns the active output labels."""
    batch = next(iter(active.values())).shape[0]
    w = np.zeros((batch, circ.n_wires, 2), dtype=np.uint64)
    for name, ws in circ.inputs.items():
        w[:, ws] = active[name]
    h = GateHash()
    for lin, a, b, o, ids, tw in _plan(circ, batch):
        for (xa, xb, xo), (na, no) in lin:
            w[:, xo] = w[:, xa] ^ w[:, xb]
            w[:, no] = w[:, na]
        k = len(o)
        if not k:
            continue
        la, lb = w[:, a], w[:, b]
        hh = h(np.concatenate([la, lb], axis=1), tw)
        t = tables[:, ids]
        w[:, o] = hh[:, :k] ^ (_mask(la) & t[:, :, 0]) ^ hh[:, k:] ^ (_mask(lb) & (t[:, :, 1] ^ la))
    return w[:, circ.outputs]


def decode(out_labels: np.ndarray, decode_bits: np.ndarray) -> np.ndarray:
    return lsb(out_labels) ^ decode_bits


def commit_labels(zero: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Hash commitments to both labels of every wire: (..., 2 bits, 32) uint8.

    Labels are uniformly random 128-bit strings, so H(label) hides them (random oracle)
    and the opening is the label itself."""
    return label_hash(np.stack([zero, zero ^ r], axis=-2))   # (..., 2, 32)


def label_hash(labels: np.ndarray) -> np.ndarray:
    """Per-label hash for checking opened labels against commitments: (..., 32)."""
    flat = labels.reshape(-1, 2)
    out = np.empty((flat.shape[0], 32), dtype=np.uint8)
    for i in range(flat.shape[0]):
        out[i] = np.frombuffer(hashlib.sha256(b"gc-com" + flat[i].tobytes()).digest(), np.uint8)
    return out.reshape(labels.shape[:-1] + (32,))
