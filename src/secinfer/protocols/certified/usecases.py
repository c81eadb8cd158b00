"""The functions psi of the certified-data protocol: the paper's three use cases
[CRISP-certified Sec. 6.2-6.4] evaluated on CKKS ciphertexts, with plaintext references.

Data points are fixed-point integers d = round(x * unit) of ``data_bits`` bits
(what the data source signs); slot j of a ciphertext holds d_j (the exact encoding of
``secinfer.crypto.zk.zkbpp.encode``). Every psi returns a ciphertext whose every slot
holds the result in data units (divide by ``result_scale`` for real units), so that the
release's blinding can use every slot.

* ``sum`` (smart metering): sum of half-hourly readings, 16-bit, in Wh (kWh x 1000).
* ``weighted-sum`` (disease susceptibility): SNP values in {0, 1, 2} (8-bit) times public
  weights (the provider's, sent to the user with psi); the SNPs of a ciphertext are signed
  as one batch (one message, one signature).
* ``distance`` (location-based activity tracking): the distance travelled along a trace
  of (x, y) points, sum_i sqrt(|p_{i+1} - p_i|^2) with sqrt replaced by a degree-2
  least-squares polynomial on [0, T] (T from the public speed bound).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from secinfer.crypto.he.evaluator import Evaluator
from secinfer.crypto.he.objects import Ciphertext
from secinfer.errors import ConfigError


@dataclass(frozen=True)
class UseCase:
    name: str
    data_bits: int
    unit: int                  # data point = round(x * unit): Wh for kWh, 1/16 for positions
    levels: int                # multiplicative levels psi consumes
    test_params: str           # HE parameter set for tests (insecure, small)
    params: str                # production parameter set (128-bit)
    log_scale: int             # CKKS scale of the data (ct x ct products need ~ the primes)
    nu_weight: int             # release blinding: nu a ternary polynomial of this weight
    eta_bits: int              #   eta per slot, re and im uniform in [-2^eta_bits, 2^eta_bits)
    max_result: float          # |psi| bound in data units that the blinding's headroom allows
    release_tol: float         # |m_B - (nu m + eta)| and |m_j - m_0| tolerance, data units
    paper: dict = field(default_factory=dict)   # Table 1 figures
    # "coeff": psi's result is read from the constant coefficient (no evaluation key, the
    # release blinds in Z_q exactly); "slots": replicated in every slot (rotations)
    release: str = "slots"
    # the data source signs one message per data point (False) or one per batch: all the
    # points of a ciphertext in one message (True; [CRISP-certified Sec. 6.3]: the medical
    # center "certifies batches of single nucleotide polymorphisms")
    batch: bool = False

    def quantize(self, x: np.ndarray) -> np.ndarray:
        """Fixed-point data points; out-of-range values are a typed error."""
        v = np.rint(np.asarray(x, dtype=np.float64).reshape(-1) * self.unit)
        lim = 1 << (self.data_bits - 1)
        if v.size == 0 or not np.all(np.isfinite(v)) or np.any(v < -lim) or np.any(v >= lim):
            raise ConfigError(f"use case {self.name!r}: data must be finite and fit "
                              f"{self.data_bits}-bit signed integers in units of 1/{self.unit}")
        return v.astype(np.int64)


USECASES = {u.name: u for u in (
    # [CRISP-certified Sec. 6.2] N = 2^11, one prime, the paper's 25-bit precision (scale
    # 2^25). psi needs no evaluation key (the slot sum is the constant coefficient) and the
    # release is exact in Z_q: only |sum d| * 2^15 < q / 2 bounds psi (2^36 Wh with margin)
    UseCase("sum", 16, 1000, 0, "ckks-n11-q53-w4-128", "ckks-n11-q53-w4-128", 25, 14, 25,
            float(1 << 36), 0.0,
            {"t_enc_ms": 70, "t_dec_ms": 0.7, "t_comp_ms": 130, "t_prove_s": 200, "t_ver_s": 82,
             "mare": 5.1e-5, "proof_mb_per_ct": 643.4, "proof_kb_per_point": 628,
             "bound_proof_mb": 7.05}, "coeff"),
    UseCase("weighted-sum", 8, 1, 1, "ckks-n10-insecure", "ckks-n13-128", 40, 14, 12,
            float(1 << 30), 1.0,
            {"t_enc_ms": 60, "t_dec_ms": 2.7, "t_comp_ms": 22, "t_prove_s": 26, "t_ver_s": 13,
             "mare": 2.2e-5}, batch=True),
    UseCase("distance", 16, 16, 4, "ckks-n12-wide-insecure", "ckks-n14-128", 40, 14, 12,
            float(1 << 12), 1.0,
            {"t_enc_ms": 980, "t_dec_ms": 7, "t_comp_ms": 180, "t_prove_s": 470, "t_ver_s": 210,
             "mare": 1.5e-2}),
)}


def get(name: str) -> UseCase:
    u = USECASES.get(name)
    if u is None:
        raise ConfigError(f"unknown certified use case {name!r}; known: {sorted(USECASES)}")
    return u


# ---------------------------------------------------------------- public description


def describe(name: str, n_points: int, weights=None, speed_bound: float | None = None,
             coeffs=None) -> dict:
    """psi as the provider announces it to the user (public, JSON)."""
    u = get(name)
    d = {"usecase": u.name, "n_points": int(n_points)}
    if name == "weighted-sum":
        w = np.asarray(weights if weights is not None else np.ones(n_points), dtype=np.float64)
        if w.shape != (n_points,) or not np.all(np.isfinite(w)):
            raise ConfigError(f"weighted-sum needs {n_points} finite weights")
        d["weights"] = w.tolist()
    if name == "distance":
        if n_points % 2 or n_points < 4:
            raise ConfigError("distance needs a trace of at least two (x, y) points")
        c = coeffs if coeffs is not None else sqrt_poly(speed_bound if speed_bound is not None else 4.0)
        c = np.asarray(c, dtype=np.float64).reshape(-1)
        if c.shape != (3,) or not np.all(np.isfinite(c)):
            raise ConfigError("distance needs three finite polynomial coefficients")
        d["coeffs"] = c.tolist()
    return d


def parse(desc: dict, max_points: int) -> dict:
    """Validate a received description (typed errors)."""
    if not isinstance(desc, dict) or desc.get("usecase") not in USECASES:
        raise ConfigError("psi description names no known use case")
    n = desc.get("n_points")
    if not isinstance(n, int) or not 1 <= n <= max_points:
        raise ConfigError(f"psi description: n_points must be 1..{max_points}")
    if desc["usecase"] == "weighted-sum":
        w = desc.get("weights")
        if not isinstance(w, list) or len(w) != n:
            raise ConfigError("psi description: weights do not match n_points")
    if desc["usecase"] == "distance":
        c = desc.get("coeffs")
        if not isinstance(c, list) or len(c) != 3 or n % 2:
            raise ConfigError("psi description: distance needs 3 coefficients and (x, y) pairs")
    return desc


def to_bytes(desc: dict) -> bytes:
    return json.dumps(desc, sort_keys=True).encode()


# ---------------------------------------------------------------- plaintext reference


def sqrt_poly(step_bound: float) -> np.ndarray:
    """Degree-2 least-squares fit (c0, c1, c2) of sqrt on [0, T], T = step_bound^2
    (real units), sampled uniformly on the interval."""
    t = np.linspace(0.0, step_bound ** 2, 2049)[1:]
    A = np.stack([np.ones_like(t), t, t * t], axis=1)
    c, *_ = np.linalg.lstsq(A, np.sqrt(t), rcond=None)
    return c


def reference(desc: dict, d: np.ndarray, exact: bool = False) -> float:
    """psi on the fixed-point data points in data units (``exact``: the true sqrt for the
    distance, else the polynomial the ciphertexts evaluate)."""
    u = get(desc["usecase"])
    d = np.asarray(d, dtype=np.float64)
    if u.name == "sum":
        return float(d.sum())
    if u.name == "weighted-sum":
        return float(np.dot(np.asarray(desc["weights"]), d))
    p = d.reshape(-1, 2)
    sq = np.sum((p[1:] - p[:-1]) ** 2, axis=1)
    if exact:
        return float(np.sum(np.sqrt(sq)))
    c = data_unit_coeffs(desc)
    return float(np.sum(c[0] + c[1] * sq + c[2] * sq * sq))


def data_unit_coeffs(desc: dict) -> np.ndarray:
    """The distance polynomial on squared data units: p_du(t) = 2^f p(t / 4^f)."""
    f = float(get("distance").unit)
    c = np.asarray(desc["coeffs"], dtype=np.float64)
    return np.array([c[0] * f, c[1] / f, c[2] / f ** 3])


def result_scale(desc: dict) -> float:
    """Divide a result in data units by this for real units."""
    return float(get(desc["usecase"]).unit)


# ---------------------------------------------------------------- homomorphic evaluation


def rotation_steps(slots: int, usecase: str) -> list[int]:
    if get(usecase).release == "coeff":
        return []               # no evaluation key at all
    steps = [1 << i for i in range(slots.bit_length() - 1)]
    if usecase == "distance":
        steps.append(slots - 2)   # rotate by -2 (the next point)
    return sorted(set(steps))


def evaluate(ev: Evaluator, desc: dict, cts: list[Ciphertext], slots: int) -> Ciphertext:
    """psi on the chunks (slots points each, zero padded); the result in every slot, or
    (release "coeff") in the constant coefficient, see ``coeff_value``."""
    name = desc["usecase"]
    n = desc["n_points"]
    if name == "sum":
        # sum_j Re z_j = N m_0 / (2 Delta) for a fully packed plaintext m (Lattigo's
        # embedding: E[0, j] = 2 Delta / N): adding the chunks is all psi needs
        return _sum(ev, cts)
    elif name == "weighted-sum":
        w = np.zeros(slots * len(cts))
        w[:n] = desc["weights"]
        parts = [ev.mul_plain_vector(ct, w[i * slots:(i + 1) * slots]) for i, ct in enumerate(cts)]
        acc = _sum(ev, parts)
    else:
        acc = _distance(ev, desc, cts, slots)
    return ev.rotate_and_sum(acc, 1, slots)


def _sum(ev: Evaluator, cts: list[Ciphertext]) -> Ciphertext:
    if len(cts) == 1:
        return cts[0]
    acc = ev.add(cts[0], cts[1])
    for ct in cts[2:]:
        nxt = ev.add(acc, ct)
        acc.close()
        acc = nxt
    return acc


def _add_const(ev: Evaluator, ct: Ciphertext, c: float, slots: int) -> Ciphertext:
    """ct + c in every slot, at ct's scale."""
    return ev.add_scalar(ct, c)


