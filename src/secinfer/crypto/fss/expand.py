"""The length-doubling PRG of the FSS trees: fixed-key AES-128 in Matyas-Meyer-Oseas mode.

    H(s, j) = AES_K(s xor j) xor (s xor j)        (j a small public tweak, xored into word 0)

with K a fixed public key. ``G(s) = H(s, 0) || H(s, 1) || ...`` is the PRG the DPF/DCF
constructions need [BGI16 Sec. 3; Boyle et al. EC'21 Fig. 1]: a fixed-key block cipher
modelled as a random permutation gives a correlation-robust hash, the standard way FSS
implementations expand 128-bit seeds. Because every output block is addressed by its
tweak, evaluation computes only the blocks of the child it walks into (half the AES work
of expanding both children).

All blocks of a batch are encrypted with one ``update_into`` call over one contiguous
buffer (never one call per block). Seeds are arrays of shape (B, 2) uint64 (128 bits).
"""

from __future__ import annotations

import hashlib

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

_FIXED_KEY = hashlib.sha256(b"secinfer/fss/mmo-fixed-key/v1").digest()[:16]
_LSB_CLEAR = np.uint64(0xFFFFFFFFFFFFFFFE)


class MMOHash:
    """Batched fixed-key AES-MMO hash. One instance per thread (the encryptor is stateful)."""

    def __init__(self) -> None:
        self._enc = Cipher(algorithms.AES(_FIXED_KEY), modes.ECB()).encryptor()

    def hash(self, seeds: np.ndarray, tweaks: np.ndarray) -> np.ndarray:
        """H(seeds[b], tweaks[b, i]) for every b, i -> (B, T, 2) uint64.

        ``tweaks`` is (T,) (same tweaks for every seed) or (B, T) uint64.
        """
        seeds = np.asarray(seeds, np.uint64)
        tweaks = np.asarray(tweaks, np.uint64)
        b = seeds.shape[0]
        t = tweaks.shape[-1]
        inp = np.empty((b, t, 2), np.uint64)
        inp[:, :, 0] = seeds[:, None, 0] ^ (tweaks if tweaks.ndim == 2 else tweaks[None, :])
        inp[:, :, 1] = seeds[:, None, 1]
        nbytes = inp.nbytes
        out = bytearray(nbytes + 15)
        self._enc.update_into(memoryview(inp).cast("B"), out)
        res = np.frombuffer(out, dtype=np.uint64, count=inp.size).reshape(inp.shape)
        res ^= inp
        return res


def split_seed_block(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A child block -> (seed with its lowest bit cleared, control bit t = that bit)."""
    t = (block[..., 0] & np.uint64(1)).astype(np.uint8)
    seed = block.copy()
    seed[..., 0] &= _LSB_CLEAR
    return seed, t


def fresh_seeds(prg, count: int) -> np.ndarray:
    """``count`` 128-bit seeds from the injected PRG, shape (count, 2) uint64."""
    return prg.uint64((count, 2))
