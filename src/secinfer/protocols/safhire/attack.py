"""The model-extraction attack of [SAFHIRE Sec. 5] against one round, for analysis and tests.

An adversarial client sends crafted inputs in round r and reads what it decrypts. The
round runs the server's real code (``ServerRound``: extraction, unshuffling with
sigma_{r-1}, the product, window layout, shuffling with sigma_r, packing) on real
ciphertexts under the attacker's own key; every query is a fresh sample of the session, so
it meets fresh permutations, as in the protocol.

(i)   no shuffling: x = 0 gives the bias, x = e_i gives column i plus the bias: the
      integer weights and biases come out exactly.
(ii)  output shuffling (round 1 of SAFHIRE): the probes 0, e_i, 2 e_i give, per column, the
      multiset of its entries (matching (b_k + y2_j) / 2 in y1), but not their rows.
(iii) input and output shuffling (later rounds): e_i lands on a random column each time;
      the attacker gets a multiset of some column, not of column i.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from secinfer.ir.quantize import wrap
from secinfer.protocols.safhire import lwe as L
from secinfer.protocols.safhire.protocol import OpClock, ServerRound


class RoundOracle:
    """What the client sees when it sends ``v`` in round ``r`` of a fresh sample."""

    def __init__(self, qm, params, ld: int, r: int, shuffle: bool, seed: bytes) -> None:
        from secinfer.crypto import he

        self.qm, self.params, self.ld, self.r, self.seed = qm, params, ld, r, seed
        if len(qm.rounds[r].sources) != 1:
            raise ValueError("the attack harness takes rounds with one source")
        self.core = ServerRound(qm, params, ld, shuffle)
        kp = params.keygen()
        self.sk = kp.sk
        self.ev = he.Evaluator(params, L.eval_keys(params, kp.sk, 0))
        self.queries = 0

    def __call__(self, v: np.ndarray) -> np.ndarray:
        s = self.queries
        self.queries += 1
        rd = self.qm.rounds[self.r]
        cts = L.encrypt(self.params, v, self.sk, self.ld)
        y = self.core.run({self.r: cts}, self.seed, s, self.r, 0,
                          OpClock(("extract", "unshuffle", "linear", "shuffle")))
        try:
            out, _ = self.core.pack(self.ev, y, 0)
        finally:
            y.close()
        n_out = rd.n_out if self.r < len(self.qm.rounds) - 1 else rd.m
        vals, _ = L.decrypt(self.params, out, self.sk, self.ld, n_out)
        L.close_all(cts + out)
        return wrap(vals, self.qm.b)


def attack_no_shuffle(query, d: int) -> tuple[np.ndarray, np.ndarray]:
    """(i): (W, bias) from d + 1 queries."""
    bias = query(np.zeros(d, dtype=np.int64))
    cols = [query(np.eye(d, dtype=np.int64)[i]) - bias for i in range(d)]
    return np.stack(cols, axis=1), bias


def _column_multiset(b0: np.ndarray, y1: np.ndarray, y2: np.ndarray) -> list:
    """Entries a_k with b_k + a_k in y1 and b_k + 2 a_k in y2, for each shuffled bias entry
    b_k [SAFHIRE Sec. 5 (ii)]; None where no consistent match exists."""
    left1 = Counter(int(v) for v in y1)
    left2 = Counter(int(v) for v in y2)
    out = []
    for bk in b0:
        found = None
        for v2 in sorted(left2):
            if left2[v2] and (int(bk) + v2) % 2 == 0 and left1[(int(bk) + v2) // 2]:
                found = (v2 - int(bk)) // 2
                left2[v2] -= 1
                left1[(int(bk) + v2) // 2] -= 1
                break
        out.append(found)
    return out


def attack_shuffled(query, d: int) -> dict:
    """(ii)/(iii): the probes 0, e_i, 2 e_i. Returns the bias as seen (shuffled), and per
    input index i the attacker's guess of column i laid out in the order of its bias probe."""
    b0 = query(np.zeros(d, dtype=np.int64))
    guess = []
    for i in range(d):
        e = np.eye(d, dtype=np.int64)[i]
        guess.append(_column_multiset(b0, query(e), query(2 * e)))
    g = np.array([[np.nan if v is None else v for v in col] for col in guess], dtype=np.float64).T
    return {"bias_seen": b0, "W_guess": g}


def compare(w_true: np.ndarray, bias_true: np.ndarray, found: dict) -> dict:
    """What the shuffled attack got: exact positions right, columns right as multisets,
    bias right as a multiset."""
    g = found["W_guess"]
    m, d = w_true.shape
    same_pos = float(np.mean(g == w_true))
    col_ok = [sorted(np.nan_to_num(g[:, i], nan=1e18).tolist()) == sorted(w_true[:, i].tolist())
              for i in range(d)]
    col_any = [any(sorted(np.nan_to_num(g[:, i], nan=1e18).tolist()) == sorted(w_true[:, j].tolist())
                   for j in range(d)) for i in range(d)]
    return {"entries_in_place": same_pos, "columns_as_multiset": float(np.mean(col_ok)),
            "columns_of_some_column": float(np.mean(col_any)),
            "bias_as_multiset": sorted(found["bias_seen"].tolist()) == sorted(bias_true.tolist()),
            "exact": bool(np.array_equal(g, w_true))}
