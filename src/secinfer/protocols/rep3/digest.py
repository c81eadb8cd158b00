"""The one domain-separated digest of the three-party protocols.

``digest_bytes(tag, *arrays)`` is SHA-256 over the domain tag and, for every array, its
dtype, shape and bytes, so two checks with different tags, or arrays of equal bytes but
different shapes, never collide. ``RunningHashes`` folds many values into one running
hash per (peer, check), so a protocol sends all its deferred checks to a peer in one
message [ASTRA 4.2].
"""

from __future__ import annotations

import hashlib

import numpy as np

from secinfer.net.channel import ArraySpec

H_SPEC = ArraySpec(np.uint8, (32,))


def _update(h, arrays) -> None:
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())


def digest_bytes(tag: str, *arrays) -> bytes:
    """SHA-256 of a domain tag and the arrays (dtype, shape and bytes of each), 32 bytes."""
    h = hashlib.sha256(tag.encode() + b"\x00")
    _update(h, arrays)
    return h.digest()


def digest(tag: str, *arrays) -> np.ndarray:
    """``digest_bytes`` as a uint8 array (what travels in a frame)."""
    return np.frombuffer(digest_bytes(tag, *arrays), dtype=np.uint8)


class RunningHashes:
    """Running hashes keyed by (peer, check name), each domain-separated by ``domain`` and
    the check name. ``fold`` adds arrays; ``pop`` / ``pop_peer`` take the finished digests."""

    def __init__(self, domain: str) -> None:
        self.domain = domain.encode()
        self.table: dict = {}

    def fold(self, peer: str, check: str, *arrays) -> None:
        h = self.table.get((peer, check))
        if h is None:
            h = self.table[(peer, check)] = hashlib.sha256(self.domain + b"/" + check.encode() + b"\x00")
        _update(h, arrays)

    def pop_peer(self, peer: str) -> list[tuple[str, bytes]]:
        """[(check, 32-byte digest)] for ``peer``, sorted by check name, and forget them."""
        return [(c, self.table.pop((peer, c)).digest()) for c in sorted(c for (q, c) in self.table if q == peer)]

    def has_peer(self, peer: str) -> bool:
        return any(q == peer for q, _ in self.table)

    def keys(self):
        return set(self.table)

    def __bool__(self) -> bool:
        return bool(self.table)
