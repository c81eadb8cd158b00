import numpy as np
import pytest

from secinfer.arith.fixed import FX32, FX64, FixedPointConfig, get_config
from secinfer.arith.ring import RING32, RING64, Ring, ring_matmul
from secinfer.crypto.prg import PRG, PRF, SharedPRF
from secinfer.errors import ConfigError, FixedPointRangeError


def _naive_matmul(a, b, bits):
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n), dtype=np.uint64)
    for i in range(m):
        for j in range(n):
            out[i, j] = sum(int(a[i, t]) * int(b[t, j]) for t in range(k)) % (1 << bits)
    return out


@pytest.mark.parametrize("bits", [64, 32])
def test_ring_matmul_exact_against_python_integers(bits):
    prg = PRG.for_tests(1)
    a = prg.ring((9, 13), bits)
    b = prg.ring((13, 5), bits)
    assert np.array_equal(Ring(bits).matmul(a, b), _naive_matmul(a, b, bits))


def test_ring_matmul_batched_broadcast():
    prg = PRG.for_tests(2)
    a = prg.ring((3, 4, 6), 64)
    b = prg.ring((6, 2), 64)
    got = ring_matmul(a, b)
    for i in range(3):
        assert np.array_equal(got[i], _naive_matmul(a[i], b, 64))


def test_signed_views_and_shift():
    v = np.array([0, 1, (1 << 32) - 1, 1 << 31], dtype=np.uint64)
    assert RING32.to_signed(v).tolist() == [0, 1, -1, -(1 << 31)]
    assert RING32.arshift(np.array([(1 << 32) - 5], dtype=np.uint64), 1).tolist() == [(1 << 32) - 3]
    assert RING64.msb(np.array([1 << 63, 5], dtype=np.uint64)).tolist() == [1, 0]
    r63 = Ring(63)
    assert r63.to_signed(np.array([(1 << 63) - 1], dtype=np.uint64)).tolist() == [-1]


def test_fixed_point_encode_decode_and_bounds():
    x = np.array([-3.25, 0.0, 1.5, 100.125, -0.00006])
    for cfg in (FX64, FX32):
        assert np.allclose(cfg.decode(cfg.encode(x)), x, atol=cfg.encode_error)
    assert FX32.max_abs == 2.0 ** 18
    assert FX32.product_max_abs == 2.0 ** 5
    with pytest.raises(FixedPointRangeError):
        FX32.encode(np.array([3e5]))
    with pytest.raises(FixedPointRangeError):
        FX64.encode(np.array([np.nan]))
    with pytest.raises(ConfigError):
        FixedPointConfig("bad", 48, 13)
    with pytest.raises(ConfigError):
        get_config("nope")


def test_fixed_point_mul_is_flooring_truncation():
    a, b = FX64.encode(-1.5), FX64.encode(0.3333)
    exact = int(FX64.ring.to_signed(FX64.ring.mul(a, b))) >> 13
    assert int(FX64.ring.to_signed(FX64.mul(a, b))) == exact
    assert abs(FX64.decode(FX64.mul(a, b)) - (-1.5 * 0.3333)) < 3 * FX64.resolution


def test_prg_streams_are_deterministic_and_domain_separated():
    seed = bytes(range(16))
    a, b = PRG(seed), PRG(seed)
    assert a.bytes(40) == b.bytes(40)
    assert a.bytes(40) == b.bytes(40)  # continues in step
    assert PRG(seed).derive("x").bytes(16) != PRG(seed).derive("y").bytes(16)
    assert PRG(seed, "l1").bytes(16) != PRG(seed, "l2").bytes(16)
    r = PRG(seed).ring((1000,), 32)
    assert r.max() < 1 << 32 and r.dtype == np.uint64
    bits = PRG(seed).bits((10000,))
    assert 4500 < int(bits.sum()) < 5500
    perm = PRG(seed).permutation(50)
    assert sorted(perm.tolist()) == list(range(50))


def test_prf_counter_addressing_matches_sequential_stream():
    key = bytes(16)
    prf = PRF(key)
    whole = prf.keystream("lab", 0, 64)
    assert prf.keystream("lab", 2, 32) == whole[32:]
    s1, s2 = SharedPRF(key, "k"), SharedPRF(key, "k")
    assert np.array_equal(s1.ring((5,), 64), s2.ring((5,), 64))
    assert s1.counter == s2.counter == 3
    with pytest.raises(ConfigError):
        PRF(b"short")
