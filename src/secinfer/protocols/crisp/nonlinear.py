"""Pi_Non-lin [CRISP Alg. 1-2, Fig. 1] and the truncation, on shares with MACs.

Each party holds, for a tensor, its share ``re`` of the value and (malicious) ``im`` of the
value's MAC mu * value, both over Z_2^k (k = n + s). A gate consumes one FSS key batch
from the store, opens x + r (n bits per element per party, one round) and returns
shares of the gate output and of its MAC *plus* shares of mu * lift(x) -- the paper's
u = mu s^Re, rebuilt locally from x + r [CRISP Fig. 1 local computation, Eq. (3)]. The
difference ``im - u`` (zero for an honest client) is appended to the ``checks`` list the
consistency check of Pi_Inf step 4 folds together [CRISP Fig. 4].

Truncation (design, proof in docs/protocols/crisp.md): after every linear layer the
accumulator z (2f fractional bits, bias folded in as b 2^f) goes through the ARS gate of
``secinfer.crypto.fss.gates`` with MAC twin. It returns shares of lift(z >> f) and of
mu lift(z >> f) -- the correction terms of the gate are dealer-provided and multiplied by
mu in the dealer, so the MAC of the truncated value is produced exactly, not derived from
the (no longer valid) MAC of z -- and the u = mu lift(z) used to check the MAC of z that
the linear layer produced. The truncation is exact (flooring), so outputs equal the
oracle bit for bit.
"""

from __future__ import annotations

import numpy as np

from secinfer.arith.ring import Ring
from secinfer.protocols.crisp import lifted
from secinfer.protocols.crisp.offline import SERVER, Params, take_gate_key


def _gate(ep, peer, prm: Params, store, idx: int, pos: int, kind: str, x_share: np.ndarray) -> dict:
    """Run one gate batch on the share ``x_share`` (shape + (L,)) over Z_2^k."""
    g = Ring(prm.k)
    gate = prm.gate(kind)
    shape = x_share.shape[:-1]
    key = take_gate_key(store, prm, kind, idx, pos, 1 if peer == SERVER else 0)
    low = lifted.low_bits(g, x_share, prm.n).reshape(-1)
    out = gate.online(ep, peer, key, low, f"crisp/g/{idx}/{pos}")
    return {k: v.reshape(shape + (g.limbs,)) for k, v in out.items()}


def truncate(ep, peer, prm, store, idx, re, im, checks):
    """ARS gate: (re, im) of the accumulator -> (re, im) of the truncated value."""
    g = Ring(prm.k)
    out = _gate(ep, peer, prm, store, idx, 0, "ars", re)
    if not prm.malicious:
        return out["y"], None
    checks.append(g.sub(im, out["mu_x"]))      # s^Im - u   [CRISP Fig. 4 step 4, Claim 3 Eq. (5), (7)]
    return out["y"], out["mu_y"]


def relu(ep, peer, prm, store, idx, re, im, checks, pos: int = 0):
    g = Ring(prm.k)
    out = _gate(ep, peer, prm, store, idx, pos, "relu", re)
    if not prm.malicious:
        return out["relu"], None
    checks.append(g.sub(im, out["mu_x"]))
    return out["relu"], out["mu_relu"]


def maxpool_tree(ep, peer, prm, store, idx, wre, wim, checks):
    """Max over axis 2 of window arrays by max(a, b) = ReLU(a - b) + b [CRISP Remark 3.1, App. B]."""
    g = Ring(prm.k)
    pos = 0
    while wre.shape[2] > 1:
        m = wre.shape[2]
        p = m // 2
        a_re, b_re, rest_re = wre[:, :, :p], wre[:, :, p:2 * p], wre[:, :, 2 * p:]
        d_re = g.sub(a_re, b_re)
        if prm.malicious:
            a_im, b_im, rest_im = wim[:, :, :p], wim[:, :, p:2 * p], wim[:, :, 2 * p:]
            d_im = g.sub(a_im, b_im)
        else:
            d_im = None
        r_re, r_im = relu(ep, peer, prm, store, idx, d_re, d_im, checks, pos)
        wre = np.concatenate([g.add(r_re, b_re), rest_re], axis=2)
        if prm.malicious:
            wim = np.concatenate([g.add(r_im, b_im), rest_im], axis=2)
        pos += 1
    re = wre[:, :, 0]
    return re, (wim[:, :, 0] if prm.malicious else None)
