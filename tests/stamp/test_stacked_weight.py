"""The offline-stacked local product (``rep3.stacked``) equals ``bilinear_local`` bit for bit."""

import numpy as np
import pytest

from secinfer.arith.ring import Ring
from secinfer.protocols.rep3 import kernels
from secinfer.protocols.rep3.stacked import STACK_MAX, stack_weight, stacked_product
from secinfer.sharing.replicated import Pair, bilinear_local


def _pair(rng, ring, shape):
    return Pair(rng.integers(0, 1 << 63, shape, dtype=np.uint64) & ring.mask if ring.bits < 64
                else rng.integers(0, 1 << 63, shape, dtype=np.uint64) * np.uint64(3),
                rng.integers(0, 1 << 63, shape, dtype=np.uint64) & ring.mask if ring.bits < 64
                else rng.integers(0, 1 << 63, shape, dtype=np.uint64) * np.uint64(5))


def _conv_attrs(k, spatial=2, group=1, stride=1, pad=0):
    return {"kernel_shape": [k] * spatial, "strides": [stride] * spatial, "dilations": [1] * spatial,
            "pads": [pad] * (2 * spatial), "group": group}


@pytest.mark.parametrize("bits", [32, 64])
@pytest.mark.parametrize("xshape,wshape", [((1, 784), (784, 128)), ((5, 17), (17, 3)), ((128, 64), (64, 10)),
                                           ((2, 3, 9), (9, 4)), ((1, 1), (1, 1))])
def test_stacked_matmul_equals_two_products(bits, xshape, wshape):
    ring = Ring(bits)
    rng = np.random.default_rng(bits + sum(xshape))
    x, w = _pair(rng, ring, xshape), _pair(rng, ring, wshape)
    sw = stack_weight("MatMul", {}, ring, w)
    assert sw is not None and (sw.limbs is not None) == (bits == 32)
    f = kernels.bilinear("MatMul", {}, ring)
    ref = bilinear_local(ring, f, x, w)
    got = stacked_product(ring, sw, x)
    assert got.dtype == np.uint64 and got.shape == ref.shape
    assert np.array_equal(got, ref)


@pytest.mark.parametrize("bits", [32, 64])
@pytest.mark.parametrize("xshape,wshape,attrs", [
    ((1, 1, 28, 28), (16, 1, 5, 5), _conv_attrs(5)),
    ((2, 3, 9, 9), (4, 3, 3, 3), _conv_attrs(3, stride=2, pad=1)),
    ((2, 3, 11), (5, 3, 3), _conv_attrs(3, spatial=1, pad=1)),
])
def test_stacked_conv_equals_two_products(bits, xshape, wshape, attrs):
    ring = Ring(bits)
    rng = np.random.default_rng(7 + bits)
    x, w = _pair(rng, ring, xshape), _pair(rng, ring, wshape)
    sw = stack_weight("Conv", attrs, ring, w)
    assert sw is not None
    ref = bilinear_local(ring, kernels.bilinear("Conv", attrs, ring), x, w)
    assert np.array_equal(stacked_product(ring, sw, x), ref)


def test_not_stacked_where_it_does_not_apply():
    ring = Ring(32)
    rng = np.random.default_rng(1)
    assert stack_weight("Conv", _conv_attrs(3, group=2), ring, _pair(rng, ring, (4, 1, 3, 3))) is None
    assert stack_weight("Mul", {}, ring, _pair(rng, ring, (4,))) is None
    assert stack_weight("MatMul", {}, ring, _pair(rng, ring, (2, 3, 4))) is None
    big = Pair(np.zeros(STACK_MAX + 1, np.uint64).reshape(-1, 1), np.zeros(STACK_MAX + 1, np.uint64).reshape(-1, 1))
    assert stack_weight("MatMul", {}, ring, big) is None
