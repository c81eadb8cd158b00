"""Distributed comparison function (DCF), batched over many keys with numpy.

f^<_{alpha,beta}(x) = beta if x < alpha else 0, for x, alpha in [0, 2^n) (unsigned, n <= 64)
and beta a vector of P elements of Z_2^k (k <= 128, limbs as in ``secinfer.arith.ring.Ring``).

Construction: the DCF of Boyle, Chandran, Gilboa, Gupta, Ishai, Kumar, Rathee, "Function
Secret Sharing for Mixed-Mode and Fixed-Point Secure Computation" (Eurocrypt 2021), Fig. 1
[BCG+21 Fig. 1]: a GGM tree in the style of the BGI DPF whose nodes also carry a
pseudo-random group value v; per level a correction word (s_cw, V_cw, t_cw^L, t_cw^R), and
one output correction word at the leaf. Evaluation walks the path of x and adds
(-1)^b (v + t * V_cw) at every level. The invariant behind Gen (re-derived in docs/fss.md):
leaving alpha's path at level i towards the *lose* child makes the two parties' seeds and
control bits equal from then on, so every later contribution cancels and the total is the
accumulated on-path value V_alpha plus that level's correction -- which Gen sets to beta
when the walk leaves to the left of alpha (x < alpha) and to 0 otherwise.

The payload is a vector in the product group Z_2^k1 x ... x Z_2^kP (``entry_bits``; each
k_j <= k): the construction works coordinate-wise, so an entry that a gate only ever
multiplies by 2^n needs only k - n bits. In memory every entry uses the L limbs of Z_2^k;
as stored, entry j takes ceil(k_j / 8) bytes.

Key of one party for one function (bytes as stored, see ``DCFParams.nbytes_per_key``):
    seed 16 | n x (s_cw 16 | V_cw W) | t_cw ceil(2n / 8) | final W,     W = sum_j ceil(k_j / 8)
(stored field by field, the correction-word fields level-major: level i of every key of a
batch is one contiguous block, what batched evaluation reads)
i.e. n (lambda + 2 + sum k_j) + lambda + sum k_j bits in the paper's count [BCG+21 Thm. 3.2],
with the 2n control bits packed four levels to a byte and each k_j rounded up to whole bytes.

``dcf_gen`` and ``dcf_eval`` run the native kernels by default (``native.py``; C and Go in
the HE library's module) and this numpy code otherwise; the numpy code is the reference
the kernels are tested against (same keys byte for byte, same shares).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from secinfer.crypto.fss import native
from secinfer.crypto.fss.expand import MMOHash, fresh_seeds
from secinfer.arith.ring import Ring
from secinfer.errors import ConfigError, SerializationError

MAX_DOMAIN_BITS = 64


def tbit_bytes(n: int) -> int:
    """Bytes of the control-bit corrections: 2 bits per level, four levels per byte."""
    return -(-2 * n // 8)
_LSB_CLEAR = np.uint64(0xFFFFFFFFFFFFFFFE)
CHUNK = 4096   # keys processed together: large batches are cut so the per-level arrays stay in cache


def _bits_msb_first(x: np.ndarray, n: int, level: int) -> np.ndarray:
    return ((x >> np.uint64(n - 1 - level)) & np.uint64(1)).astype(np.uint8)


@dataclass(frozen=True)
class DCFParams:
    """Shape of a DCF family: domain {0,1}^n, payload P elements of Z_2^k."""

    n: int
    out_bits: int
    payload: int = 1
    entry_bits: tuple = ()

    def __post_init__(self) -> None:
        if not 1 <= self.n <= MAX_DOMAIN_BITS:
            raise ConfigError(f"DCF domain bits must be in 1..64, got {self.n}")
        if self.payload < 1:
            raise ConfigError("DCF payload needs at least one group element")
        Ring(self.out_bits)  # validates k
        if self.entry_bits and (len(self.entry_bits) != self.payload
                                or not all(1 <= int(b) <= self.out_bits for b in self.entry_bits)):
            raise ConfigError(f"DCF entry bit widths {self.entry_bits} do not fit {self.payload} entries"
                              f" of at most {self.out_bits} bits")

    @property
    def bits(self) -> tuple:
        """Bit width k_j of every payload entry."""
        return tuple(int(b) for b in self.entry_bits) if self.entry_bits else (self.out_bits,) * self.payload

    @property
    def entry_bytes(self) -> tuple:
        return tuple(-(-b // 8) for b in self.bits)

    @property
    def packed_bytes(self) -> int:
        return sum(self.entry_bytes)

    @property
    def entry_mask(self) -> np.ndarray:
        """(P, L) limb masks: entry j reduced mod 2^k_j."""
        lim = self.group.limbs
        out = np.zeros((self.payload, lim), np.uint64)
        for j, b in enumerate(self.bits):
            for w in range(lim):
                width = min(max(b - 64 * w, 0), 64)
                out[j, w] = np.uint64((1 << width) - 1)
        return out

    def reduce_entries(self, a: np.ndarray) -> np.ndarray:
        return np.asarray(a, np.uint64) & self.entry_mask

    def pack(self, a: np.ndarray) -> np.ndarray:
        """(..., P, L) uint64 -> (..., W) uint8, entry j in its first ceil(k_j/8) bytes."""
        a = np.ascontiguousarray(a, dtype="<u8")
        by = a.view(np.uint8).reshape(a.shape[:-2] + (self.payload, 8 * self.group.limbs))
        return np.concatenate([by[..., j, :nb] for j, nb in enumerate(self.entry_bytes)], axis=-1)

    @property
    def byte_limits(self) -> np.ndarray:
        """(W,) largest allowed value of each stored byte (the top byte of an entry whose width
        is not a whole number of bytes has its unused bits clear): validates packed words
        without unpacking them."""
        out = np.full(self.packed_bytes, 0xFF, np.uint8)
        pos = 0
        for b, nb in zip(self.bits, self.entry_bytes):
            pos += nb
            if b % 8:
                out[pos - 1] = (1 << (b % 8)) - 1
        return out

    def unpack_into(self, b: np.ndarray, buf: np.ndarray) -> np.ndarray:
        """(B, W) packed bytes -> (B, P, L) uint64 view of ``buf`` ((B, P, 8 L) uint8 whose
        padding bytes are zero and stay zero: every call rewrites only the entry bytes)."""
        pos = 0
        for j, nb in enumerate(self.entry_bytes):
            buf[:, j, :nb] = b[:, pos:pos + nb]
            pos += nb
        return buf.view("<u8").reshape(b.shape[0], self.payload, self.group.limbs)

    def unpack(self, b: np.ndarray) -> np.ndarray:
        """Inverse of ``pack`` (no validation)."""
        lim = self.group.limbs
        out = np.zeros(b.shape[:-1] + (self.payload, 8 * lim), np.uint8)
        pos = 0
        for j, nb in enumerate(self.entry_bytes):
            out[..., j, :nb] = b[..., pos:pos + nb]
            pos += nb
        return out.view("<u8").astype(np.uint64).reshape(b.shape[:-1] + (self.payload, lim))

    @property
    def group(self) -> Ring:
        return Ring(self.out_bits)

    @property
    def words(self) -> int:
        """uint64 words of one payload vector."""
        return self.payload * self.group.limbs

    @property
    def value_blocks(self) -> int:
        return -(-self.words // 2)

    def nbytes_per_key(self) -> int:
        w = self.packed_bytes
        return 16 + self.n * (16 + w) + tbit_bytes(self.n) + w

    # tweak layout of the MMO hash (see expand.py)
    def seed_tweak(self, side):
        return side

    def value_tweaks(self, side) -> np.ndarray:
        base = 2 + np.asarray(side, np.uint64) * np.uint64(self.value_blocks)
        return base[..., None] + np.arange(self.value_blocks, dtype=np.uint64)

    def convert_tweaks(self) -> np.ndarray:
        return 2 + 2 * self.value_blocks + np.arange(self.value_blocks, dtype=np.uint64)

    def eval_tweak_table(self) -> np.ndarray:
        """(2, 1 + nv): row s = tweaks of [seed of child s, values of child s]."""
        return np.stack([np.concatenate([[side], self.value_tweaks(side)]) for side in (0, 1)]).astype(np.uint64)

    def gen_tweak_table(self) -> np.ndarray:
        """(2, 2 + 2 nv): row a = tweaks of [keep seed, lose seed, keep values, lose values]."""
        return np.stack([np.concatenate([[a, 1 - a], self.value_tweaks(a), self.value_tweaks(1 - a)])
                         for a in (0, 1)]).astype(np.uint64)

    def words_to_group(self, blocks: np.ndarray, reduce: bool = True) -> np.ndarray:
        """(B, nv, 2) hash blocks -> (B, P, L) group elements (unreduced if ``reduce`` is off)."""
        b = blocks.shape[0]
        w = blocks.reshape(b, -1)[:, :self.words].reshape(b, self.payload, self.group.limbs)
        return self.group.reduce(w) if reduce else w


@dataclass
class DCFKeys:
    """One party's keys for a batch of B comparison functions (arrays are the key material)."""

    params: DCFParams
    party: int
    seed: np.ndarray      # (B, 2) uint64
    # Correction words level-major (level axis first), so that evaluating level i reads
    # one contiguous block for the whole batch, and held as stored (packed): the value
    # words are unpacked one level at a time during evaluation.
    s_cw: np.ndarray      # (n, B, 2) uint64
    t_cw: np.ndarray      # (ceil(n/4), B) uint8: level i in bits 2(i mod 4) (t_cw^L), +1 (t_cw^R)
    v_cw: np.ndarray      # (n, B, W) uint8, packed to the entry widths
    final: np.ndarray     # (B, P, L) uint64    (stored packed: (B, W) uint8)

    FIELDS = ("seed", "s_cw", "t_cw", "v_cw", "final")

    @property
    def count(self) -> int:
        return int(self.seed.shape[0])

    @staticmethod
    def stored_shapes(p: DCFParams, b: int) -> dict:
        """Field -> (shape, dtype) of the stored (packed) key arrays."""
        return {"seed": ((b, 2), np.uint64), "s_cw": ((p.n, b, 2), np.uint64),
                "t_cw": ((tbit_bytes(p.n), b), np.uint8), "v_cw": ((p.n, b, p.packed_bytes), np.uint8),
                "final": ((b, p.packed_bytes), np.uint8)}

    def arrays(self) -> dict:
        """The key as stored / sent: correction words packed to their entry widths."""
        return {"seed": self.seed, "s_cw": self.s_cw, "t_cw": self.t_cw,
                "v_cw": self.v_cw, "final": self.params.pack(self.final)}

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays().values())

    @classmethod
    def from_arrays(cls, params: DCFParams, party: int, arrays: dict, count: int) -> "DCFKeys":
        """Validate untrusted key material (dtype, shape, value ranges) and wrap it."""
        if party not in (0, 1):
            raise SerializationError(f"DCF key party must be 0 or 1, got {party}")
        out = {}
        for name, (shape, dt) in cls.stored_shapes(params, count).items():
            a = arrays.get(name)
            if a is None:
                raise SerializationError(f"DCF key: missing field {name!r}")
            a = np.asarray(a)
            if a.dtype != np.dtype(dt) or a.shape != shape:
                raise SerializationError(
                    f"DCF key field {name!r}: expected {np.dtype(dt)}{shape}, got {a.dtype}{a.shape}")
            out[name] = np.ascontiguousarray(a)
        spare = 2 * params.n % 8
        if spare and np.any(out["t_cw"][-1] >> np.uint8(spare)):
            raise SerializationError("DCF key: control-bit corrections out of range")
        lim = params.byte_limits
        if np.any(lim != 0xFF) and (np.any(out["v_cw"] > lim) or np.any(out["final"] > lim)):
            raise SerializationError(f"DCF key: correction words exceed their entry widths {params.bits}")
        out["final"] = params.unpack(out["final"])
        return cls(params, party, **out)

    def take(self, idx) -> "DCFKeys":
        """Keys of a subset / repetition of the batch (fancy indexing on the key axis)."""
        return DCFKeys(self.params, self.party, self.seed[idx], self.s_cw[:, idx], self.t_cw[:, idx],
                       self.v_cw[:, idx], self.final[idx])


