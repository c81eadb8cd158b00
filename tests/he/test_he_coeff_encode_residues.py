"""coeff_encode writes round(v * scale) into every RNS level: checked coefficient by
coefficient against Python integers (small, huge, negative, exact powers of two, the
largest 53-bit significands), at several levels."""

from __future__ import annotations

import numpy as np

from secinfer.crypto.he.params import get_params
from secinfer.crypto.he.rlwe import coeff_encode


def _round_half_away(x: float) -> int:
    """Go's math.Round (ties away from zero), exactly, on the float64 product."""
    from fractions import Fraction

    f = Fraction(x)
    r = int(abs(f) + Fraction(1, 2))
    return r if f >= 0 else -r


def test_coeff_encode_residues_equal_python_integers():
    prm = get_params("ckks-n12-insecure")
    rng = np.random.default_rng(5)
    n = prm.n
    vals = np.concatenate([
        np.array([0.0, 1.0, -1.0, 2.0 ** 52, -(2.0 ** 52), 2.0 ** 53 - 1, -(2.0 ** 53 - 1), 2.0 ** 53,
                  2.0 ** 120, -(2.0 ** 120), (2.0 ** 53 - 1) * 2.0 ** 70, -(2.0 ** 53 - 1) * 2.0 ** 150,
                  0.5, -0.5, 1.5, -2.5, 123456789.75]),
        rng.integers(-(2 ** 52), 2 ** 52, 200).astype(np.float64) * 2.0 ** 52,
        rng.standard_normal(200) * 1e6,
    ])
    vals = np.concatenate([vals, rng.standard_normal(n - vals.size) * 2.0 ** 90])
    for scale, level in ((1.0, 0), (2.0 ** 40, 1), (2.0 ** -3, len(prm.q) - 1)):
        with coeff_encode(prm, vals, scale, level) as pt:
            got = prm._poly(pt, 0)          # coefficient domain, one row per level
        ints = [_round_half_away(float(v) * scale) for v in vals]
        for lv, q in enumerate(prm.q[: level + 1]):
            want = np.array([x % q for x in ints], dtype=np.uint64)
            assert np.array_equal(got[lv], want), (scale, level, lv)
