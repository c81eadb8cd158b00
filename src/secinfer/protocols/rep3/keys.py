"""Shared PRF keys of [ASTRA 2.2] (used by astra and aby3), set up over the authenticated channels in the setup phase.

Keys and holders (k_01, k_02, k_12 pairwise between servers, k_P common to all servers, and
for each input owner O in {model_owner, client} one key with {P0, P1} and one with {P0, P2}
so that O can [[.]]-share like P0 does in Pi_sh [ASTRA Fig. 1]):

    name  sampler      holders
    01    p0           p0 p1
    02    p0           p0 p2
    12    p1           p1 p2
    P     p0           p0 p1 p2
    M1/M2 model_owner  M p0 p1 / M p0 p2
    C1/C2 client       C p0 p1 / C p0 p2

The sampler draws the key from its job PRG and sends it to the other holders. With malicious
security the two receivers of a three-holder key exchange SHA-256 hashes of what they got
and abort on a mismatch (check "key-setup"), so a corrupt sampler cannot hand out
inconsistent keys. Each key is used as ``SharedPRF(key, label)``: one counter-driven stream
per (key, label), advanced identically by every holder [ASTRA 2.2].
"""

from __future__ import annotations

import hashlib

import numpy as np

from secinfer.crypto.prg import SharedPRF
from secinfer.net.channel import ArraySpec

M, C = "model_owner", "client"
KEYS = {
    "01": ("p0", ("p0", "p1")),
    "02": ("p0", ("p0", "p2")),
    "12": ("p1", ("p1", "p2")),
    "P": ("p0", ("p0", "p1", "p2")),
    "M1": (M, (M, "p0", "p1")),
    "M2": (M, (M, "p0", "p2")),
    "C1": (C, (C, "p0", "p1")),
    "C2": (C, (C, "p0", "p2")),
}
_KEY_SPEC = ArraySpec(np.uint8, (16,))
_H_SPEC = ArraySpec(np.uint8, (32,))


def _h(b: bytes) -> np.ndarray:
    return np.frombuffer(hashlib.sha256(b"astra-key" + b).digest(), dtype=np.uint8)


class Keys:
    """The keys one party holds, with per-label counter streams."""

    def __init__(self, role: str, keys: dict[str, bytes]) -> None:
        self.role = role
        self._keys = keys
        self._streams: dict[tuple, SharedPRF] = {}

    def has(self, name: str) -> bool:
        return name in self._keys

    def stream(self, name: str, label: str) -> SharedPRF:
        k = (name, label)
        s = self._streams.get(k)
        if s is None:
            s = SharedPRF(self._keys[name], f"astra/{name}/{label}")
            self._streams[k] = s
        return s

    def raw(self, name: str) -> bytes:
        return self._keys[name]


def setup_keys(ep, role: str, prg, malicious: bool) -> Keys:
    """Run inside ``ep.phase("setup")`` by every party; returns its Keys."""
    mine: dict[str, bytes] = {}
    present = set(ep.peers) | {role}
    keys = {n: v for n, v in KEYS.items() if set(v[1]) <= present}
    for name, (sampler, holders) in keys.items():
        if role == sampler:
            mine[name] = prg.derive(f"astra-key-{name}").seed()
            for h in holders:
                if h != role:
                    ep.send(h, f"astra/key/{name}", np.frombuffer(mine[name], dtype=np.uint8))
    for name, (sampler, holders) in keys.items():
        if role in holders and role != sampler:
            mine[name] = ep.recv_one(sampler, f"astra/key/{name}", _KEY_SPEC).tobytes()
    if malicious:
        checks = []
        for name, (sampler, holders) in keys.items():
            recv = [h for h in holders if h != sampler]
            if role in recv and len(recv) == 2:
                other = recv[0] if recv[1] == role else recv[1]
                ep.send(other, f"astra/keyh/{name}", _h(mine[name]))
                checks.append((name, other))
        for name, other in checks:
            got = ep.recv_one(other, f"astra/keyh/{name}", _H_SPEC)
            ep.require(np.array_equal(got, _h(mine[name])), "key-setup", KEYS[name][0],
                       f"key {name} differs between receivers")
    return Keys(role, mine)
