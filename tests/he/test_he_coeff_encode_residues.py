"""coeff_encode writes round(v * scale) into every RNS level: checked coefficient by
coefficient against Python integers (small, huge, negative, exact powers of two, the
largest 53-bit significands), at several levels."""

from __future__ import annotations

import numpy as np
import pytest

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


def test_encode_limbs_residues_equal_python_integers():
    """encode_limbs: 2^log_scale a + b for multi-limb a, b of ~200 / 150 bits (the size of
    crisp's -Delta R + F), exactly, at every level, with the scale in the metadata."""
    from secinfer.crypto.he.linmap import to_limbs
    from secinfer.crypto.he.rlwe import encode_limbs

    prm = get_params("ckks-n12-insecure")
    rng = np.random.default_rng(6)
    n = prm.n
    big = lambda bits: [int(v) << (bits - 62) ^ int(w) for v, w in
                        zip(rng.integers(-(1 << 62), 1 << 62, n), rng.integers(0, 1 << 40, n))]
    a, b = big(200), big(150)
    a[:3], b[:3] = [0, -1, 1 << 199], [(1 << 149) - 1, -(1 << 149), 0]
    log_scale = 141
    for level in (0, prm.max_level):
        with encode_limbs(prm, to_limbs(a, 6), to_limbs(b, 4), log_scale, level) as pt:
            res = pt.poly(0)
            assert abs(pt.log_scale - log_scale) < 1e-9
        for lv in range(level + 1):
            q = prm.q[lv]
            want = np.array([((x << log_scale) + y) % q for x, y in zip(a, b)], dtype=object)
            assert np.array_equal(res[lv].astype(object), want), (level, lv)


def test_encode_limbs_with_any_integer_delta():
    """encode_limbs(delta=): Delta a + b for an arbitrary odd Delta the size of the modulus
    (crisp's t^-1 mod Q), exactly, with the metadata still 2^log_scale; a zero or negative
    Delta is refused."""
    from secinfer.crypto.he.errors import HEArgumentError
    from secinfer.crypto.he.linmap import to_limbs
    from secinfer.crypto.he.rlwe import encode_limbs

    prm = get_params("ckks-n12-insecure")
    rng = np.random.default_rng(7)
    n, level = prm.n, prm.max_level
    a = [int(v) for v in rng.integers(-(1 << 62), 1 << 62, n)]
    b = [int(v) for v in rng.integers(-(1 << 40), 1 << 40, n)]
    delta = pow(1 << 105, -1, prm.q_level(level))
    with encode_limbs(prm, to_limbs(a, 2), to_limbs(b, 1), 0, level, delta=delta) as pt:
        res = pt.poly(0)
        assert abs(pt.log_scale) < 1e-9
    for lv in range(level + 1):
        q = prm.q[lv]
        want = np.array([(x * delta + y) % q for x, y in zip(a, b)], dtype=object)
        assert np.array_equal(res[lv].astype(object), want), lv
    for bad in (0, -3):
        with pytest.raises(HEArgumentError):
            encode_limbs(prm, to_limbs(a, 2), to_limbs(b, 1), 0, level, delta=bad)
