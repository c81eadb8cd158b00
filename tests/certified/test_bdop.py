"""BDOP commitment (n = 1, k = 5) and the bound proof on the encryption noises."""

import numpy as np
import pytest

from secinfer.crypto.he.params import get_params
from secinfer.crypto.prg import PRG
from secinfer.crypto.zk import bdop
from secinfer.errors import ConfigError


@pytest.fixture(scope="module")
def setup():
    params = get_params("ckks-n10-insecure")
    bp = bdop.BDOPParams(params.log_n, tuple(params.q[:2]))
    key = bdop.commitment_key(bp, b"k" * 16)
    prg = PRG.for_tests(1)
    rng = np.random.default_rng(0)
    noises = np.stack([rng.integers(-1, 2, bp.n), rng.integers(-19, 20, bp.n),
                       rng.integers(-19, 20, bp.n)])
    r = bdop.sample_randomness(bp, prg)
    com = bdop.commit(bp, key, noises, r)
    return bp, key, prg, noises, r, com


def test_commitment_matches_a_plain_negacyclic_product(setup):
    bp, key, prg, noises, r, com = setup
    q = bp.primes[0]
    # C2_1 = r1 + b1 r4 + u, computed with Python integers
    b1 = [int(v) for v in key[4, 0]]
    n = bp.n
    prod = [0] * n
    for i in range(n):
        for j in range(n):
            k, sgn = (i + j, 1) if i + j < n else (i + j - n, -1)
            prod[k] += sgn * b1[i] * int(r[4, j])
    want = [(prod[k] + int(r[1, k]) + int(noises[0, k])) % q for k in range(n)]
    assert [int(v) for v in com[1, 0]] == want
    assert bdop.BETA == 6


def test_bound_proof_accepts_short_noises_and_rejects_others(setup):
    bp, key, prg, noises, r, com = setup
    proof = bdop.prove_bound(bp, key, com, noises, r, prg, b"ctx")
    assert len(proof) == bdop.proof_bytes(bp)
    assert bdop.verify_bound(bp, key, com, proof, b"ctx").ok
    assert not bdop.verify_bound(bp, key, com, proof, b"other").relation_ok
    com2 = com.copy()
    com2[2, 0, 0] = (com2[2, 0, 0] + 1) % bp.primes[0]
    assert not bdop.verify_bound(bp, key, com2, proof, b"ctx").relation_ok
    # a large noise: the honest prover refuses; a prover that skips the rejection test
    # releases a response outside the box and the norm check catches it
    big = noises.copy()
    big[1, 5] = 5000
    with pytest.raises(ConfigError):
        bdop.prove_bound(bp, key, bdop.commit(bp, key, big, r), big, r, prg, b"ctx")


def test_challenge_space_has_128_bits():
    import math
    for n in (1024, 2048, 4096, 8192):
        w = bdop.challenge_weight(n)
        assert math.log2(math.comb(n, w)) + w >= 128 > math.log2(math.comb(n, w - 1)) + w - 1
