"""The server's exact batched product on LWE ciphertexts [SAFHIRE Sec. 4.4 step 8], checked
through real encryption, extraction and packing against integer arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from secinfer.crypto import he
from secinfer.errors import ConfigError
from secinfer.protocols.safhire import lwe as L


def test_mul_pow2_matches_python_integers():
    q = 1152921504606830593
    r = np.array([0, 1, q - 1, 123456789012345678 % q], dtype=np.uint64)
    for k in (1, 20, 37, 64):
        got = L._mul_pow2(r.copy(), k, q)
        assert [int(v) for v in got] == [(int(v) << k) % q for v in r]


@pytest.mark.parametrize("threads", [1, 2])
def test_linear_is_exact_through_encryption_and_packing(threads):
    P = he.get_params("ckks-n10-insecure")
    kp = P.keygen()
    ev = he.Evaluator(P, L.eval_keys(P, kp.sk, 0))
    rng = np.random.default_rng(3)
    v = rng.integers(-128, 128, 1300)                       # two chunks of N = 1024
    w = sp.random(1100, 1300, density=0.03, random_state=4,
                  data_rvs=lambda k: rng.integers(-100, 100, k)).tocsr().astype(np.int64)
    bias = rng.integers(-5000, 5000, 1100)
    ld = 34
    x = L.extract(P, L.encrypt(P, v, kp.sk, ld), len(v))
    y = L.linear(P, x, w, bias, ld, threads)
    out, ks = L.pack(P, ev, y, ld)
    got, noise = L.decrypt(P, out, kp.sk, ld, len(y))
    assert np.array_equal(got, w @ v + bias)
    assert np.max(np.abs(noise)) < 1e-3 and len(out) == 2 and ks > 0
    # the same map on shuffled members = the shuffled result
    perm = rng.permutation(len(y))
    out2, _ = L.pack(P, ev, y.select(perm), ld)
    got2, _ = L.decrypt(P, out2, kp.sk, ld, len(y))
    assert np.array_equal(got2, (w @ v + bias)[perm])


def test_linear_refuses_weights_too_large_for_exact_products():
    P = he.get_params("ckks-n10-insecure")
    x = L.Lwe(np.zeros((2, 1, 1), np.uint64), np.zeros((2, 1, P.n), np.uint64))
    with pytest.raises(ConfigError):
        # row l1-norm 2^47: limbs of 53 - 48 = 5 bits would be needed (linprod refuses below 8)
        L.linear(P, x, sp.csr_matrix(np.array([[2 ** 46, 2 ** 46]])), np.zeros(1, np.int64), 20)
