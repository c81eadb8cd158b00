"""Compositions of the gates that protocols use: truncate-then-ReLU and MaxPool by tree
reduction, both carrying MACs [CRISP Remark 3.1, App. B].

Values between gates are additive shares in Z_2^k (``(count, L)`` limb arrays, the signed
lift when k > n); a gate opens only their low n bits. Every composition returns, besides
its outputs, ``checks``: pairs of share arrays (a, b) with a = b exactly when the client
fed each gate the share it was given. A protocol adds sum_j (a_j - b_j) * rho_j to its
consistency value q [CRISP Fig. 4 step 4]; a client that adds an error between two gates
(Delta^1 of Claim 2) makes a pair differ by mu * Delta.
"""

from __future__ import annotations

import numpy as np

from secinfer.crypto.fss.gates import ArsGate, GateKey, ReluGate
from secinfer.errors import ConfigError


def low_bits(share: np.ndarray, n: int) -> np.ndarray:
    """The Z_2^n share contained in a Z_2^k share (k >= n): its low n bits, as uint64."""
    share = np.asarray(share, np.uint64)
    lo = share[..., 0] if share.ndim >= 1 and share.shape[-1] in (1, 2) else share
    return lo & np.uint64((1 << n) - 1) if n < 64 else lo.copy()


def relu_of_truncated(ep, peer: str, ars: ArsGate, relu: ReluGate, ars_key: GateKey, relu_key: GateKey,
                      x_share: np.ndarray, tag: str) -> dict:
    """ReLU(x >> f) = (ReLU(x)) >> f, exact, in two rounds of n bits per party.

    Round 1 (ARS gate) gives shares of y = x >> f (lifted) and of mu y, mu x; round 2 (ReLU
    gate) opens y + r' and gives ReLU(y), mu ReLU(y) and mu y recomputed from the opening.
    The pair (ARS's mu y, ReLU's mu x) is returned in ``checks``. Why not one round: see
    docs/fss.md ("ReLU and truncation").
    """
    if ars.n != relu.n or ars.k != relu.k or ars.mac != relu.mac:
        raise ConfigError("ARS and ReLU gates of a fused layer must share n, k and the MAC setting")
    t = ars.online(ep, peer, ars_key, x_share, f"{tag}/ars")
    y_share = low_bits(t["y"], ars.n)
    r = relu.online(ep, peer, relu_key, y_share, f"{tag}/relu")
    out = {"relu": r["relu"], "y": t["y"], "checks": []}
    if ars.mac:
        out.update(mu_relu=r["mu_relu"], mu_x=t["mu_x"], mu_y=t["mu_y"])
        out["checks"].append((t["mu_y"], r["mu_x"]))
    return out


def maxpool_tree(ep, peer: str, relu: ReluGate, keys: list, x_share: np.ndarray, tag: str,
                 mu_x_share: np.ndarray | None = None) -> dict:
    """max over the last axis of ``x_share`` (shape (count, window, L), lifted shares) by a
    tree of max(a, b) = ReLU(a - b) + b [CRISP Remark 3.1]; mu max(a, b) = mu ReLU(a - b) + mu b.

    ``keys[level]`` is this party's ReLU key for count * (pairs at that level) instances;
    ``maxpool_key_counts`` gives the sizes. Rounds = ceil(log2(window)).
    """
    g = relu.group
    x = np.asarray(x_share, np.uint64)
    if x.ndim != 3 or x.shape[-1] != g.limbs:
        raise ConfigError(f"maxpool input must be (count, window, {g.limbs}) limb shares")
    if relu.mac and mu_x_share is None:
        raise ConfigError("a MAC ReLU gate needs the shares of mu x for MaxPool")
    mu = None if not relu.mac else np.asarray(mu_x_share, np.uint64)
    checks, level = [], 0
    while x.shape[1] > 1:
        w = x.shape[1]
        half = w // 2
        a, b = x[:, :half], x[:, half:2 * half]
        diff = g.sub(a, b)
        res = relu.online(ep, peer, keys[level], low_bits(diff, relu.n), f"{tag}/max{level}")
        m = g.add(res["relu"], b)
        if relu.mac:
            ma, mb = mu[:, :half], mu[:, half:2 * half]
            checks.append((g.sub(ma, mb).reshape(-1, g.limbs), res["mu_x"].reshape(-1, g.limbs)))
            mm = g.add(res["mu_relu"], mb)
            mu = np.concatenate([mm, mu[:, 2 * half:]], axis=1)
        x = np.concatenate([m, x[:, 2 * half:]], axis=1)
        level += 1
    out = {"max": x[:, 0], "checks": checks}
    if relu.mac:
        out["mu_max"] = mu[:, 0]
    return out


def maxpool_key_counts(count: int, window: int) -> list:
    """ReLU instances per tree level of ``maxpool_tree`` (for the dealer)."""
    sizes = []
    while window > 1:
        sizes.append(count * (window // 2))
        window = window // 2 + window % 2
    return sizes
