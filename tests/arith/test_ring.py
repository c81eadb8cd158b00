"""The one ring type, ``secinfer.arith.ring.Ring``, against Python integers: fixed edge
cases and hypothesis-drawn elements for k in {8, 32, 64, 65, 128} (both layouts)."""

import numpy as np
import pytest

from secinfer.arith.ring import Ring, mul_64x64_128
from secinfer.crypto.prg import PRG
from hypothesis import given, settings, strategies as st
from secinfer.errors import ConfigError

EDGE = [0, 1, 2, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, 1 << 64, (1 << 72) - 1, (1 << 104) - 1, (1 << 128) - 1]


@pytest.mark.parametrize("k", [8, 32, 64, 72, 104, 128])
def test_ops_match_python_integers(k):
    g = Ring(k)
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
    g = Ring(104)
    v = np.array([-1, -(1 << 63), 5, (1 << 63) - 1], np.int64)
    assert list(g.to_signed_int(g.from_signed64(v))) == [int(x) for x in v]
    prg = PRG.for_tests(3)
    a, b = prg.uint64((64,)), prg.uint64((64,))
    lo, hi = mul_64x64_128(a, b)
    assert [int(x) * int(y) for x, y in zip(a, b)] == [int(l_) + (int(h) << 64) for l_, h in zip(lo, hi)]


def test_group_bounds():
    with pytest.raises(ConfigError):
        Ring(0)
    with pytest.raises(ConfigError):
        Ring(129)
    assert Ring(64).limbs == 1 and Ring(65).limbs == 2


