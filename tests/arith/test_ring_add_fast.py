"""``Ring.add``/``sub``: the fast path for uint64 arrays (no errstate, one masking in place;
issue #23) equals the general path (``_add``/``_sub``, the code before it) and the exact
result mod 2^k, for every ring width the package uses, every input kind that takes either
path (uint64 arrays of any shape and broadcast, 0-d arrays, numpy scalars, int64 arrays,
Python ints and lists), both input orders, values at the wrap; and it returns a new array."""

import numpy as np
import pytest

from secinfer.arith.public import public_rng
from secinfer.arith.ring import Ring


def _rand(gen, shape):
    return gen.integers(0, 1 << 64, size=shape, dtype=np.uint64)


@pytest.mark.parametrize("bits", [1, 8, 16, 31, 32, 40, 63, 64])
def test_fast_add_sub_equal_general_path_and_exact(bits):
    ring = Ring(bits)
    gen = public_rng("tests/ring-add", bits)
    top = np.uint64((1 << 64) - 1)
    for sa, sb in (((128,), (128,)), ((1, 784), (1, 784)), ((3, 4, 5), (5,)), ((4, 1), (1, 6)), ((1,), (7,))):
        a, b = _rand(gen, sa), _rand(gen, sb)
        a.reshape(-1)[0], b.reshape(-1)[0] = top, top          # the wrap
        for x, y in ((a, b), (b, a), (ring.reduce(a), ring.reduce(b))):
            want_add = (x.astype(object) + y.astype(object)) % (1 << bits)
            want_sub = (x.astype(object) - y.astype(object)) % (1 << bits)
            got_add, got_sub = ring.add(x, y), ring.sub(x, y)
            assert got_add.dtype == np.uint64 and got_sub.dtype == np.uint64
            assert np.array_equal(got_add, ring._add(x, y)) and np.array_equal(got_sub, ring._sub(x, y))
            assert np.array_equal(got_add.astype(object), want_add)
            assert np.array_equal(got_sub.astype(object), want_sub)
            assert got_add is not x and got_add is not y and got_sub is not x


@pytest.mark.parametrize("bits", [32, 64])
def test_other_input_kinds_take_the_general_path_unchanged(bits):
    ring = Ring(bits)
    m = 1 << bits
    big = (1 << 64) - 1
    cases = [(np.array(big, np.uint64), np.array(3, np.uint64)),           # 0-d
             (np.uint64(big), np.uint64(5)),                                # numpy scalars
             (np.array([-1, 2, 3], np.int64), np.array([5, 6, big >> 1], np.uint64)),
             ([1, 2, 3], [big, 0, 7]),
             (7, np.array([big, 1], np.uint64))]
    for a, b in cases:
        with np.errstate(over="raise"):            # (no overflow warning on any path)
            got_add, got_sub = ring.add(a, b), ring.sub(a, b)
        ea = np.asarray(a, np.uint64).astype(object)
        eb = np.asarray(b, np.uint64).astype(object)
        assert np.array_equal(np.asarray(got_add).astype(object), (ea + eb) % m)
        assert np.array_equal(np.asarray(got_sub).astype(object), (ea - eb) % m)


def test_limb_rings_unchanged():
    gen = public_rng("tests/ring-add", 3)
    for bits in (65, 96, 128):
        ring = Ring(bits)
        a, b = _rand(gen, (9, 2)), _rand(gen, (9, 2))
        a[..., -1] &= ring.mask
        b[..., -1] &= ring.mask
        m = 1 << bits
        ia, ib = ring.to_int(a), ring.to_int(b)
        assert [int(v) for v in ring.to_int(ring.add(a, b))] == [(int(x) + int(y)) % m for x, y in zip(ia, ib)]
        assert [int(v) for v in ring.to_int(ring.sub(a, b))] == [(int(x) - int(y)) % m for x, y in zip(ia, ib)]


def test_mask_cached_per_ring():
    r = Ring(32)
    assert r.mask is r.mask and int(r.mask) == (1 << 32) - 1
    assert Ring(32) == r and hash(Ring(32)) == hash(r)
    assert int(Ring(64).mask) == (1 << 64) - 1 and int(Ring(70).mask) == (1 << 6) - 1
