"""Issue #22 item 5, the crypto decoders: property-based (hypothesis) fuzz of what a party
decodes from a peer outside the net layer; only the module's typed error may escape.
``SECINFER_FUZZ_EXAMPLES=N`` runs a longer bounded campaign (default: a short one).

* HE objects (``CKKSParams.load``): arbitrary bytes, and valid objects of every kind with
  bytes overwritten or cut -> ``HESerializationError``, ``ParameterMismatchError`` (the
  header names other parameters) or a loaded object;
* FSS gate keys (``GateKey.from_bytes``, what the crisp dealer sends): arbitrary bytes and
  mutated keys -> ``SerializationError`` (or a key that then validates as its gate);
* proofs of plaintext knowledge (``popk.Verifier.check``, the client's CRISP proof):
  arbitrary commitments and responses -> rejected, or ``FrameError`` for a wrong length.
"""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from secinfer.crypto import he
from secinfer.crypto.fss.gates import GateKey, make_gate
from secinfer.crypto.prg import PRG
from secinfer.errors import FrameError, ParameterMismatchError, SerializationError

N = int(os.environ.get("SECINFER_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=N, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _mutate(data: bytes, edits) -> bytes:
    b = bytearray(data)
    for pos, val in edits:
        if b:
            b[pos % len(b)] = val
    return bytes(b)


edits_st = st.lists(st.tuples(st.integers(0, 1 << 30), st.integers(0, 255)), min_size=1, max_size=8)


@pytest.fixture(scope="module")
def he_objects(P, kp):
    x = np.linspace(-1, 1, 8)
    ct = P.encrypt(x, kp.pk)
    objs = {"pk": kp.pk, "pt": P.encode(x), "ct": ct,
            "lwe": he.extract_lwe(P, he.coeff_encrypt(P, np.arange(8), kp.pk, 2.0 ** 30), [0, 3])}
    return {k: v.to_bytes() for k, v in objs.items()}


@FUZZ
@given(st.binary(max_size=2048))
def test_he_arbitrary_bytes_give_serialization_error_only(P, data):
    with pytest.raises(he.HESerializationError):
        P.load(data)


@settings(max_examples=max(20, N // 3), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["pk", "pt", "ct", "lwe"]), edits_st, st.integers(0, 1 << 30), st.booleans())
def test_he_mutated_objects_give_serialization_error_or_load(P, he_objects, kind, edits, cut, do_cut):
    data = _mutate(he_objects[kind], edits)
    if do_cut:
        data = data[:cut % max(1, len(data))]
    try:
        obj = P.load(data)
    except (he.HESerializationError, ParameterMismatchError):
        return
    close = getattr(obj, "close", None)
    if close is not None:
        close()


@pytest.fixture(scope="module")
def gate_key():
    gate = make_gate("relu", 16, 56, mac=True)
    k0, _ = gate.gen(PRG.for_tests(21), 3, mac_key=5)
    return gate, k0.to_bytes()


@FUZZ
@given(st.binary(max_size=4096))
def test_fss_key_arbitrary_bytes_give_serialization_error_only(data):
    with pytest.raises(SerializationError):
        GateKey.from_bytes(data)


@FUZZ
@given(edits_st, st.integers(0, 1 << 30), st.booleans())
def test_fss_key_mutations_give_serialization_error_or_a_valid_key(gate_key, edits, cut, do_cut):
    gate, data = gate_key
    bad = _mutate(data, edits)
    if do_cut:
        bad = bad[:cut % len(bad)]
    try:
        key = GateKey.from_bytes(bad, expect=gate, party=0)
    except SerializationError:
        return
    assert key.count == 3 and key.gate.spec() == gate.spec()   # only coefficient bytes changed


@pytest.fixture(scope="module")
def popk_verifier():
    from secinfer.crypto.he.rlwe import coeff_encode
    from secinfer.crypto.zk import popk

    P = he.get_params("ckks-n10-insecure", allow_insecure=True)
    kp = P.keygen()
    prg = PRG.for_tests(4)
    support = np.concatenate([np.arange(0, 20), P.n // 2 + np.arange(0, 20)])
    m = np.zeros(P.n, np.int64)
    m[support] = (prg.uint64(support.size) & np.uint64(0xFFFF)).astype(np.int64)
    with coeff_encode(P, m.astype(np.float64), 2.0 ** 40, 1) as pt:
        ct, _r = he.encrypt_with_randomness(P, pt, kp.pk, seed=prg.seed())
    v = popk.Verifier(P, kp.pk, 1, 1 << 40, 16, support, [ct])
    yield v, v.g.payload_bytes
    kp.close()


@settings(max_examples=max(20, N // 5), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.binary(min_size=32, max_size=32), st.binary(min_size=16, max_size=16), st.data())
def test_popk_arbitrary_responses_are_rejected_or_frame_errors(popk_verifier, h, seed, data):
    v, size = popk_verifier
    right = data.draw(st.booleans())
    payload = data.draw(st.binary(min_size=size, max_size=size) if right else st.binary(max_size=size + 64))
    try:
        ok, why = v.check(h, seed, payload)
    except FrameError:
        assert len(payload) != size
        return
    assert not ok and why
