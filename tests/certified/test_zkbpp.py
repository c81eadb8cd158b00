"""ZKB++ (go/zkbpp) against independent references: hashlib's SHA-256, the HE core's
encryption with kept randomness, Lattigo's CKKS decoding; honest and tampered proofs."""

import hashlib

import numpy as np
import pytest

from secinfer.crypto.he.params import get_params
from secinfer.crypto.he.rlwe import EncryptionRandomness, encrypt_with_randomness
from secinfer.crypto.zk import zkbpp
from secinfer.errors import ConfigError

PARAMS = "ckks-n10-insecure"


def _instance(rng, level=1, n_msgs=4, msg_bytes=24, data_bits=16, reps=4, log_scale=30):
    params = get_params(PARAMS)
    cfg = zkbpp.ZKConfig(params.log_n, tuple(params.q[: level + 1]), reps, msg_bytes, data_bits,
                         n_msgs, log_scale)
    msgs = [rng.bytes(msg_bytes) for _ in range(n_msgs)]
    d = np.array([int.from_bytes(m[: data_bits // 8], "big", signed=True) for m in msgs])
    kp = params.keygen()
    pt = zkbpp.plaintext(params, zkbpp.encode(cfg, d), level, log_scale)
    ct, rnd = encrypt_with_randomness(params, pt, kp.pk, seed=rng.bytes(32))
    L = level + 1
    pk = [params._poly(kp.pk, i)[:L] for i in (0, 1)]
    bdop = [np.stack([rng.integers(0, q, params.n, dtype=np.uint64) for q in cfg.primes])
            for _ in range(7)]
    r = rng.integers(-2, 3, (5, params.n))
    wit = zkbpp.Witness(msgs, np.vstack([rnd.u, rnd.e0, rnd.e1, r]).astype(np.int64))
    public = np.stack(pk + bdop)
    digests, outs = zkbpp.evaluate(cfg, public, wit)
    st = zkbpp.Statement([hashlib.sha256(m).digest() for m in msgs], public, outs)
    return params, cfg, kp, pt, ct, rnd, d, st, wit


@pytest.mark.parametrize("msg_bytes", [3, 24, 55, 56, 100])
def test_sha256_circuit_matches_hashlib(msg_bytes):
    rng = np.random.default_rng(msg_bytes)
    _, cfg, *_, st, wit = _instance(rng, level=0, n_msgs=3, msg_bytes=msg_bytes, data_bits=8)
    digests, _ = zkbpp.evaluate(cfg, st.public, wit)
    assert digests == [hashlib.sha256(m).digest() for m in wit.msgs]


def test_arithmetic_part_matches_he_encryption_and_decoding():
    rng = np.random.default_rng(7)
    params, cfg, kp, pt, ct, rnd, d, st, wit = _instance(rng, level=1)
    # the circuit's ciphertext output is the HE core's encryption with the same randomness
    assert np.array_equal(st.output[0], params._poly(ct, 0))
    assert np.array_equal(st.output[1], params._poly(ct, 1))
    # and the exact encoding decodes to the data points (slot j = d_j)
    dec = params.decrypt_decode(ct, kp.sk)[: len(d)]
    assert np.max(np.abs(dec.real - d)) < 1e-3 and np.max(np.abs(dec.imag)) < 1e-3
    # re-encrypting with the kept randomness gives the same ciphertext
    ct2, _ = encrypt_with_randomness(params, pt, kp.pk, randomness=EncryptionRandomness(
        rnd.u, rnd.e0, rnd.e1))
    assert np.array_equal(params._poly(ct2, 0), params._poly(ct, 0))


def test_honest_proof_verifies_and_tampering_is_rejected():
    rng = np.random.default_rng(11)
    params, cfg, kp, pt, ct, rnd, d, st, wit = _instance(rng)
    seed, ctx = rng.bytes(32), b"session-A"
    proof = zkbpp.prove(cfg, st, wit, seed, ctx)
    assert zkbpp.verify(cfg, st, proof, ctx).ok
    # another session's context: only the challenge check fails
    assert zkbpp.verify(cfg, st, proof, b"session-B").fails == zkbpp.FAIL_CHALLENGE
    # one byte of an opened view (the AND outputs of the first repetition)
    bad = bytearray(proof)
    off = 6 + 4 + 32 + 9 * 32 + 2 * 16 + 8   # inside rep 0 after seeds (view or player 2's share)
    bad[off + 3] ^= 0x10
    v = zkbpp.verify(cfg, st, bytes(bad), ctx)
    assert not v.ok and not v.view_ok
    # a statement with other data: digests of other messages
    other = zkbpp.Statement([hashlib.sha256(b"x" + m).digest() for m in wit.msgs], st.public,
                            st.output)
    assert zkbpp.verify(cfg, other, proof, ctx).fails & zkbpp.FAIL_CHALLENGE
    p2 = zkbpp.prove(cfg, other, wit, seed, ctx)
    assert zkbpp.verify(cfg, other, p2, ctx).fails == zkbpp.FAIL_DIGEST
    # a ciphertext that encrypts other data
    out2 = st.output.copy()
    out2[0] = params._poly(encrypt_with_randomness(
        params, zkbpp.plaintext(params, zkbpp.encode(cfg, d + 1), 1, cfg.log_scale), kp.pk,
        randomness=rnd)[0], 0)
    st2 = zkbpp.Statement(st.digests, st.public, out2)
    p3 = zkbpp.prove(cfg, st2, wit, seed, ctx)
    assert zkbpp.verify(cfg, st2, p3, ctx).fails == zkbpp.FAIL_ENCRYPTION
    # truncated, empty; a uint8 array is read in place like bytes
    assert zkbpp.verify(cfg, st, proof[:-1], ctx).malformed
    assert zkbpp.verify(cfg, st, b"", ctx).malformed
    assert zkbpp.verify(cfg, st, np.frombuffer(proof, dtype=np.uint8), ctx).ok


def test_production_repetitions_give_128_bit_soundness():
    assert zkbpp.reps_for(128) == zkbpp.PRODUCTION_REPS == 219
    assert zkbpp.soundness_bits(219) >= 128 > zkbpp.soundness_bits(218)


def test_bad_shapes_raise_typed_errors():
    rng = np.random.default_rng(3)
    params, cfg, kp, pt, ct, rnd, d, st, wit = _instance(rng, level=0, n_msgs=2)
    with pytest.raises(ConfigError):
        zkbpp.prove(cfg, st, zkbpp.Witness(wit.msgs[:1], wit.polys), b"s" * 16, b"c")
    with pytest.raises(ConfigError):
        zkbpp.verify(cfg, zkbpp.Statement(st.digests, st.public[:3], st.output), b"", b"c")
    bad = zkbpp.ZKConfig(cfg.log_n, (7,), 1, 24, 16, 2, 30)  # not an NTT prime for N
    with pytest.raises(ConfigError):
        zkbpp.encode(bad, [1, 2])
