"""The HE pieces SAFHIRE uses, behind one small interface.

Two backends, chosen by what ``secinfer.crypto.he`` offers:

* ``fast`` (``secinfer.crypto.he.packing``, when present): the client encrypts m(X^d) for
  the 2^gamma elements d of D_gamma [SAFHIRE Sec. 4.3 "Power computations"], the server
  extracts partial traces without key switching [SAFHIRE Sec. 4.4, Lemma 1] and packs with the
  tree packer (N / 2^gamma - 1 key switches per N values, Table 1's role);
* ``classic`` (``secinfer.crypto.he.rlwe``): gamma = 0 only; LWE extraction and Lattigo's
  trace-sharing packing.

Either way the server holds a batch ``Lwe(b, a)``: per member and RNS limb l, ``b[t, l, :G]``
and ``a[t, l, :N]`` (G = 2^gamma) are integer vectors mod q_l on which any integer linear
map acts componentwise; the payload (Delta times the value) sits in the decryption at
``b``'s column 0. ``linear`` computes W X + Delta bias for all members at once, exactly
(``linprod``: float64 products on limbs of the residues, every sum below 2^53, convolutions
as dense GEMMs, recombined mod q) [SAFHIRE Sec. 4.4 step 8].
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from secinfer.crypto import he
from secinfer.crypto.he import rlwe
from secinfer.errors import ConfigError, ProtocolError

class DecryptionMarginError(ProtocolError):
    """The client's decryption came too close to a rounding boundary to be trusted."""


def fast_available() -> bool:
    return importlib.util.find_spec("secinfer.crypto.he.packing") is not None


def backend(gamma: int) -> str:
    if fast_available():
        return "fast"
    if gamma:
        raise ConfigError("safhire: gamma = 1, 2 need partial trace extraction from the HE core "
                          "(secinfer.crypto.he.packing), which this installation does not have; "
                          "use gamma=0")
    return "classic"


CLASSIC_PARAMS = "ckks-n13-128"
# smallest log2(Delta) per backend: the packing noise (classic, Lattigo's trace packing at
# N = 2^13: std ~2^17.8, max ~2^19.3; fast tree packing: max ~2^6) must stay far below Delta / 4
MIN_LOG_DELTA = {"classic": 24, "fast": 10}


def default_params(b: int, gamma: int) -> str:
    """The ring for accumulator precision b: with the fast backend the HE core's SAFHIRE
    profile [SAFHIRE Table 2's role] for max(b, 12), else ckks-n13-128 (level 0). Not b = 8's own
    profile: our Delta leaves room for the worst-case accumulator of every in-range input
    (a few bits above 2^b), and the b = 8 profile's wider key-switching digits leave its
    noise (~2^35 on a 53-bit q, measured) too close to that Delta; the b = 12 profile's
    (18-bit digits) is ~2^26.5, the b = 16 profile's (11-bit digits, for Delta = 2^31-2^33)
    ~2^20 [SAFHIRE Table 2: b = 16 keeps b = 12's noise level with a finer gadget]."""
    if backend(gamma) == "fast":
        from secinfer.crypto.he import packing as pk

        sets = getattr(pk, "PROFILE_SETS", {})
        return sets.get(max(b, 12), sets.get(b, CLASSIC_PARAMS))
    return CLASSIC_PARAMS


@dataclass
class Lwe:
    """count members: b (count, L, G), a (count, L, N), uint64 residues."""

    b: np.ndarray
    a: np.ndarray

    def __len__(self) -> int:
        return int(self.b.shape[0])

    def select(self, idx, pool=None) -> "Lwe":
        """Members idx, in that order; ``pool`` (a dict) lends output buffers of earlier
        calls (a fresh large array costs a page fault per 4 KiB, more than the copy)."""
        idx = np.asarray(idx, dtype=np.int64)
        if pool is None:
            return Lwe(self.b[idx], self.a[idx])
        ob = pooled(pool, "sel_b", (len(idx),) + self.b.shape[1:], self.b.dtype)
        oa = pooled(pool, "sel_a", (len(idx),) + self.a.shape[1:], self.a.dtype)
        if len(idx) and (int(idx.min()) < 0 or int(idx.max()) >= len(self)):
            raise ProtocolError("member index out of range")
        # mode "clip" (indices checked above): with out=, mode "raise" buffers a full copy
        np.take(self.b, idx, axis=0, out=ob, mode="clip")
        np.take(self.a, idx, axis=0, out=oa, mode="clip")
        return Lwe(ob, oa)

    @staticmethod
    def concat(parts: list["Lwe"]) -> "Lwe":
        return Lwe(np.concatenate([p.b for p in parts]), np.concatenate([p.a for p in parts]))


def pooled(pool: dict, name: str, shape: tuple, dtype) -> np.ndarray:
    """A buffer kept in ``pool`` under (name, shape, dtype), allocated on first use."""
    key = (name, tuple(int(a) for a in shape), np.dtype(dtype).str)
    b = pool.get(key)
    if b is None:
        b = pool[key] = np.empty(key[1], dtype)
    return b


