"""The exact product engine (linprod) against the plain integer product, on small shapes:
convolutions (stride, padding, 1x1, pooling-like, full-image kernels), residual blocks,
perturbed maps (kernel + sparse correction), dense and sparse fallbacks, wide weights
(more limbs), and every prime form of the rings in use."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from secinfer.errors import ConfigError
from secinfer.protocols.safhire import linprod as LP

PRIMES = [9007199254781953,          # rlwe-n11-q53: 2^53 + 40961
          1152921504606830593,       # 2^60 - 16383
          1099511480321,             # 2^40 - 147455
          (1 << 61) - 1,             # no small offset form at 20 bits: the generic path
          1000000007]                # far from a power of two: the generic path


def exact(w, xs: list[np.ndarray], q: int) -> np.ndarray:
    """The plain integer product (Python integers: no overflow anywhere)."""
    x = np.concatenate(xs, axis=0).astype(object)
    d = sp.hstack(w).toarray().astype(object) if isinstance(w, list) else w.toarray().astype(object)
    return (d.dot(x)) % q


def conv(rng, ci, co, h, k, s, p, lo=-7, hi=8):
    ho = (h + 2 * p - k) // s + 1
    k4 = rng.integers(lo, hi, (co, ci, k, k))
    return LP._conv_matrix(k4, (ci, h, h), (co, ho, ho), (s, s), (p, p)), (ci, h, h), (co, ho, ho)


def test_conv_matrix_equals_a_naive_convolution():
    rng = np.random.default_rng(1)
    k4 = rng.integers(-3, 4, (3, 2, 3, 3))
    w = LP._conv_matrix(k4, (2, 5, 5), (3, 3, 3), (2, 2), (1, 1)).toarray()
    x = rng.integers(-9, 10, (2, 5, 5))
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1)))
    ref = np.zeros((3, 3, 3), dtype=np.int64)
    for o in range(3):
        for y in range(3):
            for z in range(3):
                ref[o, y, z] = np.sum(k4[o] * xp[:, 2 * y:2 * y + 3, 2 * z:2 * z + 3])
    assert np.array_equal(w @ x.reshape(-1), ref.reshape(-1))


@pytest.mark.parametrize("q", PRIMES)
@pytest.mark.parametrize("shape", [(3, 4, 8, 3, 1, 1), (4, 6, 8, 3, 2, 1), (4, 5, 8, 1, 2, 0),
                                   (2, 3, 6, 2, 2, 0), (5, 3, 4, 4, 1, 0)])
def test_convolution_blocks_are_found_and_exact(q, shape):
    rng = np.random.default_rng(sum(shape))
    w, ins, outs = conv(rng, *shape)
    p = LP.plan([w], [ins], outs)
    assert p.kinds() == ["conv"] and p.blocks[0].conv.resid is None
    cols = 37
    xb = rng.integers(0, q, (w.shape[1], 3), dtype=np.uint64)
    xa = rng.integers(0, q, (w.shape[1], cols), dtype=np.uint64)
    xb[0, 0], xa[-1, -1] = q - 1, q - 1
    got = LP.product_mod(p, [[xb, xa]], q)
    assert got.dtype == np.int64 and got.shape == (w.shape[0], 3 + cols)
    assert np.array_equal(got.astype(object), exact(w, [np.concatenate([xb, xa], axis=1)], q))


@pytest.mark.parametrize("threads", [1, 2])
def test_residual_round_with_shortcut_and_perturbed_kernel(threads):
    """Two sources (conv + identity shortcut, conv + 1x1 stride-2 shortcut), one map
    perturbed off the convolution: kernel + sparse correction, still exact."""
    q = PRIMES[0]
    rng = np.random.default_rng(5)
    w1, ins, outs = conv(rng, 4, 4, 8, 3, 1, 1)
    w1 = w1.tolil()
    w1[3, 2] = 11                             # breaks translation invariance at a few places
    w1[40, 41] = -2
    w1 = w1.tocsr()
    ident = sp.identity(4 * 64, dtype=np.int64, format="csr") * 3
    w2, ins2, outs2 = conv(rng, 2, 4, 16, 1, 2, 0)
    for shortcut, sin in ((ident, ins), (w2, ins2)):
        p = LP.plan([w1, shortcut], [ins, sin], outs)
        assert p.kinds()[0] == "conv" and p.blocks[0].conv.resid is not None
        x1 = rng.integers(0, q, (w1.shape[1], 50), dtype=np.uint64)
        x2 = rng.integers(0, q, (shortcut.shape[1], 50), dtype=np.uint64)
        got = LP.product_mod(p, [[x1[:, :1], x1[:, 1:]], [x2[:, :1], x2[:, 1:]]], q, threads)
        assert np.array_equal(got.astype(object), exact([w1, shortcut], [x1, x2], q))
    assert LP.plan([w1, ident], [ins, ins], outs).kinds()[1] == "sparse"   # identity stays sparse


def test_dense_and_sparse_fallbacks_and_unknown_shapes():
    q = PRIMES[0]
    rng = np.random.default_rng(7)
    dense = sp.csr_matrix(rng.integers(-100, 100, (10, 64)))
    rnd = sp.random(50, 300, density=0.05, random_state=3,
                    data_rvs=lambda k: rng.integers(-50, 50, k)).tocsr().astype(np.int64)
    for w, kind in ((dense, "dense"), (rnd, "sparse")):
        p = LP.plan([w], [None], None)
        assert p.kinds() == [kind]
        x = rng.integers(0, q, (w.shape[1], 20), dtype=np.uint64)
        assert np.array_equal(LP.product_mod(p, [[x]], q).astype(object), exact(w, [x], q))
    # a random sparse map with image shapes is no convolution: sparse, exact
    p = LP.plan([rnd[:, :256]], [(4, 8, 8)], (2, 5, 5))
    assert p.kinds() == ["sparse"]


def test_wide_weights_take_more_limbs_and_stay_exact():
    q = PRIMES[1]
    rng = np.random.default_rng(9)
    small = sp.csr_matrix(rng.integers(-8, 8, (6, 40)))
    big = sp.csr_matrix(rng.integers(-2 ** 31, 2 ** 31, (6, 40)))
    assert LP.plan([small], [None], None).limbs(q)[0] == 2
    pb = LP.plan([big], [None], None)
    assert pb.limbs(q)[0] >= 4
    x = rng.integers(0, q, (40, 9), dtype=np.uint64)
    assert np.array_equal(LP.product_mod(pb, [[x]], q).astype(object), exact(big, [x], q))
    with pytest.raises(ConfigError):
        LP.plan([sp.csr_matrix(np.array([[2 ** 46, 2 ** 46]]))], [None], None).limbs(q)


def test_reduction_helpers_at_the_extremes():
    for q in PRIMES[:3]:
        kd = LP._near_pow2(q)
        assert kd is not None and q == (1 << kd[0]) + kd[1]
        v = np.array([-(2 ** 53) + 1, -1, 0, 1, q - 1, q, 2 ** 53 - 1], dtype=np.int64)
        got = LP._reduce(v.copy(), q, kd, np.empty_like(v))
        assert [int(a) for a in got] == [int(a) % q for a in v]
        acc = np.array([0, 1, q - 1, q // 2], dtype=np.int64)
        r = np.array([q - 1, 0, q - 1, 12345], dtype=np.int64)
        lb = min(27, kd[0] - 22)                   # the bound recombine() keeps to
        got = LP._shift_add(acc.copy(), lb, r, q, kd, np.empty_like(acc))
        assert [int(a) for a in got] == [(int(a) * 2 ** lb + int(b)) % q for a, b in zip(acc, r)]
    assert LP._near_pow2(1000000007) is None


def test_zero_blocks_are_skipped_and_an_all_zero_map_gives_zero():
    q = PRIMES[0]
    rng = np.random.default_rng(11)
    w = sp.csr_matrix(rng.integers(-5, 5, (7, 9)))
    z = sp.csr_matrix((7, 12), dtype=np.int64)
    p = LP.plan([w, z], [None, None], None)
    assert p.kinds() == ["dense", "zero"]
    x1 = rng.integers(0, q, (9, 5), dtype=np.uint64)
    x2 = rng.integers(0, q, (12, 5), dtype=np.uint64)
    assert np.array_equal(LP.product_mod(p, [[x1], [x2]], q).astype(object), exact([w, z], [x1, x2], q))
    p0 = LP.plan([z], [None], None)
    assert p0.kinds() == ["zero"] and not LP.product_mod(p0, [[x2]], q).any()
    # a zero block's source may come empty (the server's whole-round tile extracts nothing for
    # it: ResNet-20 at b = 8, whose residual branches quantize to zero); other sources are checked
    empty = np.zeros((0, 5), np.uint64)
    assert np.array_equal(LP.product_mod(p, [[x1], [empty]], q).astype(object), exact([w, z], [x1, x2], q))
    with pytest.raises(ConfigError, match="plan's shapes"):
        LP.product_mod(p, [[x1[:8]], [empty]], q)
    with pytest.raises(ConfigError, match="plan's shapes"):
        LP.product_mod(p, [[x1], [np.zeros((0, 4), np.uint64)]], q)
