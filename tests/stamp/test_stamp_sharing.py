import numpy as np
import pytest

from secinfer.arith.ring import Ring
from secinfer.crypto.prg import PRG
from secinfer.errors import ConfigError
from secinfer.sharing import replicated as rss


@pytest.mark.parametrize("bits", [32, 64])
def test_share_reconstruct_and_linear(bits):
    ring = Ring(bits)
    prg = PRG.for_tests(1)
    draw = lambda s: prg.ring(s, bits)  # noqa: E731
    x, y = draw((4, 3)), draw((4, 3))
    px, py = rss.share(ring, x, draw), rss.share(ring, y, draw)
    assert np.array_equal(rss.reconstruct(ring, px), x)
    s = [rss.add(ring, a, b) for a, b in zip(px, py)]
    assert np.array_equal(rss.reconstruct(ring, s), ring.add(x, y))
    c = np.uint64(7)
    s = [rss.add_public(ring, p, rss.mul_public(ring, a, c), c) for p, a in enumerate(px)]
    assert np.array_equal(rss.reconstruct(ring, s), ring.add(ring.mul(x, c), c))
    # each party misses exactly one component; any two together hold all three
    assert [rss.missing_component(p) for p in range(3)] == [2, 0, 1]


@pytest.mark.parametrize("bits", [32, 64])
def test_local_products_are_three_out_of_three(bits):
    ring = Ring(bits)
    prg = PRG.for_tests(2)
    draw = lambda s: prg.ring(s, bits)  # noqa: E731
    a, b = draw((5, 7)), draw((7, 2))
    pa, pb = rss.share(ring, a, draw), rss.share(ring, b, draw)
    z = ring.reduce(sum(rss.matmul_local(ring, pa[p], pb[p]) for p in range(3)))
    assert np.array_equal(z, ring.matmul(a, b))
    e = draw((5, 7))
    pe = rss.share(ring, e, draw)
    z = ring.reduce(sum(rss.mul_local(ring, pa[p], pe[p]) for p in range(3)))
    assert np.array_equal(z, ring.mul(a, e))


def test_inconsistent_copies_are_refused():
    ring = Ring(32)
    prg = PRG.for_tests(3)
    draw = lambda s: prg.ring(s, 32)  # noqa: E731
    p = rss.share(ring, draw((3,)), draw)
    p[1] = rss.Pair(p[1].a ^ np.uint64(1), p[1].b)
    with pytest.raises(ConfigError):
        rss.reconstruct(ring, p)


def test_boolean_and():
    prg = PRG.for_tests(4)
    draw = lambda s: prg.uint64(s)  # noqa: E731
    x, y = draw((6,)), draw((6,))
    px, py = rss.bool_share(x, draw), rss.bool_share(y, draw)
    z = rss.and_local(px[0], py[0]) ^ rss.and_local(px[1], py[1]) ^ rss.and_local(px[2], py[2])
    assert np.array_equal(z, x & y)


@pytest.mark.parametrize("p", [2, 3, 5, 67, 97, 127, 131])
def test_mod_reduce_is_v_mod_p_for_every_16_bit_value(p):
    """``replicated.mod_reduce`` (multiply-shift where it is exact, else a table; uint64 %
    above 127) equals v mod p on every v < 2^16, in the field's dtype."""
    from secinfer.sharing import replicated as rss

    v = np.arange(1 << 16, dtype=np.uint32)
    got = rss.mod_reduce(p, v.astype(rss.mod_dtype(p)))
    assert got.dtype == rss.mod_dtype(p)
    assert np.array_equal(got.astype(np.uint32), v % p)
