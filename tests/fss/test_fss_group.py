"""Z_2^k limb arithmetic against Python integers."""

import numpy as np
import pytest

from secinfer.crypto.fss.group import Z2k, mul_64x64_128
from secinfer.crypto.prg import PRG
from secinfer.errors import ConfigError

EDGE = [0, 1, 2, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, 1 << 64, (1 << 72) - 1, (1 << 104) - 1, (1 << 128) - 1]


@pytest.mark.parametrize("k", [8, 32, 64, 72, 104, 128])
def test_ops_match_python_integers(k):
    g = Z2k(k)
    prg = PRG.for_tests(10 + k)
    a = np.concatenate([g.from_int(EDGE), g.random(prg, 50)])
    b = np.concatenate([g.from_int(EDGE[::-1]), g.random(prg, 50)])
    ai, bi = g.to_int(a), g.to_int(b)
    mod = 1 << k
    u = prg.uint64((a.shape[0],))
    checks = {
        "add": (g.add(a, b), [(x + y) % mod for x, y in zip(ai, bi)]),
        "sub": (g.sub(a, b), [(x - y) % mod for x, y in zip(ai, bi)]),
        "neg": (g.neg(a), [(-x) % mod for x in ai]),
        "mul": (g.mul(a, b), [(x * y) % mod for x, y in zip(ai, bi)]),
        "mul_u64": (g.mul_u64(a, u), [(x * int(v)) % mod for x, v in zip(ai, u)]),
        "shl13": (g.shl(a, 13), [(x << 13) % mod for x in ai]),
        "shl70": (g.shl(a, 70), [(x << 70) % mod for x in ai]),
    }
    for name, (got, want) in checks.items():
        assert list(g.to_int(got)) == want, name
        assert g.is_reduced(got), name


def test_signed_embedding_and_full_product():
    g = Z2k(104)
    v = np.array([-1, -(1 << 63), 5, (1 << 63) - 1], np.int64)
    assert list(g.to_signed_int(g.from_signed64(v))) == [int(x) for x in v]
    prg = PRG.for_tests(3)
    a, b = prg.uint64((64,)), prg.uint64((64,))
    lo, hi = mul_64x64_128(a, b)
    assert [int(x) * int(y) for x, y in zip(a, b)] == [int(l_) + (int(h) << 64) for l_, h in zip(lo, hi)]


def test_group_bounds():
    with pytest.raises(ConfigError):
        Z2k(0)
    with pytest.raises(ConfigError):
        Z2k(129)
    assert Z2k(64).limbs == 1 and Z2k(65).limbs == 2


@pytest.mark.parametrize("k", [64, 104])
def test_single_element_ops_wrap_without_warnings(k):
    """A lone element (shape (L,), e.g. a MAC key) goes through numpy's scalar path."""
    import warnings
    g = Z2k(k)
    a = g.from_int((1 << k) - 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert int(g.to_int(g.mul(a, a))) == 1
        assert int(g.to_int(g.add(a, a))) == (1 << k) - 2
        assert int(g.to_int(g.mul_u64(a, np.uint64((1 << 64) - 1)))) == (-((1 << 64) - 1)) % (1 << k)
