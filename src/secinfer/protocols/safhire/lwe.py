"""The HE pieces SAFHIRE uses, on today's coefficient-domain RLWE API (secinfer.crypto.he.rlwe).

Everything the protocol does with ciphertexts goes through this module, so that the HE
core's faster pieces (partial trace extraction, batched LWE products, fast packing) can
replace these functions one by one:

* client: ``encrypt`` a vector of integers as RLWE polynomials of N coefficients each,
  scaled by Delta, with the client's secret key [SAFHIRE Sec. 4.3 "flatten and chunk"];
  ``decrypt`` the packed answers (and measure their noise).
* server: ``extract`` LWE ciphertexts of the used coefficients [Sec. 4.4 step 6], hold them
  as RNS arrays ``Lwe(b, a)`` with b + <a, s> = Delta m + e (mod q_l, one row per prime);
  ``select`` rows (unshuffle / shuffle / window layout, steps 7 and 9); ``linear``: one
  batched exact integer product W X + Delta bias mod q on all LWE ciphertexts at once
  (step 8); ``pack`` back into RLWE by automorphism key switching (step 10).

The product is exact: every residue is cut into three 20-bit limbs, each limb product runs
as a float64 sparse product (exact while the row l1-norm of W times 2^21 stays below 2^53,
checked), and the limbs are recombined mod q with shifts that never leave uint64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from secinfer.crypto import he
from secinfer.crypto.he import rlwe
from secinfer.errors import ConfigError, ProtocolError

LIMB = 20


@dataclass
class Lwe:
    """count LWE ciphertexts: b (count, L+1), a (count, L+1, N), uint64 residues."""

    b: np.ndarray
    a: np.ndarray

    def __len__(self) -> int:
        return int(self.b.shape[0])

    def select(self, idx) -> "Lwe":
        idx = np.asarray(idx, dtype=np.int64)
        return Lwe(self.b[idx], self.a[idx])

    @staticmethod
    def concat(parts: list["Lwe"]) -> "Lwe":
        return Lwe(np.concatenate([p.b for p in parts]), np.concatenate([p.a for p in parts]))


# ---------------------------------------------------------------- client side
def encrypt(params, v: np.ndarray, sk, log_delta: int) -> list:
    """RLWE_s(Delta * chunk) for each chunk of N coefficients (zero padded)."""
    v = np.asarray(v, dtype=np.int64).reshape(-1)
    n = params.n
    out = []
    for s in range(0, max(len(v), 1), n):
        out.append(rlwe.coeff_encrypt(params, v[s:s + n].astype(np.float64), sk, float(2.0 ** log_delta),
                                      level=0))
    return out


def decrypt(params, cts: list, sk, log_delta: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The packed integers (count values over the chunks, at spread positions) and their
    decryption noise in message units (value - nearest integer)."""
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


def chunks(count: int, n: int) -> int:
    return max(1, -(-count // n))


# ---------------------------------------------------------------- server side
def extract(params, cts: list, count: int) -> Lwe:
    """LWE ciphertexts of coefficients 0..count-1 across the chunks [SAFHIRE Sec. 4.4]."""
    parts = []
    left = count
    for ct in cts:
        c = min(left, params.n)
        with rlwe.extract_lwe(params, ct, np.arange(c)) as batch:
            b, a = batch.to_arrays()
        parts.append(Lwe(b, a))
        left -= c
    return Lwe.concat(parts)


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


def linear(params, x: Lwe, w: sp.spmatrix, bias: np.ndarray, log_delta: int) -> Lwe:
    """W x + Delta bias on every LWE ciphertext at once (exact mod each prime)."""
    w = sp.csr_matrix(w)
    if w.shape[1] != len(x):
        raise ProtocolError(f"linear layer expects {w.shape[1]} inputs, got {len(x)}")
    l1 = float(np.max(np.asarray(abs(w).sum(axis=1)), initial=0))
    if l1 * 2.0 ** (LIMB + 2) >= 2.0 ** 53:
        raise ConfigError(f"weights too large for the exact product (row l1-norm {l1:.3g})")
    wf = w.astype(np.float64)
    nl = x.b.shape[1]
    n = x.a.shape[2]
    m = w.shape[0]
    ob = np.empty((m, nl), dtype=np.uint64)
    oa = np.empty((m, nl, n), dtype=np.uint64)
    mask = np.uint64((1 << LIMB) - 1)
    for lvl in range(nl):
        q = int(params.q[lvl])
        xl = np.concatenate([x.b[:, lvl:lvl + 1], x.a[:, lvl, :]], axis=1)     # (count, 1+N)
        acc = None
        for j in (2, 1, 0):
            limb = ((xl >> np.uint64(LIMB * j)) & mask).astype(np.float64)
            y = np.asarray(wf @ limb)
            y = np.mod(np.rint(y).astype(np.int64), np.int64(q)).astype(np.uint64)
            acc = y if acc is None else (_mul_pow2(acc, LIMB, q) + y) % np.uint64(q)
        bb = np.mod(np.asarray(bias, dtype=np.int64), np.int64(q)).astype(np.uint64)
        acc[:, 0] = (acc[:, 0] + _mul_pow2(bb, log_delta, q)) % np.uint64(q)
        ob[:, lvl] = acc[:, 0]
        oa[:, lvl, :] = acc[:, 1:]
    return Lwe(ob, oa)


def pack(params, ev, x: Lwe, log_delta: int) -> list:
    """RLWE ciphertexts holding the LWE plaintexts at spread positions, N per ciphertext
    [SAFHIRE Sec. 4.4 fast packing; here Lattigo's trace-sharing packing]."""
    out = []
    for s in range(0, len(x), params.n):
        with rlwe.lwe_from_arrays(params, x.b[s:s + params.n], x.a[s:s + params.n],
                                  log_scale=float(log_delta)) as batch:
            out.append(rlwe.pack_lwe(ev, batch))
    return out


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
