"""Issue #22 item 5, the certified data's proof decoders: property-based (hypothesis) fuzz of
the bytes a verifier reads from the data owner. Only a verdict (rejecting) or the module's
typed error may come out; a crash of the native parser would end the test process.
``SECINFER_FUZZ_EXAMPLES=N`` runs a longer bounded campaign (default: a short one).

* ZKB++ proofs (``zkbpp.verify``, parsed in Go): arbitrary bytes, a valid proof with bytes
  overwritten, cut or extended -> a ``Verdict`` that is not ok (never an exception);
* BDOP bound proofs (``bdop.verify_bound``): arbitrary bytes -> ``SerializationError`` for a
  wrong length, else a ``BoundVerdict`` that is not ok.
(CRISP's client proofs, ``popk``/``keyproof``, are fuzzed in tests/he/test_decoder_fuzz_crypto.py.)
"""

import hashlib
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from secinfer.crypto.he.params import get_params
from secinfer.crypto.he.rlwe import encrypt_with_randomness
from secinfer.crypto.prg import PRG
from secinfer.crypto.zk import bdop, zkbpp
from secinfer.errors import SerializationError

N = int(os.environ.get("SECINFER_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=N, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
CTX = b"fuzz-session"
edits_st = st.lists(st.tuples(st.integers(0, 1 << 30), st.integers(0, 255)), min_size=1, max_size=8)


def _mutate(data: bytes, edits) -> bytes:
    b = bytearray(data)
    for pos, val in edits:
        b[pos % len(b)] = val
    return bytes(b)


@pytest.fixture(scope="module")
def zk_case():
    """One honest ZKB++ statement and proof on the tests' small ring (two repetitions)."""
    rng = np.random.default_rng(5)
    params = get_params("ckks-n10-insecure")
    cfg = zkbpp.ZKConfig(params.log_n, tuple(params.q[:1]), 2, 8, 8, 2, 30)
    msgs = [rng.bytes(8) for _ in range(2)]
    d = np.array([int.from_bytes(m[:1], "big", signed=True) for m in msgs])
    kp = params.keygen()
    pt = zkbpp.plaintext(params, zkbpp.encode(cfg, d), 0, 30)
    _, rnd = encrypt_with_randomness(params, pt, kp.pk, seed=rng.bytes(32))
    pk = [params._poly(kp.pk, i)[:1] for i in (0, 1)]
    com = [np.stack([rng.integers(0, q, params.n, dtype=np.uint64) for q in cfg.primes]) for _ in range(7)]
    r = rng.integers(-2, 3, (5, params.n))
    wit = zkbpp.Witness(msgs, np.vstack([rnd.u, rnd.e0, rnd.e1, r]).astype(np.int64))
    public = np.stack(pk + com)
    digests, outs = zkbpp.evaluate(cfg, public, wit)
    stmt = zkbpp.Statement([hashlib.sha256(m).digest() for m in msgs], public, outs)
    proof = zkbpp.prove(cfg, stmt, wit, rng.bytes(32), CTX)
    assert zkbpp.verify(cfg, stmt, proof, CTX).ok        # the fuzz starts from a valid proof
    return cfg, stmt, proof


@FUZZ
@given(st.binary(max_size=4096))
def test_zkbpp_arbitrary_bytes_are_rejected(zk_case, data):
    cfg, stmt, _ = zk_case
    v = zkbpp.verify(cfg, stmt, data, CTX)
    assert not v.ok


@FUZZ
@given(edits_st)
def test_zkbpp_overwritten_proof_is_rejected(zk_case, edits):
    cfg, stmt, proof = zk_case
    bad = _mutate(proof, edits)
    v = zkbpp.verify(cfg, stmt, bad, CTX)
    assert v.ok == (bad == proof)


@FUZZ
@given(st.integers(0, 1 << 30), st.binary(max_size=64), st.booleans())
def test_zkbpp_cut_or_extended_proof_is_malformed(zk_case, cut, tail, extend):
    cfg, stmt, proof = zk_case
    bad = proof + (tail or b"\x00") if extend else proof[: cut % len(proof)]
    v = zkbpp.verify(cfg, stmt, bad, CTX)
    assert not v.ok and v.malformed


@pytest.fixture(scope="module")
def bound_case():
    params = get_params("ckks-n10-insecure")
    bp = bdop.BDOPParams(params.log_n, tuple(params.q[:2]))
    key = bdop.commitment_key(bp, b"k" * 16)
    prg = PRG.for_tests(3)
    rng = np.random.default_rng(1)
    noises = np.stack([rng.integers(-1, 2, bp.n), rng.integers(-19, 20, bp.n), rng.integers(-19, 20, bp.n)])
    r = bdop.sample_randomness(bp, prg)
    com = bdop.commit(bp, key, noises, r)
    proof = bdop.prove_bound(bp, key, com, noises, r, prg, CTX)
    assert bdop.verify_bound(bp, key, com, proof, CTX).ok
    return bp, key, com, proof


@FUZZ
@given(st.binary(max_size=2 * 32 + 8 * 1024 * 4))
def test_bdop_arbitrary_bytes_give_serialization_error_or_rejection(bound_case, data):
    bp, key, com, _ = bound_case
    if len(data) != bdop.proof_bytes(bp):
        with pytest.raises(SerializationError):
            bdop.verify_bound(bp, key, com, data, CTX)
    else:
        assert not bdop.verify_bound(bp, key, com, data, CTX).ok


@settings(max_examples=max(20, N // 3), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(edits_st)
def test_bdop_overwritten_proof_is_rejected(bound_case, edits):
    bp, key, com, proof = bound_case
    bad = _mutate(proof, edits)
    assert bdop.verify_bound(bp, key, com, bad, CTX).ok == (bad == proof)


@FUZZ
@given(st.integers(0, 2 ** 63))
def test_bdop_random_proof_of_the_right_length_is_rejected(bound_case, seed):
    bp, key, com, _ = bound_case
    data = np.random.default_rng(seed).bytes(bdop.proof_bytes(bp))
    assert not bdop.verify_bound(bp, key, com, data, CTX).ok
