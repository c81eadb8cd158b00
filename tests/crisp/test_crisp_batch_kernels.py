"""The batch-path kernels of crisp's linear layer (issue #23 item 5): the wide-digit exact
ring matmul, seeded secret-key ciphertexts of the semi-honest client, the one-call
answer, and the offline-validated gate keys."""

from __future__ import annotations

import os
import sys
import types

import numpy as np
import pytest

from secinfer.arith.fixed import FX64
from secinfer.arith.ring import Ring
from secinfer.crypto.he.params import get_params
from secinfer.crypto.he.rlwe import encode_limbs
from secinfer.crypto.he.trimmed import decrypt_trimmed, trim
from secinfer.crypto.prg import PRG
from secinfer.errors import FrameError, PreprocessingReuseError, SerializationError
from secinfer.ir import bundled
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model
from secinfer.protocols.crisp import he_native, lifted
from secinfer.protocols.crisp.offline import Params, PartyStore

sys.path.insert(0, os.path.dirname(__file__))
from crisp_helpers import replace_frame, run_crisp  # noqa: E402

HE_TEST = {"he_params": "ckks-n12-q380-insecure", "allow_insecure_he": True}
MLP = load_model(bundled.bundled_path("digits-mlp"))
X, _ = bundled.bundled_testset("digits-mlp")


def _naive(g, a, w):
    ai = g.to_int(a.reshape(-1, g.limbs)).reshape(a.shape[:-1])
    return [[sum(int(ai[r, i]) * int(w[i, j]) for i in range(w.shape[0])) % (1 << g.bits)
             for j in range(w.shape[1])] for r in range(ai.shape[0])]


@pytest.mark.parametrize("k", [40, 64, 104])
@pytest.mark.parametrize("wmax", [3, 3000, 1 << 22, 1 << 40])
def test_matmul_signed_wide_digits_exact(k, wmax):
    """Against Python integers, for weights that take the wide-digit path and ones that
    fall back to 16-bit digits, both operand orders (Gemm, conv)."""
    g = Ring(k)
    rng = np.random.default_rng(k + wmax)
    a = g.random(PRG(b"\x01" * 16, "mm"), (5, 70))
    w = rng.integers(-wmax, wmax, (70, 4))
    got = g.to_int(lifted.matmul_signed(g, a, w).reshape(-1, g.limbs)).reshape(5, 4)
    assert (got == np.array(_naive(g, a, w), dtype=object)).all()
    wt = np.ascontiguousarray(w.T)[None]            # (1, out, inner) on the left
    got2 = lifted.matmul_signed(g, np.ascontiguousarray(a.transpose(1, 0, 2)), wt,
                                fn=lambda da, dw: np.matmul(dw, da))
    got2 = g.to_int(got2.reshape(-1, g.limbs)).reshape(4, 5).T
    assert (got2 == got).all()
    assert (lifted._wide_digit_bits(w) > 16) == (wmax < 1 << 30)


def _seeded_setup():
    prm = get_params("ckks-n12-q380-insecure", allow_insecure=True)
    kp = prm.keygen()
    rng = np.random.default_rng(3)
    vals = rng.integers(0, 1 << 40, (1, prm.n)).astype(np.int64)
    return prm, kp, vals