def dcf_gen(params: DCFParams, prg, alpha: np.ndarray, beta: np.ndarray, *,
            backend: str | None = None) -> tuple[DCFKeys, DCFKeys]:
    """Keys for f^<_{alpha[i], beta[i]} for every i [BCG+21 Fig. 1, Gen^<].

    alpha: (B,) uint64 < 2^n; beta: (B, P, L) group elements. ``backend``: "native",
    "numpy" or "auto" (default: see ``native.resolve``); both give the same keys from the
    same PRG.
    """
    alpha = np.asarray(alpha, np.uint64).reshape(-1)
    if alpha.shape[0] and native.resolve(backend) == "native":
        return _dcf_gen_native(params, prg, alpha, beta)
    return _dcf_gen_numpy(params, prg, alpha, beta)


def _root_seeds(prg, bsz: int) -> list:
    """Both parties' root seeds (lowest bit clear), drawn from ``prg`` in the order of the
    numpy generator (two draws per chunk of ``CHUNK`` keys), so both backends agree."""
    parts = ([], [])
    for i in range(0, bsz, CHUNK):
        c = min(CHUNK, bsz - i)
        for b in (0, 1):
            parts[b].append(fresh_seeds(prg, c))
    roots = [np.concatenate(p) if len(p) > 1 else p[0] for p in parts]
    for r in roots:
        r[:, 0] &= _LSB_CLEAR
    return roots


