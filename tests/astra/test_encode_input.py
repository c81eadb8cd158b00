"""``rep3.linear`` fixed-point encoding (ASTRA/ABY3 queries and models): the ring values of
round(x * 2^f) as signed integers, and a typed error for NaN, infinity or out-of-range."""

import numpy as np
import pytest

from secinfer.arith.fixed import get_config
from secinfer.errors import ProtocolError
from secinfer.protocols.rep3.linear import encode_input


def _reference(x, frac, ring):
    out = []
    for v in np.asarray(x, np.float64).reshape(-1).tolist():
        q = int(np.floor(v * 2 ** frac + 0.5))
        out.append(q % (1 << ring.bits))
    return np.array(out, dtype=np.uint64).reshape(np.shape(x))


@pytest.mark.parametrize("name", ["fx64f16", "fx32f13"])
@pytest.mark.parametrize("x", [np.array([[0.0, -0.5, 0.5, -1.25, 3.999]]), np.array(-2.5),
                               np.linspace(-7, 7, 60).reshape(3, 20)])
def test_encode_matches_integer_reference(name, x):
    cfg = get_config(name)
    got = encode_input(x, cfg.frac_bits, cfg)
    assert got.dtype == np.uint64 and got.shape == np.shape(x)
    assert np.array_equal(got, _reference(x, cfg.frac_bits, cfg.ring))


def test_encode_does_not_modify_the_caller_array():
    cfg = get_config("fx64f16")
    x = np.array([1.5, -2.25])
    encode_input(x, cfg.frac_bits, cfg)
    assert x.tolist() == [1.5, -2.25]


@pytest.mark.parametrize("bad", [np.array([np.nan]), np.array([1.0, np.inf]), np.array([-1e30])])
def test_encode_refuses_what_does_not_fit(bad):
    cfg = get_config("fx64f16")
    with pytest.raises(ProtocolError):
        encode_input(bad, cfg.frac_bits, cfg)