def test_seeded_ciphertext_decrypts_and_halves_the_bytes():
    prm, kp, vals = _seeded_setup()
    level = 3
    with encode_limbs(prm, vals, np.zeros((1, prm.n), np.int64), 0, level, delta=1) as pt:
        raw = he_native.encrypt_seeded(prm, kp.sk, pt, b"\x07" * 16)
        full = prm.encrypt(pt, kp.pk)
    assert len(raw) == he_native.seeded_size(prm, level) < 0.55 * len(full.to_bytes())
    ct = he_native.load_seeded(prm, raw, level, 0)
    assert ct.level == level and ct.degree == 1
    pos = np.arange(prm.n)
    res = decrypt_trimmed(prm, kp.sk, trim(prm, ct, pos), level, pos)
    q = prm.q
    for l in range(level + 1):   # m + e with |e| small: within 20 of vals mod q_l
        d = (res[l].astype(object) - vals[0].astype(object)) % q[l]
        d = np.where(d > q[l] // 2, d - q[l], d)
        assert np.max(np.abs(d.astype(np.int64))) <= 20
    # the seed fixes c1: another seed, another c1 -> decryption is garbage
    bad = he_native.load_seeded(prm, b"\x08" * 16 + raw[16:], level, 0)
    res2 = decrypt_trimmed(prm, kp.sk, trim(prm, bad, pos[:8]), level, pos[:8])
    assert not np.array_equal(res2[0], res[0][:8])
    for c in (ct, bad, full):
        c.close()


def test_seeded_encryption_made_ahead_is_the_same_frame_form():
    """seeded_zero (offline) + seeded_finish (online): a frame of the same length that
    loads strictly and decrypts to the message within the fresh error, with the seed in
    front; the zero is consumed; a plaintext at another level is refused."""
    prm, kp, vals = _seeded_setup()
    level, seed = 3, b"\x09" * 16
    pos = np.arange(prm.n)
    with encode_limbs(prm, vals, np.zeros((1, prm.n), np.int64), 0, level, delta=1) as pt:
        zero = he_native.seeded_zero(prm, kp.sk, level, seed)
        raw = he_native.seeded_finish(prm, zero, pt, seed)
        assert zero.closed
        zero2 = he_native.seeded_zero(prm, kp.sk, level, seed)
        zres = decrypt_trimmed(prm, kp.sk, trim(prm, he_native.load_seeded(
            prm, seed + he_native.encrypt_seeded(prm, kp.sk, pt, seed)[16:], level, 0), pos), level, pos)
    assert raw[:16] == seed and len(raw) == he_native.seeded_size(prm, level)
    ct = he_native.load_seeded(prm, raw, level, 0)
    res = decrypt_trimmed(prm, kp.sk, trim(prm, ct, pos), level, pos)
    q = prm.q
    for l in range(level + 1):
        for got in (res, zres):
            d = (got[l].astype(object) - vals[0].astype(object)) % q[l]
            d = np.where(d > q[l] // 2, d - q[l], d)
            assert np.max(np.abs(d.astype(np.int64))) <= 20
    assert np.max(np.abs(vals[0])) > 1 << 30            # the message is really there
    with encode_limbs(prm, vals, np.zeros((1, prm.n), np.int64), 0, level - 1, delta=1) as pt2:
        with pytest.raises(Exception, match="level"):
            he_native.seeded_finish(prm, zero2, pt2, seed)
    ct.close()


def test_seeded_frame_strict():
    prm, kp, vals = _seeded_setup()
    with encode_limbs(prm, vals, np.zeros((1, prm.n), np.int64), 0, 2, delta=1) as pt:
        raw = he_native.encrypt_seeded(prm, kp.sk, pt, b"\x07" * 16)
    with pytest.raises(Exception):
        he_native.load_seeded(prm, raw[:-1], 2, 0)
    with pytest.raises(Exception):
        he_native.load_seeded(prm, raw[:16] + b"\xff" * (len(raw) - 16), 2, 0)


@pytest.mark.parametrize("bad", ["garbage", "truncated", "full-ciphertext"])
def test_semi_honest_malformed_seeded_ciphertext_rejected(bad):
    def corrupt(raw):
        if bad == "garbage":
            return np.full_like(raw, 0xFF)
        if bad == "truncated":
            return raw[: len(raw) // 2]
        other = get_params("ckks-n11-insecure")
        return np.frombuffer(other.encrypt(np.zeros(4), other.keygen().pk).to_bytes(), np.uint8)

    res = run_crisp(MLP, X[:1], "semi-honest", linear="ckks", extra=HE_TEST,
                    adversary=replace_frame(r"crisp/lin/2/ct", corrupt, once=True))
    assert isinstance(res["server"], FrameError), res["server"]
    assert "ciphertext rejected" in str(res["server"])


def test_semi_honest_batch_equals_oracle():
    x = X[40:43]
    res = run_crisp(MLP, x, "semi-honest", linear="ckks", extra=HE_TEST)
    assert not isinstance(res["server"], BaseException), res["server"]
    np.testing.assert_array_equal(res["client"].output_ring, run_fixed(MLP, x, FX64))


def test_party_store_keeps_validated_keys_once():
    prm = Params(16, 4, True, 8)
    gate = prm.gate("relu")
    k0, k1 = gate.gen(PRG(b"\x02" * 16, "keys"), 5, mac_key=7)
    st = PartyStore("server")
    st.put("gate/1/0", k0)
    with pytest.raises(PreprocessingReuseError):
        st.put("gate/1/0", k0)
    with pytest.raises(SerializationError):     # the other party's key is refused
        _take(k0, party=1)
    assert st.take("gate/1/0", expect=gate, party=0) is k0
    with pytest.raises(PreprocessingReuseError):
        st.take("gate/1/0", expect=gate, party=0)
    with pytest.raises(PreprocessingReuseError):
        st.put("gate/1/0", k1)
    st2 = PartyStore("server")
    st2.put("gate/2/0", k1)
    with pytest.raises(SerializationError):
        st2.take("gate/2/0", expect=prm.gate("ars"), party=1)


def _take(key, party):
    st = PartyStore("x")
    st.put("gate/9/0", key)
    return st.take("gate/9/0", expect=key.gate, party=party)


def test_offline_encryptions_of_zero_give_the_same_ciphertexts():
    """Malicious client: (pk0 u + e0, pk1 u + e1) made offline plus Delta m online is, byte
    for byte, ``encrypt_with_randomness`` of Delta m with the same u, e0, e1 (the witness
    the proof gets); once the group's queue is spent it encrypts afresh; a queued
    encryption at another level is refused."""
    from secinfer.crypto.he.rlwe import EncryptionRandomness, encrypt_with_randomness
    from secinfer.errors import ProtocolError
    from secinfer.protocols.crisp.ckks_engine import CKKSLinear
    from secinfer.protocols.crisp.budget import META_LOG_SCALE

    eng = CKKSLinear(Ring(104), 13, True, "ckks-n12-wide-insecure", allow_insecure=True)
    prm = eng.params
    eng.pk = prm.keygen().pk
    eng.prg = PRG(b"\x02" * 16, "zeros")
    bud = eng.budget(20, 3, 8, 1)
    rng = np.random.default_rng(5)
    try:
        assert eng.precompute_zeros([(7, 0, bud, 2)]) == 2
        eng.zk_begin("client", 7, 0, bud, 3)
        for i in range(3):
            poly = np.zeros((-(-bud.D // 40), prm.n), np.int64)
            poly[0] = rng.integers(0, 1 << 40, prm.n)
            ct, wit = eng.encrypt(poly, bud)
            rand = EncryptionRandomness(wit[1], wit[2], wit[3])
            with encode_limbs(prm, poly, np.zeros((1, prm.n), np.int64), META_LOG_SCALE, bud.level,
                              delta=bud.delta) as pt:
                ref, _ = encrypt_with_randomness(prm, pt, eng.pk, randomness=rand)
            assert ct.to_bytes() == ref.to_bytes()
            assert np.any(wit[1] != 0)
            ct.close()
            ref.close()
        assert not eng._zero_q                           # two from the queue, one fresh
        eng.precompute_zeros([(8, 0, bud, 1)])
        eng.zk_begin("client", 8, 0, bud, 1)
        other = types.SimpleNamespace(level=bud.level - 1, delta=bud.delta, D=bud.D)
        with pytest.raises(ProtocolError, match="wrong level"):
            eng.encrypt(poly, other)
    finally:
        eng.release()