# ---------------------------------------------------------------- keys
def eval_keys(params, sk, gamma: int):
    """The automorphism keys the server's packing needs (sent once at set-up [SAFHIRE Sec. 4.2])."""
    if backend(gamma) == "fast":
        from secinfer.crypto.he import packing as pk

        return params.gen_eval_keys(sk, relin=False, galois=pk.pack_galois_elements(params, gamma))
    return params.gen_eval_keys(sk, relin=False, pack=True)


def cts_per_chunk(gamma: int) -> int:
    return 1 << gamma


def chunks(count: int, n: int) -> int:
    return max(1, -(-count // n))


# ---------------------------------------------------------------- client side
def encrypt(params, v: np.ndarray, sk, log_delta: int, gamma: int = 0) -> list:
    """For each chunk of N values: RLWE_s(Delta m(X^d)) for d in D_gamma (the fast backend;
    the payload gains 2^gamma in extraction, so it encrypts at Delta / 2^gamma), or
    RLWE_s(Delta m) (classic). Flat list, chunk by chunk."""
    v = np.asarray(v, dtype=np.int64).reshape(-1)
    n = params.n
    out = []
    fast = backend(gamma) == "fast"
    for s in range(0, max(len(v), 1), n):
        part = v[s:s + n]
        if fast:
            from secinfer.crypto.he import packing as pk

            out.extend(pk.encrypt_powers(params, part, sk, log_delta - gamma, gamma))
        else:
            out.append(rlwe.coeff_encrypt(params, part.astype(np.float64), sk, float(2.0 ** log_delta),
                                          level=0))
    return out


def decrypt(params, cts: list, sk, log_delta: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The packed integers (count values over the ciphertexts, at spread positions) and their
    decryption noise in message units (value / Delta - nearest integer)."""
    vals, noise = [], []
    left = count
    for ct in cts:
        c = min(left, params.n)
        d = rlwe.coeff_decrypt(params, ct, sk, float(2.0 ** log_delta))[rlwe.spread_positions(c, params.n)]
        r = np.rint(d)
        vals.append(r.astype(np.int64))
        noise.append(d - r)
        left -= c
    if left != 0:
        raise ProtocolError(f"answer has {len(cts)} ciphertexts, too few for {count} values")
    return np.concatenate(vals), np.concatenate(noise)


# ---------------------------------------------------------------- server side
def extract(params, cts: list, count: int, gamma: int = 0, threads: int = 1) -> Lwe:
    """Members 0..count-1 (coefficient j of chunk j // N) [SAFHIRE Sec. 4.4 step 6]."""
    n = params.n
    if backend(gamma) == "fast":
        from secinfer.crypto.he import packing as pk

        g = cts_per_chunk(gamma)
        groups = [cts[i:i + g] for i in range(0, len(cts), g)]
        idx = np.arange(count, dtype=np.int64)
        batch = pk.extract(params, groups, idx % n, idx // n, gamma=gamma, threads=threads)
        return Lwe(batch.b, batch.a)
    parts = []
    left = count
    for ct in cts:
        c = min(left, n)
        with rlwe.extract_lwe(params, ct, np.arange(c)) as batch:
            b, a = batch.to_arrays()
        parts.append(Lwe(b[:, :, None], a))
        left -= c
    return Lwe.concat(parts)


def extract_at(params, cts: list, pos, gamma: int = 0, threads: int = 1) -> Lwe:
    """Members at positions ``pos`` (coefficient p % N of chunk p // N), in that order: the
    server's tiled round extracts only what one tile reads [SAFHIRE Sec. 4.4 step 6]."""
    n = params.n
    pos = np.asarray(pos, dtype=np.int64).reshape(-1)
    if backend(gamma) == "fast":
        from secinfer.crypto.he import packing as pk

        g = cts_per_chunk(gamma)
        groups = [cts[i:i + g] for i in range(0, len(cts), g)]
        batch = pk.extract(params, groups, pos % n, pos // n, gamma=gamma, threads=threads)
        return Lwe(batch.b, batch.a)
    out = None
    for k in np.unique(pos // n):
        sel = np.flatnonzero(pos // n == k)
        with rlwe.extract_lwe(params, cts[int(k)], pos[sel] % n) as batch:
            b, a = batch.to_arrays()
        if out is None:
            out = Lwe(np.empty((len(pos), b.shape[1], 1), np.uint64), np.empty((len(pos),) + a.shape[1:], np.uint64))
        out.b[sel, :, 0], out.a[sel] = b, a
    if out is None:
        nl = len(params.q) if hasattr(params, "q") else 1
        out = Lwe(np.empty((0, nl, 1), np.uint64), np.empty((0, nl, n), np.uint64))
    return out


def _mul_pow2(r: np.ndarray, k: int, q: int) -> np.ndarray:
    """r * 2^k mod q for uint64 r < q, by shifts that stay below 2^64."""
    step = 64 - q.bit_length()
    if step < 1:
        raise ConfigError("prime too wide for the limb recombination")
    qq = np.uint64(q)
    while k > 0:
        s = min(step, k)
        r = (r << np.uint64(s)) % qq
        k -= s
    return r


def linear(params, x, w, bias: np.ndarray, log_delta: int, threads: int = 1, plan=None,
           pool: dict | None = None) -> Lwe:
    """W x + Delta bias on every member at once (exact mod each prime) [SAFHIRE Sec. 4.4
    step 8]. ``x``: one Lwe batch, or one per source of ``plan`` (``linprod.plan``: the
    round's map per source, convolutions found and applied as dense GEMMs); without a plan,
    ``w`` (sparse or dense, (m, len(x))) is planned on the spot (no shapes: sparse or dense
    products). ``threads`` workers (linprod.product_mod); ``pool``: reused output buffers
    (the result then lives only until the next call with that pool)."""
    from secinfer.protocols.safhire import linprod as LP

    xs = [x] if isinstance(x, Lwe) else list(x)
    if plan is None:
        w = sp.csr_matrix(w)
        if len(xs) != 1 or w.shape[1] != len(xs[0]):
            raise ProtocolError(f"linear layer expects {w.shape[1]} inputs, got {sum(map(len, xs))}")
        plan = LP.plan([w], [None], None)
    if [len(v) for v in xs] != [b.width for b in plan.blocks]:
        raise ProtocolError(f"linear layer expects inputs of {[b.width for b in plan.blocks]}, "
                            f"got {[len(v) for v in xs]}")
    nl, g = xs[0].b.shape[1], xs[0].b.shape[2]
    m = plan.m
    ob = np.empty((m, nl, g), dtype=np.uint64)
    oa = np.empty((m, nl, xs[0].a.shape[2]), dtype=np.uint64)
    for lvl in range(nl):
        q = int(params.q[lvl])
        buf = None if pool is None or nl != 1 else pooled(pool, "acc", (m, g + xs[0].a.shape[2]), np.int64)
        acc = LP.product_mod(plan, [[v.b[:, lvl, :], v.a[:, lvl, :]] for v in xs], q, threads,
                             out=buf).view(np.uint64)
        bb = np.mod(np.asarray(bias, dtype=np.int64), np.int64(q)).astype(np.uint64)
        acc[:, 0] = (acc[:, 0] + _mul_pow2(bb, log_delta, q)) % np.uint64(q)
        if nl == 1:                       # views: the caller's row selection copies anyway
            return Lwe(acc[:, None, :g], acc[:, None, g:])
        ob[:, lvl, :] = acc[:, :g]
        oa[:, lvl, :] = acc[:, g:]
    return Lwe(ob, oa)


def pack(params, ev, x: Lwe, log_delta: int, gamma: int = 0, threads: int = 1) -> tuple[list, int]:
    """RLWE ciphertexts holding the members' payloads at spread positions, N per
    ciphertext [SAFHIRE Sec. 4.4 step 10]; and the key switches made (None if unknown)."""
    out, ks = [], 0
    fast = backend(gamma) == "fast"
    for s in range(0, len(x), params.n):
        b, a = x.b[s:s + params.n], x.a[s:s + params.n]
        if fast:
            from secinfer.crypto.he import packing as pk

            ct, k = pk.pack(ev, pk.LWEArrays(params, np.ascontiguousarray(b), np.ascontiguousarray(a),
                                             gamma, log_delta), threads=threads)
            out.append(ct)
            ks += k
        else:
            with rlwe.lwe_from_arrays(params, b[:, :, 0], a, log_scale=float(log_delta)) as batch:
                out.append(rlwe.pack_lwe(ev, batch))
            c = len(b)
            lg = max(0, (c - 1).bit_length())
            ks += (1 << lg) - 1 + params.log_n - lg            # docs/he.md: shared trace
    return out, ks


def load_cts(params, blobs: list[np.ndarray], expected: int) -> list:
    """Ciphertexts from the wire (the loader checks length, fingerprint, residue ranges)."""
    if len(blobs) != expected:
        raise ProtocolError(f"expected {expected} ciphertexts, got {len(blobs)}")
    cts = []
    for data in blobs:
        ct = params.load(bytes(np.asarray(data, dtype=np.uint8)), he.Ciphertext)
        if ct.level != 0 or ct.degree != 1:
            raise ProtocolError("SAFHIRE ciphertexts are degree-1 at level 0")
        cts.append(ct)
    return cts


def to_wire(cts: list) -> list[np.ndarray]:
    return [np.frombuffer(ct.to_bytes(), dtype=np.uint8) for ct in cts]


def close_all(objs) -> None:
    for o in objs:
        try:
            o.close()
        except Exception:  # noqa: BLE001 - freeing must not hide the real outcome
            pass