def _dcf_gen_native(params: DCFParams, prg, alpha: np.ndarray, beta) -> tuple[DCFKeys, DCFKeys]:
    bsz, lim, pay = alpha.shape[0], params.group.limbs, params.payload
    beta = params.reduce_entries(np.asarray(beta, np.uint64).reshape(bsz, pay, lim))
    if params.n < 64 and np.any(alpha >> np.uint64(params.n)):
        raise ConfigError(f"DCF alpha must be < 2^{params.n}")
    root = _root_seeds(prg, bsz)
    s_cw, t_cw, v_cw, final = native.dcf_gen(params, np.ascontiguousarray(alpha), beta, root[0], root[1])
    return tuple(DCFKeys(params, b, root[b], s_cw, t_cw, v_cw, final) for b in (0, 1))  # type: ignore


def _dcf_gen_numpy(params: DCFParams, prg, alpha: np.ndarray, beta) -> tuple[DCFKeys, DCFKeys]:
    if alpha.shape[0] > CHUNK:
        beta = np.asarray(beta, np.uint64).reshape(alpha.shape[0], params.payload, params.group.limbs)
        parts = [_dcf_gen_numpy(params, prg, alpha[i:i + CHUNK], beta[i:i + CHUNK])
                 for i in range(0, alpha.shape[0], CHUNK)]
        cw = {f: np.concatenate([getattr(p[0], f) for p in parts], axis=1) for f in ("s_cw", "t_cw", "v_cw")}
        return tuple(DCFKeys(params, b, np.concatenate([p[b].seed for p in parts]), cw["s_cw"], cw["t_cw"],
                             cw["v_cw"], np.concatenate([p[b].final for p in parts]))
                     for b in (0, 1))  # type: ignore[return-value]
    n, lim, pay = params.n, params.group.limbs, params.payload
    bsz = alpha.shape[0]
    beta = params.reduce_entries(np.asarray(beta, np.uint64).reshape(bsz, pay, lim))
    if n < 64 and np.any(alpha >> np.uint64(n)):
        raise ConfigError(f"DCF alpha must be < 2^{n}")
    h = MMOHash()
    root = [fresh_seeds(prg, bsz), fresh_seeds(prg, bsz)]
    root[0][:, 0] &= np.uint64(0xFFFFFFFFFFFFFFFE)
    root[1][:, 0] &= np.uint64(0xFFFFFFFFFFFFFFFE)
    s = [root[0].copy(), root[1].copy()]
    t = [np.zeros(bsz, np.uint8), np.ones(bsz, np.uint8)]
    # Group values as limb planes (L contiguous (B, P) arrays, sums unreduced mod 2^(64 L);
    # every entry modulus 2^k_j divides 2^(64 L), so one reduction of the stored words at the
    # end gives the same key as reducing at every step).
    beta_pl = _planes(beta)
    v_alpha = [np.zeros((bsz, pay), np.uint64) for _ in range(lim)]
    s_cw = np.zeros((n, bsz, 2), np.uint64)
    t_cw = np.zeros((tbit_bytes(n), bsz), np.uint8)
    vcw_pl = np.zeros((lim, n, bsz, pay), np.uint64)     # level-major while generating
    nv = params.value_blocks
    gen_table = params.gen_tweak_table()
    for i in range(n):
        a = _bits_msb_first(alpha, n, i)                    # keep side = a, lose side = 1 - a
        # Per-key tweaks so the hash returns [keep seed, lose seed, keep values, lose values]:
        # the keep/lose selection costs nothing.
        tw = gen_table[a]
        blk = [h.hash(s[b], tw) for b in (0, 1)]            # (B, 2 + 2 nv, 2) each
        v_keep = [_word_planes(params, blk[b][:, 2:2 + nv], contiguous=True) for b in (0, 1)]
        v_lose = [_word_planes(params, blk[b][:, 2 + nv:2 + 2 * nv], contiguous=True) for b in (0, 1)]
        sl = [blk[b][:, 1].copy() for b in (0, 1)]
        tl = [(sl[b][:, 0] & np.uint64(1)).astype(np.uint8) for b in (0, 1)]
        tk = [(blk[b][:, 0, 0] & np.uint64(1)).astype(np.uint8) for b in (0, 1)]
        scw = sl[0] ^ sl[1]
        scw[:, 0] &= _LSB_CLEAR
        # The lose side is L exactly when alpha_i = 1: every x taking it has x < alpha.
        # e = v_lose1 - v_lose0 + alpha_i beta;  V_cw = (-1)^t1 (e - V_alpha)
        a_mask = np.uint64(0) - a.astype(np.uint64)
        e = _padd(_psub(v_lose[1], v_lose[0]), [x & a_mask[:, None] for x in beta_pl])
        vcw = _pcond_neg(_psub(e, v_alpha), t[1])
        for w in range(lim):
            vcw_pl[w, i] = vcw[w]
        # V_alpha - d_keep + (-1)^t1 V_cw with (-1)^t1 V_cw = e - V_alpha simplifies to e - d_keep:
        v_alpha = _psub(_padd(e, v_keep[0]), v_keep[1])
        tcw_keep = tk[0] ^ tk[1] ^ np.uint8(1)
        tcw_lose = tl[0] ^ tl[1]
        keep_r = a.astype(bool)
        tcw_l = np.where(keep_r, tcw_lose, tcw_keep)
        tcw_r = np.where(keep_r, tcw_keep, tcw_lose)
        s_cw[i] = scw
        t_cw[i // 4] |= (tcw_l | (tcw_r << np.uint8(1))) << np.uint8(2 * (i % 4))
        for b in (0, 1):
            nxt = blk[b][:, 0].copy()
            nxt[:, 0] &= _LSB_CLEAR
            nxt ^= scw & (np.uint64(0) - t[b].astype(np.uint64))[:, None]
            s[b] = nxt
            t[b] = tk[b] ^ (t[b] & tcw_keep)
    conv = [_word_planes(params, h.hash(s[b], params.convert_tweaks())) for b in (0, 1)]
    final = _pcond_neg(_psub(_psub(conv[1], conv[0]), v_alpha), t[1])
    final = params.reduce_entries(np.stack(final, axis=-1))
    # pack (keeps each entry's whole bytes), then clear the unused top bits of partial bytes
    v_cw = params.pack(vcw_pl.transpose(1, 2, 3, 0))
    v_cw &= params.byte_limits
    # both parties' keys hold the same correction words (read-only arrays, shared)
    keys = tuple(DCFKeys(params, b, root[b], s_cw, t_cw, v_cw, final) for b in (0, 1))
    return keys  # type: ignore[return-value]


# ---- limb-plane arithmetic (lists of L contiguous uint64 arrays, mod 2^(64 L)) ----------
def _planes(a: np.ndarray) -> list:
    """(..., L) limbs -> L contiguous arrays."""
    return [np.ascontiguousarray(a[..., w]) for w in range(a.shape[-1])]


def _word_planes(params: DCFParams, blocks: np.ndarray, contiguous: bool = False) -> list:
    """(B, nv, 2) hash blocks -> the payload as limb planes (word p L + l is limb l of entry p);
    strided views, or (``contiguous``) one de-interleaving copy for repeated use."""
    b, lim, pay = blocks.shape[0], params.group.limbs, params.payload
    w = blocks.reshape(b, -1)
    if contiguous:
        t = np.ascontiguousarray(w[:, :pay * lim].reshape(b, pay, lim).transpose(2, 0, 1))
        return [t[l] for l in range(lim)]
    return [w[:, l:pay * lim:lim] for l in range(lim)]


def _padd(a: list, b: list) -> list:
    lo = a[0] + b[0]
    if len(a) == 1:
        return [lo]
    hi = a[1] + b[1]
    hi += lo < a[0]
    return [lo, hi]


def _psub(a: list, b: list) -> list:
    lo = a[0] - b[0]
    if len(a) == 1:
        return [lo]
    hi = a[1] - b[1]
    hi -= a[0] < b[0]
    return [lo, hi]


def _pcond_neg(a: list, bit: np.ndarray) -> list:
    """(-1)^bit a = (a xor M) + bit with M all ones where bit = 1 (two's complement)."""
    tb = bit.astype(np.uint64)[:, None]
    m = np.uint64(0) - tb
    lo = (a[0] ^ m) + tb
    if len(a) == 1:
        return [lo]
    hi = a[1] ^ m
    hi += lo < tb
    return [lo, hi]


def _accumulate(planes: list, add: list) -> None:
    """planes (limb planes of an unreduced sum, in place) += add (limb planes)."""
    lo = add[0]
    planes[0] += lo
    if len(planes) == 2:
        planes[1] += add[1]
        planes[1] += planes[0] < lo


def dcf_eval(keys: DCFKeys, x: np.ndarray, *, backend: str | None = None) -> np.ndarray:
    """Party ``keys.party``'s shares of f^<(x): key i is evaluated at x[i] (or at every x[i, :]).

    x: (B,) or (B, M) uint64 < 2^n. Returns (B, P, L) or (B, M, P, L). ``backend`` as for
    ``dcf_gen``; both give the same shares.
    """
    params, gk, n = keys.params, keys.params.group, keys.params.n
    x = np.asarray(x, np.uint64)
    if x.ndim not in (1, 2) or x.shape[0] != keys.count:
        raise ConfigError(f"DCF eval: expected {keys.count} points (or rows of points), got shape {x.shape}")
    if n < 64 and np.any(x >> np.uint64(n)):
        raise ConfigError(f"DCF eval: points must be < 2^{n}")
    if x.size and native.resolve(backend) == "native":
        out = native.dcf_eval(keys, x.reshape(keys.count, -1))
        return out.reshape(x.shape + (params.payload, gk.limbs))
    return _dcf_eval_numpy(keys, x)


def _dcf_eval_numpy(keys: DCFKeys, x: np.ndarray) -> np.ndarray:
    params, gk, n = keys.params, keys.params.group, keys.params.n
    g = gk.raw
    if x.ndim == 2:
        m = x.shape[1]
        rep = keys.take(np.repeat(np.arange(keys.count), m))
        return _dcf_eval_numpy(rep, x.reshape(-1)).reshape(keys.count, m, params.payload, gk.limbs)
    if keys.count > CHUNK:
        return np.concatenate([_dcf_eval_numpy(keys.take(slice(i, i + CHUNK)), x[i:i + CHUNK])
                               for i in range(0, keys.count, CHUNK)])
    h = MMOHash()
    bsz, lim = keys.count, gk.limbs
    s = keys.seed.copy()
    t = np.full(bsz, keys.party, np.uint8)
    # Accumulator as contiguous limb planes, updated in place (carries explicit); the
    # correction words level-major so that each level reads one contiguous block.
    planes = [np.zeros((bsz, params.payload), np.uint64) for _ in range(lim)]
    vcw, tcw, scw = keys.v_cw, keys.t_cw, keys.s_cw
    buf = np.zeros((bsz, params.payload, 8 * lim), np.uint8)
    eval_table = params.eval_tweak_table()
    for i in range(n):
        side = _bits_msb_first(x, n, i)
        blk = h.hash(s, eval_table[side])
        t_mask = np.uint64(0) - t.astype(np.uint64)                 # t ? all ones : 0
        _accumulate(planes, _word_planes(params, blk[:, 1:]))
        cw = params.unpack_into(vcw[i], buf)
        _accumulate(planes, [cw[..., w] & t_mask[:, None] for w in range(lim)])
        tc = (tcw[i // 4] >> (side + np.uint8(2 * (i % 4)))) & np.uint8(1)
        t_child = (blk[:, 0, 0] & np.uint64(1)).astype(np.uint8)
        s = blk[:, 0].copy()
        s[:, 0] &= _LSB_CLEAR
        s ^= scw[i] & t_mask[:, None]
        t = t_child ^ (t & tc)
    conv = _word_planes(params, h.hash(s, params.convert_tweaks()))
    t_mask = np.uint64(0) - t.astype(np.uint64)
    _accumulate(planes, conv)
    _accumulate(planes, [keys.final[..., w] & t_mask[:, None] for w in range(lim)])
    acc = np.stack(planes, axis=-1)
    return params.reduce_entries(g.neg(acc) if keys.party == 1 else acc)
