"""AES-128-CTR pseudo-random generator and keyed PRF with explicit counters.

One AES key = one 128-bit seed. Streams are domain-separated by a label: the CTR
initial block is SHA-256(label)[:8] || 64-bit block counter, so two labels never share
keystream and a PRF evaluation at counter c is reproducible by every key holder
(the shared-key PRFs of [ASTRA 2.2] and the LTEE counters of [STAMP Protocols 2-3]).

Keystream is produced in whole arrays with ``update_into`` (one call per request, never
one per block).
"""

from __future__ import annotations

import hashlib
import os
import sys

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from secinfer.errors import ConfigError

SEED_BYTES = 16
_BLOCK = 16


def fresh_seed() -> bytes:
    """A 128-bit seed from the operating system's CSPRNG."""
    return os.urandom(SEED_BYTES)


def _label_prefix(label: str | bytes) -> bytes:
    if isinstance(label, str):
        label = label.encode()
    return hashlib.sha256(b"secinfer-prg-label\x00" + label).digest()[:8]


class PRF:
    """F_k(label, counter) -> keystream. Deterministic for everyone holding ``key``."""

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, (bytes, bytearray)) or len(key) != SEED_BYTES:
            raise ConfigError("PRF/PRG keys are 16 bytes (128-bit seeds)")
        self._key = bytes(key)

    def keystream(self, label: str | bytes, block_counter: int, nbytes: int) -> bytes:
        if block_counter < 0 or block_counter >= 1 << 64:
            raise ConfigError("PRF block counter out of range")
        iv = _label_prefix(label) + block_counter.to_bytes(8, "big")
        enc = Cipher(algorithms.AES(self._key), modes.CTR(iv)).encryptor()
        n_blocks = -(-nbytes // _BLOCK)
        buf = bytearray(n_blocks * _BLOCK + _BLOCK - 1)
        zeros = bytes(n_blocks * _BLOCK)
        enc.update_into(zeros, buf)
        return bytes(memoryview(buf)[:nbytes])   # one copy (a bytearray slice would be a second)

    def blocks_for(self, nbytes: int) -> int:
        return -(-nbytes // _BLOCK)


class PRG:
    """A stateful stream: each request continues where the last one ended.

    ``PRG(seed)`` with a 16-byte seed; ``PRG.fresh()`` seeds from the OS; ``derive(label)``
    gives an independent child stream (domain separation).
    """

    def __init__(self, seed: bytes, label: str | bytes = "root") -> None:
        self._prf = PRF(seed)
        self._seed = bytes(seed)
        self._label = label if isinstance(label, bytes) else label.encode()
        self._block = 0

    @classmethod
    def fresh(cls, label: str = "root") -> "PRG":
        return cls(fresh_seed(), label)

    @classmethod
    def for_tests(cls, n: int, label: str = "test") -> "PRG":
        """A deterministic PRG; refuses to run outside a pytest process."""
        if "pytest" not in sys.modules:
            raise ConfigError("PRG.for_tests is only available inside the test-suite")
        return cls(hashlib.sha256(b"secinfer-test-seed" + n.to_bytes(8, "big")).digest()[:SEED_BYTES], label)

    def derive(self, label: str) -> "PRG":
        child_seed = self._prf.keystream(self._label + b"/derive/" + label.encode(), 0, SEED_BYTES)
        return PRG(child_seed, self._label + b"/" + label.encode())

    # ---- draws ---------------------------------------------------------------------
    def bytes(self, n: int) -> bytes:
        out = self._prf.keystream(self._label, self._block, n)
        self._block += self._prf.blocks_for(n)
        return out

    def seed(self) -> bytes:
        """A fresh 128-bit seed drawn from this stream."""
        return self.bytes(SEED_BYTES)

    def uint64(self, shape) -> np.ndarray:
        shape = tuple(np.atleast_1d(shape)) if not isinstance(shape, tuple) else shape
        n = int(np.prod(shape, dtype=np.int64))
        return np.frombuffer(self.bytes(8 * n), dtype=np.uint64).reshape(shape).copy()

    def ring(self, shape, bits: int) -> np.ndarray:
        """Uniform elements of Z_2^bits."""
        v = self.uint64(shape)
        return v if bits == 64 else v & np.uint64((1 << bits) - 1)

    def bits(self, shape) -> np.ndarray:
        """Uniform bits as uint8 0/1."""
        return (self.uint64(shape) & np.uint64(1)).astype(np.uint8)

    def below(self, bound: int, shape) -> np.ndarray:
        """Uniform integers in [0, bound) by rejection-free 128-bit reduction (bias < 2^-64)."""
        if not 0 < bound <= 1 << 62:
            raise ConfigError("PRG.below bound must be in 1..2^62")
        hi = self.uint64(shape).astype(object)
        lo = self.uint64(shape).astype(object)
        return np.asarray(((hi << 64 | lo) % bound), dtype=np.int64)

    def permutation(self, n: int) -> np.ndarray:
        """A uniformly random permutation of range(n) (Fisher-Yates over ``below``)."""
        perm = np.arange(n, dtype=np.int64)
        if n < 2:
            return perm
        draws = self.uint64((n,))
        for i in range(n - 1, 0, -1):
            j = int(draws[i]) % (i + 1)  # bias <= (i+1)/2^64, negligible
            perm[i], perm[j] = perm[j], perm[i]
        return perm


class SharedPRF:
    """A PRF key shared by a set of parties, used with explicit, advancing counters.

    Every holder draws the same values in the same order; ``counter`` is exposed so
    parties (or a trusted device) can check they are in step.
    """

    def __init__(self, key: bytes, label: str) -> None:
        self._prf = PRF(key)
        self.label = label.encode()
        self.counter = 0

    def ring(self, shape, bits: int) -> np.ndarray:
        shape = tuple(shape) if not isinstance(shape, int) else (shape,)
        n = int(np.prod(shape, dtype=np.int64))
        raw = self._prf.keystream(self.label, self.counter, 8 * n)
        self.counter += self._prf.blocks_for(8 * n)
        v = np.frombuffer(raw, dtype=np.uint64).reshape(shape).copy()
        return v if bits == 64 else v & np.uint64((1 << bits) - 1)

    def bits(self, shape) -> np.ndarray:
        return (self.ring(shape, 64) & np.uint64(1)).astype(np.uint8)

    def bytes(self, n: int) -> bytes:
        raw = self._prf.keystream(self.label, self.counter, n)
        self.counter += self._prf.blocks_for(n)
        return raw
