"""secinfer.arith.public_rng: the named helper for public deterministic data."""

import numpy as np
import pytest

from secinfer.arith import public_rng
from secinfer.errors import ConfigError


def test_public_rng_is_deterministic_and_keeps_fixed_seed_data():
    a = public_rng("test/public", 7).uniform(size=5)
    assert np.array_equal(a, public_rng("test/other-use", 7).uniform(size=5))
    assert np.array_equal(a, np.random.default_rng(7).uniform(size=5))   # data drawn before stays
    assert not np.array_equal(a, public_rng("test/public", 8).uniform(size=5))


@pytest.mark.parametrize("label", ["", None, 3])
def test_public_rng_needs_a_label(label):
    with pytest.raises(ConfigError):
        public_rng(label)
