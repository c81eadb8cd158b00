"""Exact ring kernels against naive Python-int references."""

from __future__ import annotations

import numpy as np
import pytest

from secinfer.arith.linalg import (pool_counts, ring_conv2d, ring_max_signed, ring_sum_pool,
                                   window_output_size)

M64 = 1 << 64
R = np.random.default_rng(3)


def rand_u64(*shape):
    return R.integers(0, 2**63, size=shape, dtype=np.uint64) * np.uint64(2) + \
        R.integers(0, 2, size=shape, dtype=np.uint64)


def naive_conv(x, w, stride, pads, dil, groups):
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    pt, pl, pb, pr = pads
    oh = (h + pt + pb - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pl + pr - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, m, oh, ow), dtype=object)
    mg = m // groups
    for b in range(n):
        for o in range(m):
            g = o // mg
            for i in range(oh):
                for j in range(ow):
                    acc = 0
                    for ci in range(cg):
                        for a in range(kh):
                            for e in range(kw):
                                r = i * stride[0] + a * dil[0] - pt
                                s = j * stride[1] + e * dil[1] - pl
                                if 0 <= r < h and 0 <= s < wd:
                                    acc += int(x[b, g * cg + ci, r, s]) * int(w[o, ci, a, e])
                    out[b, o, i, j] = acc % M64
    return out


@pytest.mark.parametrize("stride,pads,dil,groups", [
    ((1, 1), (0, 0, 0, 0), (1, 1), 1),
    ((2, 1), (1, 2, 0, 1), (1, 1), 1),
    ((1, 2), (2, 2, 2, 2), (2, 1), 2),
    ((2, 2), (1, 1, 1, 1), (1, 1), 4),
])
def test_ring_conv2d_matches_python_ints(stride, pads, dil, groups):
    x = rand_u64(2, 4, 6, 7)
    w = rand_u64(4, 4 // groups, 3, 2)
    got = ring_conv2d(x, w, stride, pads, dil, groups)
    ref = naive_conv(x, w, stride, pads, dil, groups)
    assert got.dtype == np.uint64 and got.shape == ref.shape
    assert all(int(a) == b for a, b in zip(got.ravel(), ref.ravel()))


def test_ring_conv2d_is_linear_on_shares():
    x, w = rand_u64(1, 2, 5, 5), rand_u64(3, 2, 3, 3)
    x0 = rand_u64(*x.shape)
    x1 = x - x0
    y = ring_conv2d(x, w, (1, 1), (1, 1, 1, 1))
    assert np.array_equal(ring_conv2d(x0, w, (1, 1), (1, 1, 1, 1)) + ring_conv2d(x1, w, (1, 1), (1, 1, 1, 1)), y)


def test_ring_sum_pool_and_counts():
    x = rand_u64(2, 3, 7, 6)
    k, s, p = (3, 2), (2, 2), (1, 0, 1, 1)
    got = ring_sum_pool(x, k, s, p)
    oh = window_output_size(7, 3, 2, 1, 1)
    ow = window_output_size(6, 2, 2, 0, 1)
    assert got.shape == (2, 3, oh, ow)
    cnt = pool_counts(x.shape, k, s, p)
    for i in range(oh):
        for j in range(ow):
            rs = [r for r in range(i * 2 - 1, i * 2 - 1 + 3) if 0 <= r < 7]
            cs = [c for c in range(j * 2, j * 2 + 2) if 0 <= c < 6]
            assert cnt[i, j] == len(rs) * len(cs)
            ref = sum(int(x[1, 2, r, c]) for r in rs for c in cs) % M64
            assert int(got[1, 2, i, j]) == ref
    inc = pool_counts(x.shape, k, s, p, count_include_pad=True)
    assert np.all(inc[:-1, :-1] == 6)


def test_window_output_size_ceil_mode():
    assert window_output_size(5, 2, 2, 0, 0) == 2
    assert window_output_size(5, 2, 2, 0, 0, ceil_mode=True) == 3
    # the last window may not start in the end padding
    assert window_output_size(4, 2, 2, 0, 1, ceil_mode=True) == 2


def test_ring_max_signed():
    v = np.array([[1, (1 << 64) - 5, 7], [(1 << 64) - 1, (1 << 64) - 2, (1 << 63)]], dtype=np.uint64)
    assert ring_max_signed(v, axis=1).tolist() == [7, (1 << 64) - 1]
    v32 = np.array([[3, (1 << 32) - 1]], dtype=np.uint64)
    assert ring_max_signed(v32, axis=1, bits=32).tolist() == [3]


@pytest.mark.parametrize("bits", [8, 20, 32, 48, 63, 64])
def test_ring_matmul_bits_matches_ring(bits):
    from secinfer.arith.linalg import ring_matmul_bits
    from secinfer.arith.ring import Ring

    ring = Ring(bits)
    a = ring.reduce(rand_u64(3, 2, 5, 9))
    b = ring.reduce(rand_u64(9, 4))
    got = ring_matmul_bits(a, b, bits)
    assert np.array_equal(got, ring.matmul(a, b))
    ref = [[sum(int(a[1, 0, i, k]) * int(b[k, j]) for k in range(9)) % (1 << bits) for j in range(4)]
           for i in range(5)]
    assert got[1, 0].tolist() == ref
    x = ring.reduce(rand_u64(1, 2, 4, 4))
    w = ring.reduce(rand_u64(3, 2, 2, 2))
    assert np.array_equal(ring_conv2d(x, w, bits=bits), ring.reduce(ring_conv2d(x, w)))
