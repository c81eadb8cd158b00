"""The Go encryption map with big arguments (crypto/he/linmap.py) against two independent
references: Lattigo-side encrypt_with_randomness (in-bound arguments) and schoolbook
big-integer negacyclic arithmetic (arguments of ~100 bits)."""

import numpy as np
import pytest

from secinfer.crypto import he
from secinfer.crypto.he import linmap
from secinfer.crypto.he.rlwe import coeff_encode


@pytest.fixture(scope="module")
def P10():
    return he.get_params("ckks-n10-insecure", allow_insecure=True)


@pytest.fixture(scope="module")
def kp10(P10):
    pair = P10.keygen()
    yield pair
    pair.close()


def _negacyclic(a, b, q):
    """a * b mod (X^N + 1, q), schoolbook over Python integers."""
    n = len(a)
    out = [0] * n
    a = [int(v) for v in a]
    for j, bj in enumerate(int(v) for v in b):
        if bj == 0:
            continue
        for i in range(n):
            k = i + j
            if k < n:
                out[k] += a[i] * bj
            else:
                out[k - n] -= a[i] * bj
    return np.array([v % q for v in out], dtype=object)


def _row(parts, ls):
    return np.concatenate([linmap.to_limbs(p, l).reshape(-1) for p, l in zip(parts, ls)])


def test_matches_encrypt_with_randomness_in_bound(P10, kp10):
    rng = np.random.default_rng(1)
    level, log_delta = 1, 30
    m = rng.integers(0, 1 << 20, P10.n)
    with coeff_encode(P10, m.astype(np.float64), 2.0 ** log_delta, level) as pt:
        ct, r = he.encrypt_with_randomness(P10, pt, kp10.pk, seed=b"\x07" * 16)
    ls = [2, 1, 1, 1]
    c0, c1 = linmap.image(P10, kp10.pk, level, 1 << log_delta, ls, _row([m, r.u, r.e0, r.e1], ls))
    assert np.array_equal(c0, ct.poly(0)) and np.array_equal(c1, ct.poly(1))
    # hash of f(w) - ct is the hash of f(0) (= 0)
    h = linmap.image_hash(P10, kp10.pk, level, 1 << log_delta, ls, _row([m, r.u, r.e0, r.e1], ls)[None],
                          [ct], np.ones((1, 1), np.uint8))
    zero = linmap.image_hash(P10, kp10.pk, level, 1 << log_delta, ls, np.zeros((1, 5 * P10.n), np.int64))
    assert h == zero
    ct.close()


def test_matches_bigint_reference_for_large_arguments(P10, kp10):
    rng = np.random.default_rng(2)
    level = 2
    delta = pow(1 << 105, -1, P10.q_level(level))   # any integer Delta (crisp: t^-1 mod Q)
    big = lambda bits: np.array([int(v) for v in rng.integers(-(1 << 62), 1 << 62, P10.n)], dtype=object) \
        * (1 << (bits - 62)) + np.array([int(v) for v in rng.integers(0, 1 << 40, P10.n)], dtype=object)
    m, u, e0, e1 = big(95), big(70), big(64), big(80)
    ls = [3, 2, 2, 3]
    c0, c1 = linmap.image(P10, kp10.pk, level, delta, ls, _row([m, u, e0, e1], ls))
    pk0, pk1 = kp10.pk.poly(0), kp10.pk.poly(1)
    for lvl in (0, 2):
        q = P10.q[lvl]
        want0 = (_negacyclic(pk0[lvl], u, q) + np.array([(int(a) + int(b) * delta) % q
                                                         for a, b in zip(e0, m)], dtype=object)) % q
        want1 = (_negacyclic(pk1[lvl], u, q) + np.array([int(v) % q for v in e1], dtype=object)) % q
        assert np.array_equal(want0, c0[lvl].astype(object))
        assert np.array_equal(want1, c1[lvl].astype(object))


def test_bad_arguments_are_typed_errors(P10, kp10):
    ls = [1, 1, 1, 1]
    with pytest.raises(he.HEArgumentError):
        linmap.image(P10, kp10.pk, 1, 10, ls, np.zeros(3, np.int64))
    with pytest.raises(he.HEArgumentError):
        linmap.image(P10, kp10.pk, 9, 10, ls, np.zeros(4 * P10.n, np.int64))
    with pytest.raises(he.HEArgumentError):
        linmap.image_hash(P10, kp10.pk, 1, 10, [0, 1, 1, 1], np.zeros((1, 3 * P10.n), np.int64))
    with pytest.raises(he.HEArgumentError):
        linmap.to_limbs([1 << 200], 2)


def test_rounded_hash_keeps_exactly_the_high_parts(P10, kp10):
    """round_prime: both components enter the hash as H = floor(X / q_r), X in [0, Q) per
    coefficient, and ``low`` returns X mod q_r. Moving one coefficient of X (in c0 via e0,
    in c1 via e1) to the last value of its q_r-block (or the first) keeps the hash; one
    step further changes it."""
    rng = np.random.default_rng(3)
    level, delta, rp = 2, 1 << 60, 1
    q_r = P10.q[rp]
    ls = [2, 1, 1, 1]
    m = rng.integers(0, 1 << 20, P10.n)
    u = rng.integers(-(1 << 20), 1 << 20, P10.n)
    zero = np.zeros(P10.n, np.int64)
    row = lambda e0, e1: _row([m, u, e0, e1], ls)[None]
    low = np.zeros((1, 2, P10.n), np.uint64)
    h0 = linmap.image_hash(P10, kp10.pk, level, delta, ls, row(zero, zero), round_prime=rp, low=low)
    c0, c1 = linmap.image(P10, kp10.pk, level, delta, ls, row(zero, zero)[0])
    assert np.array_equal(low[0, 0], c0[rp]) and np.array_equal(low[0, 1], c1[rp])   # X mod q_r
    h = lambda e0, e1: linmap.image_hash(P10, kp10.pk, level, delta, ls, row(e0, e1), round_prime=rp)
    for comp in (0, 1):
        for j in (0, 7, P10.n - 1):
            lo = int(low[0, comp, j])
            for shift, same in ((q_r - 1 - lo, True), (q_r - lo, False), (-lo, True), (-lo - 1, False)):
                e = zero.copy()
                e[j] = shift
                args = (e, zero) if comp == 0 else (zero, e)
                assert (h(*args) == h0) == same, (comp, j, shift)
    # the noise limbs may be absent (the proof's rows): the same hash as e0 = e1 = 0
    h_abs = linmap.image_hash(P10, kp10.pk, level, delta, [2, 1, 0, 0], _row([m, u], [2, 1])[None],
                              round_prime=rp)
    assert h_abs == h0
    with pytest.raises(he.HEArgumentError):      # the rounding prime must be one of 1..level
        linmap.image_hash(P10, kp10.pk, level, delta, ls, row(zero, zero), round_prime=0)
    with pytest.raises(he.HEArgumentError):
        linmap.image_hash(P10, kp10.pk, level, delta, ls, row(zero, zero), round_prime=3)