@pytest.mark.parametrize("k", [64, 104])
def test_single_element_ops_wrap_without_warnings(k):
    """A lone element (shape (L,), e.g. a MAC key) goes through numpy's scalar path."""
    import warnings
    g = Ring(k)
    a = g.from_int((1 << k) - 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert int(g.to_int(g.mul(a, a))) == 1
        assert int(g.to_int(g.add(a, a))) == (1 << k) - 2
        assert int(g.to_int(g.mul_u64(a, np.uint64((1 << 64) - 1)))) == (-((1 << 64) - 1)) % (1 << k)


KS = [8, 32, 64, 65, 128]


def _elems(k, n=6):
    return st.lists(st.integers(min_value=0, max_value=(1 << k) - 1), min_size=n, max_size=n)


class NaiveRing:
    """Z_2^k on Python integers: the independent reference."""

    def __init__(self, k):
        self.mod = 1 << k
        self.k = k

    def signed(self, x):
        return x - self.mod if x >= self.mod // 2 else x


@pytest.mark.parametrize("k", KS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_limb_layout_matches_naive_python_ints(k, data):
    g, nv = Ring(k), NaiveRing(k)
    xs, ys = data.draw(_elems(k)), data.draw(_elems(k))
    us = data.draw(st.lists(st.integers(0, (1 << 64) - 1), min_size=6, max_size=6))
    s = data.draw(st.integers(0, k + 3))
    bits = data.draw(st.lists(st.integers(0, 1), min_size=6, max_size=6))
    a, b, u = g.from_int(xs), g.from_int(ys), np.array(us, np.uint64)
    want = {
        "add": [(x + y) % nv.mod for x, y in zip(xs, ys)],
        "sub": [(x - y) % nv.mod for x, y in zip(xs, ys)],
        "neg": [(-x) % nv.mod for x in xs],
        "mul": [(x * y) % nv.mod for x, y in zip(xs, ys)],
        "mul_u64": [(x * v) % nv.mod for x, v in zip(xs, us)],
        "shl": [(x << s) % nv.mod for x in xs],
        "cond_neg": [(-x if t else x) % nv.mod for x, t in zip(xs, bits)],
        "select": [x if t else 0 for x, t in zip(xs, bits)],
        "sum": [(x + 2 * y) % nv.mod for x, y in zip(xs, ys)],
    }
    got = {"add": g.add(a, b), "sub": g.sub(a, b), "neg": g.neg(a), "mul": g.mul(a, b),
           "mul_u64": g.mul_u64(a, u), "shl": g.shl(a, s), "cond_neg": g.cond_neg(a, np.array(bits)),
           "select": g.select(np.array(bits), a), "sum": g.sum(a, b, b)}
    for name, w in want.items():
        assert list(g.to_int(got[name])) == w, name
        assert g.is_reduced(got[name]), name
    assert list(g.to_int(g.unpack(g.pack(a)))) == xs
    assert g.pack(a).shape == (6, (k + 7) // 8) == (6, g.nbytes)
    assert list(g.to_signed_int(a)) == [nv.signed(x) for x in xs]
    sv = [nv.signed(x % (1 << 64)) if k >= 64 else x for x in xs]   # int64 inputs
    sv = [max(min(v, (1 << 63) - 1), -(1 << 63)) for v in sv]
    assert list(g.to_int(g.from_signed64(np.array(sv, np.int64)))) == [v % nv.mod for v in sv]
    assert list(g.to_int(g.from_u64(u))) == [v % nv.mod for v in us]
    assert list(g.low_u64(a)) == [x % (1 << 64) for x in xs]
    unreduced = g.from_int(xs)
    unreduced[..., -1] |= ~g.mask
    assert (k in (64, 128)) or not g.is_reduced(unreduced)
    assert list(g.to_int(g.reduce(unreduced))) == xs


@pytest.mark.parametrize("k", [8, 32, 64])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_flat_layout_matches_naive_python_ints(k, data):
    """k <= 64: plain uint64 arrays of any shape (the replicated/ASTRA share layout)."""
    r, nv = Ring(k), NaiveRing(k)
    xs, ys = data.draw(_elems(k)), data.draw(_elems(k))
    f = data.draw(st.integers(0, k - 1))
    a, b = np.array(xs, np.uint64), np.array(ys, np.uint64)
    assert r.add(a, b).tolist() == [(x + y) % nv.mod for x, y in zip(xs, ys)]
    assert r.sub(a, b).tolist() == [(x - y) % nv.mod for x, y in zip(xs, ys)]
    assert r.neg(a).tolist() == [(-x) % nv.mod for x in xs]
    assert r.mul(a, b).tolist() == [(x * y) % nv.mod for x, y in zip(xs, ys)]
    assert r.to_signed(a).tolist() == [nv.signed(x) for x in xs]
    assert r.from_signed(r.to_signed(a)).tolist() == xs
    assert r.msb(a).tolist() == [x >> (k - 1) for x in xs]
    assert r.arshift(a, f).tolist() == [(nv.signed(x) >> f) % nv.mod for x in xs]
    m = r.matmul(a.reshape(2, 3), b.reshape(3, 2))
    want = [[sum(xs[3 * i + t] * ys[2 * t + j] for t in range(3)) % nv.mod for j in range(2)] for i in range(2)]
    assert m.tolist() == want


@pytest.mark.parametrize("op", ["matmul", "to_signed", "from_signed", "msb"])
def test_flat_only_operations_refuse_two_limbs(op):
    with pytest.raises(ConfigError):
        getattr(Ring(65), op)(*([np.zeros((1, 2), np.uint64)] * (2 if op == "matmul" else 1)))


@pytest.mark.parametrize("ashape,bshape", [
    ((6, 7), (7, 5)),        # limbs over float64 BLAS
    ((9, 7), (7, 1)),        # thin b: direct, column by column
    ((9, 7), (7, 4)),
    ((1, 7), (7, 6)),        # thin a: direct, row by row
    ((7,), (7, 6)),          # a vector
    ((2, 2, 7), (7, 6)),     # batched rows (4 in all)
    ((3, 2, 7), (7, 6)),     # batched, 6 rows: limbs
    ((5, 7), (7, 0)),        # empty product
])
def test_ring_matmul_paths_match_python_integers(ashape, bshape):
    """Every path of ``ring_matmul`` (direct uint64 for a thin operand, 16-bit limbs over
    BLAS otherwise) equals the exact product of Python integers mod 2^64."""
    from secinfer.arith.ring import ring_matmul

    prg = PRG.for_tests(77)
    a = prg.uint64(ashape)
    b = prg.uint64(bshape)
    a[..., 0] = (1 << 64) - 1                  # carries through every limb
    want = np.matmul(a.astype(object), b.astype(object)) % (1 << 64)
    got = ring_matmul(a, b)
    assert got.shape == want.shape and got.dtype == np.uint64
    assert got.tolist() == np.asarray(want).tolist()