def _distance(ev: Evaluator, desc: dict, cts: list[Ciphertext], slots: int) -> Ciphertext:
    if len(cts) != 1:
        raise ConfigError("distance: one ciphertext per trace (at most slots/2 points)")
    ct = cts[0]
    n = desc["n_points"]
    c = data_unit_coeffs(desc)
    nxt = ev.rotate(ct, 2)                       # slot j <- slot j+2: the next point
    diff = ev.sub(nxt, ct)
    sq = ev.mul_rescale(diff, diff)              # level -1
    t = ev.add(sq, ev.rotate(sq, 1))             # even slots: |p_{i+1} - p_i|^2
    u1 = _add_const(ev, ev.mul_plain_vector(t, np.full(slots, c[2])), c[1], slots)  # level -1
    t_low = ev.drop_level(t, t.level - u1.level) if t.level > u1.level else t
    p = _add_const(ev, ev.mul_rescale(u1, t_low), c[0], slots)                    # level -1
    mask = np.zeros(slots)
    mask[0:n - 2:2] = 1.0                        # step i lives in slot 2i, i < n/2 - 1
    return ev.mul_plain_vector(p, mask)          # level -1


def coeff_value(c0: int, q: int, n_ring: int, log_scale: float) -> float:
    """psi in data units from the constant coefficient c0 (mod q) of a fully packed
    plaintext at scale 2^log_scale: sum_j Re z_j = N c0 / (2 Delta), c0 centred."""
    c = int(c0) % int(q)
    if c > int(q) // 2:
        c -= int(q)
    return float(c) * n_ring / (2.0 * 2.0 ** log_scale)
