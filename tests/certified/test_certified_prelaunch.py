"""The certified use cases' data ranges are refused before any party starts (the same
pre-launch validation as the other protocols: ProtocolSpec.value_limits through
secinfer.api.prepare), with an error naming the range."""

import numpy as np
import pytest

from secinfer.api import prepare
from secinfer.errors import FixedPointRangeError
from secinfer.protocols.certified.graphs import build


def _prepare(name, x, **kw):
    return prepare(build(name, x.size, kw.get("weights")), x.reshape(1, -1), protocol="certified")


def test_sum_in_range_is_accepted():
    x = np.array([0.25, 32.767, 1.5, 0.0])
    prep = _prepare("sum", x)
    assert prep.spec.name == "certified"


@pytest.mark.parametrize("bad", [32.768, 40.0, -33.0])
def test_sum_reading_beyond_16_bits_is_refused_before_launch(bad):
    x = np.array([0.25, bad, 1.5, 0.0])
    with pytest.raises(FixedPointRangeError, match=r"index \(0, 1\).*\|x\| < 32\.77"):
        _prepare("sum", x)


def test_sum_beyond_the_blinding_headroom_is_refused_before_launch():
    x = np.full(200, 30.0)                  # 6,000 kWh > 2^21 Wh
    with pytest.raises(FixedPointRangeError, match="2097"):
        _prepare("sum", x)


def test_snp_beyond_8_bits_is_refused_before_launch():
    x = np.array([0.0, 1.0, 2.0, 300.0])
    with pytest.raises(FixedPointRangeError, match=r"\|x\| < 127\.5"):
        _prepare("weighted-sum", x, weights=[0.1, 0.2, 0.3, 0.4])
