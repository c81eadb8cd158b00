"""Distributed point function (DPF), batched over many keys with numpy.

f_{alpha,beta}(x) = beta if x == alpha else 0, x, alpha in [0, 2^n), beta in (Z_2^k)^P.

Construction: Boyle-Gilboa-Ishai, "Function Secret Sharing: Improvements and Extensions"
(CCS 2016), Fig. 1 [BGI16 Fig. 1], without early termination (the leaf carries one output
correction word). Per level one correction word (s_cw, t_cw^L, t_cw^R): off alpha's path the
two parties' (seed, control bit) pairs become equal, on it they stay different with
t_0 xor t_1 = 1, and the leaf word CW = (-1)^t_1 (beta - Convert(s_0) + Convert(s_1)) makes
the shares at alpha sum to beta.

Key of one party (bytes as stored): seed 16 | n x (s_cw 16 | t_cw 1) | CW W (W as for the
DCF: payload entries packed to whole bytes), i.e. n (lambda + 2) + lambda + sum k_j bits
in the paper's count, rounded to bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from secinfer.crypto.fss.dcf import DCFParams, _bits_msb_first
from secinfer.crypto.fss.expand import MMOHash, fresh_seeds, split_seed_block
from secinfer.errors import ConfigError, SerializationError

FULL_DOMAIN_MAX_BITS = 22


@dataclass(frozen=True)
class DPFParams(DCFParams):
    """Domain {0,1}^n, payload P elements of Z_2^k (same validation as DCFParams)."""

    def nbytes_per_key(self) -> int:
        return 16 + self.n * 17 + self.packed_bytes

    def convert_tweaks(self) -> np.ndarray:
        return 2 + np.arange(self.value_blocks, dtype=np.uint64)


@dataclass
class DPFKeys:
    params: DPFParams
    party: int
    seed: np.ndarray    # (B, 2) uint64
    s_cw: np.ndarray    # (B, n, 2) uint64
    t_cw: np.ndarray    # (B, n) uint8, bit 0 = L, bit 1 = R
    final: np.ndarray   # (B, P, L) uint64

    FIELDS = ("seed", "s_cw", "t_cw", "final")

    @property
    def count(self) -> int:
        return int(self.seed.shape[0])

    def arrays(self) -> dict:
        """The key as stored / sent (leaf correction word packed to the entry widths)."""
        return {"seed": self.seed, "s_cw": self.s_cw, "t_cw": self.t_cw, "final": self.params.pack(self.final)}

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays().values())

    def take(self, idx) -> "DPFKeys":
        return DPFKeys(self.params, self.party, *(getattr(self, f)[idx] for f in self.FIELDS))

    @classmethod
    def from_arrays(cls, params: DPFParams, party: int, arrays: dict, count: int) -> "DPFKeys":
        if party not in (0, 1):
            raise SerializationError(f"DPF key party must be 0 or 1, got {party}")
        want = {"seed": ((count, 2), np.uint64), "s_cw": ((count, params.n, 2), np.uint64),
                "t_cw": ((count, params.n), np.uint8), "final": ((count, params.packed_bytes), np.uint8)}
        out = {}
        for name, (shape, dt) in want.items():
            a = arrays.get(name)
            if a is None or np.asarray(a).dtype != np.dtype(dt) or np.asarray(a).shape != shape:
                got = "missing" if a is None else f"{np.asarray(a).dtype}{np.asarray(a).shape}"
                raise SerializationError(f"DPF key field {name!r}: expected {np.dtype(dt)}{shape}, got {got}")
            out[name] = np.ascontiguousarray(a)
        final = params.unpack(out["final"])
        if np.any(out["t_cw"] > 3) or not np.array_equal(final, params.reduce_entries(final)):
            raise SerializationError("DPF key: correction words out of range")
        out["final"] = final
        return cls(params, party, **out)


def dpf_gen(params: DPFParams, prg, alpha: np.ndarray, beta: np.ndarray) -> tuple[DPFKeys, DPFKeys]:
    """Keys for f_{alpha[i], beta[i]} for every i [BGI16 Fig. 1, Gen]."""
    n, g = params.n, params.group
    alpha = np.asarray(alpha, np.uint64).reshape(-1)
    bsz = alpha.shape[0]
    beta = params.reduce_entries(np.asarray(beta, np.uint64).reshape(bsz, params.payload, g.limbs))
    if n < 64 and np.any(alpha >> np.uint64(n)):
        raise ConfigError(f"DPF alpha must be < 2^{n}")
    h = MMOHash()
    root = [fresh_seeds(prg, bsz), fresh_seeds(prg, bsz)]
    for r in root:
        r[:, 0] &= np.uint64(0xFFFFFFFFFFFFFFFE)
    s = [root[0].copy(), root[1].copy()]
    t = [np.zeros(bsz, np.uint8), np.ones(bsz, np.uint8)]
    s_cw = np.zeros((bsz, n, 2), np.uint64)
    t_cw = np.zeros((bsz, n), np.uint8)
    tw = np.array([0, 1], np.uint64)
    for i in range(n):
        a = _bits_msb_first(alpha, n, i)
        keep_r = a.astype(bool)
        ch = []
        for b in (0, 1):
            blk = h.hash(s[b], tw)
            ch.append((split_seed_block(blk[:, 0]), split_seed_block(blk[:, 1])))
        s_lose = [np.where(keep_r[:, None], ch[b][0][0], ch[b][1][0]) for b in (0, 1)]
        s_keep = [np.where(keep_r[:, None], ch[b][1][0], ch[b][0][0]) for b in (0, 1)]
        t_keep = [np.where(keep_r, ch[b][1][1], ch[b][0][1]) for b in (0, 1)]
        scw = s_lose[0] ^ s_lose[1]
        tcw_l = ch[0][0][1] ^ ch[1][0][1] ^ a ^ np.uint8(1)
        tcw_r = ch[0][1][1] ^ ch[1][1][1] ^ a
        tcw_keep = np.where(keep_r, tcw_r, tcw_l)
        s_cw[:, i], t_cw[:, i] = scw, tcw_l | (tcw_r << np.uint8(1))
        for b in (0, 1):
            s[b] = s_keep[b] ^ (scw * t[b][:, None].astype(np.uint64))
            t[b] = t_keep[b] ^ (t[b] & tcw_keep)
    conv = [params.words_to_group(h.hash(s[b], params.convert_tweaks())) for b in (0, 1)]
    final = params.reduce_entries(g.cond_neg(g.add(g.sub(beta, conv[0]), conv[1]), t[1]))
    return tuple(DPFKeys(params, b, root[b], s_cw.copy(), t_cw.copy(), final.copy())  # type: ignore
                 for b in (0, 1))


def dpf_eval(keys: DPFKeys, x: np.ndarray) -> np.ndarray:
    """Shares of f(x[i]) under key i (x: (B,) or (B, M)); returns (B, P, L) or (B, M, P, L)."""
    params, g, n = keys.params, keys.params.group, keys.params.n
    x = np.asarray(x, np.uint64)
    if x.shape[0] != keys.count or x.ndim not in (1, 2):
        raise ConfigError(f"DPF eval: expected {keys.count} points (or rows), got shape {x.shape}")
    if n < 64 and np.any(x >> np.uint64(n)):
        raise ConfigError(f"DPF eval: points must be < 2^{n}")
    if x.ndim == 2:
        m = x.shape[1]
        rep = keys.take(np.repeat(np.arange(keys.count), m))
        return dpf_eval(rep, x.reshape(-1)).reshape(keys.count, m, params.payload, g.limbs)
    h = MMOHash()
    s = keys.seed.copy()
    t = np.full(keys.count, keys.party, np.uint8)
    for i in range(n):
        side = _bits_msb_first(x, n, i)
        blk = h.hash(s, side[:, None].astype(np.uint64))
        child, t_child = split_seed_block(blk[:, 0])
        tc = (keys.t_cw[:, i] >> side) & np.uint8(1)
        s = child ^ (keys.s_cw[:, i] * t[:, None].astype(np.uint64))
        t = t_child ^ (t & tc)
    out = g.add(params.words_to_group(h.hash(s, params.convert_tweaks())), g.select(t, keys.final))
    return params.reduce_entries(g.neg(out) if keys.party == 1 else out)


def dpf_eval_all(keys: DPFKeys) -> np.ndarray:
    """Full-domain evaluation by breadth-first tree expansion: (B, 2^n, P, L). Small n only."""
    params, g, n = keys.params, keys.params.group, keys.params.n
    if n > FULL_DOMAIN_MAX_BITS:
        raise ConfigError(f"full-domain DPF evaluation is limited to n <= {FULL_DOMAIN_MAX_BITS}")
    h = MMOHash()
    bsz = keys.count
    s = keys.seed.copy()[:, None, :]                     # (B, width, 2)
    t = np.full((bsz, 1), keys.party, np.uint8)
    tw = np.array([0, 1], np.uint64)
    for i in range(n):
        width = s.shape[1]
        blk = h.hash(s.reshape(-1, 2), tw).reshape(bsz, width, 2, 2)
        child, t_child = split_seed_block(blk)            # (B, width, 2 sides, 2), (B, width, 2)
        tc = np.stack([keys.t_cw[:, i] & 1, keys.t_cw[:, i] >> 1], axis=-1)[:, None, :]  # (B,1,2)
        child = child ^ (keys.s_cw[:, i][:, None, None, :] * t[:, :, None, None].astype(np.uint64))
        t_new = t_child ^ (t[:, :, None] & tc)
        s = child.reshape(bsz, 2 * width, 2)
        t = t_new.reshape(bsz, 2 * width)
    conv = params.words_to_group(h.hash(s.reshape(-1, 2), params.convert_tweaks()))
    conv = conv.reshape(bsz, 1 << n, params.payload, g.limbs)
    out = g.add(conv, g.select(t, np.broadcast_to(keys.final[:, None], conv.shape)))
    return params.reduce_entries(g.neg(out) if keys.party == 1 else out)
