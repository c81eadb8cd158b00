import numpy as np
import pytest

from secinfer.crypto import he

FAST = "ckks-n11-insecure"


@pytest.fixture(scope="module")
def P():
    return he.get_params(FAST)


@pytest.fixture(scope="module")
def kp(P):
    pair = P.keygen()
    yield pair
    pair.close()


@pytest.fixture(scope="module")
def ev(P, kp):
    keys = P.gen_eval_keys(kp.sk, rotations=[1, 2, 3, 5, -7, 100], conjugate=True)
    e = he.Evaluator(P, keys)
    yield e
    e.close()
    keys.close()


@pytest.fixture
def rng(request):
    # Deterministic per test (tests may use numpy's RNG; src/ never does).
    return np.random.default_rng(abs(hash(request.node.name)) % (2**32))
