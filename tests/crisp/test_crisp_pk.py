"""CRISP's client public key, proven well formed (server-chosen a = pk1, proof of short
(s, e) with pk0 + a s = e): an honest run passes and stays exact; a key from a large
secret, with a large error, a tampered response or a pk0 that does not match the proof
makes the server abort (check ``crisp-pk``) in the setup phase, and the client gets
nothing; wrong-size key messages are typed errors."""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

from secinfer.arith.fixed import FX64
from secinfer.errors import FrameError, ProtocolAbort
from secinfer.ir import bundled
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model

sys.path.insert(0, os.path.dirname(__file__))
from crisp_helpers import Adversary, run_crisp  # noqa: E402

HE = {"he_params": "ckks-n12-wide-insecure", "allow_insecure_he": True}
MLP = load_model(bundled.bundled_path("digits-mlp"))
X, _ = bundled.bundled_testset("digits-mlp")
KEY_TAGS = r"crisp/he-pk0|crisp/he-pk/[hz]\d+"


def _params():
    from secinfer.crypto.he.params import get_params

    return get_params(HE["he_params"], allow_insecure=True)


def _forced(adv: Adversary) -> Adversary:
    """The cheating prover sends its key-proof responses even when out of range."""
    from secinfer.crypto.zk import keyproof, popk

    def wrap(orig):
        def respond(self, seed, force=False):
            return orig(self, seed, force=force or isinstance(self, keyproof.KeyProver))
        return respond
    return adv.patch(popk.Prover, "respond", wrap)


def _dishonest_key(fn) -> Adversary:
    """The client's key pair from a dishonest (s', e') = fn(s, e), consistent:
    pk0 = e' - a s' exactly (the key a cheating client would publish)."""
    from secinfer.crypto.he import linmap, rlwe

    adv = Adversary()

    def wrap(orig):
        def keygen_seeded(prm, a_seed, seed):
            kp, s, e = orig(prm, a_seed, seed)
            s, e = fn((s, e))
            pk0 = linmap.key_image(prm, kp.pk, [1, 1], np.concatenate([s, e]))
            kp.pk.close()
            kp.pk = rlwe.public_key_from_parts(prm, a_seed, pk0)
            adv.fired += 1
            return kp, s, e
        return keygen_seeded
    return adv.patch(rlwe, "keygen_seeded", wrap)


def _on_bytes(tag, fn) -> Adversary:
    """Rewrite the bytes of every client frame ``tag`` that is not a restart (one 0 byte)."""
    def rule(arrays):
        a = arrays[0]
        if a.size == 1 and a[0] == 0:
            return None
        out = fn(a.tobytes())
        return [np.frombuffer(out, np.uint8) if isinstance(out, bytes) else out]
    return Adversary().on_send(tag, rule)


def _on_pk0(fn) -> Adversary:
    """Rewrite the client's pk0 polynomial (coefficient residues) before it is packed."""
    from secinfer.crypto.he.trimmed import pack_poly, unpack_poly

    prm = _params()

    def rule(arrays):
        poly = unpack_poly(prm, arrays[0], len(prm.q) - 1)
        return [np.frombuffer(pack_poly(prm, fn(poly)), np.uint8)]
    return Adversary().on_send(r"crisp/he-pk0", rule)


def _assert_pk_abort(res):
    assert isinstance(res["server"], ProtocolAbort), res["server"]
    assert res["server"].check == "crisp-pk" and res["server"].suspect == "client"
    assert isinstance(res["client"], BaseException)       # no output for the client


def test_honest_key_passes_and_output_is_exact():
    spy = Adversary(spy=True)
    res = run_crisp(MLP, X[5:7], "malicious", linear="ckks", extra=HE, adversary=spy)
    assert not isinstance(res["server"], BaseException), res["server"]
    np.testing.assert_array_equal(res["client"].output_ring, run_fixed(MLP, X[5:7], FX64))
    assert {"crisp/he-pk0", "crisp/he-pk/h0", "crisp/he-pk/z0"} <= set(spy.sent)
    assert "missing" not in res["server"].info


def _uniform_s(a):
    s, e = a
    return np.random.default_rng(1).integers(-(1 << 40), 1 << 40, s.size), e


def _large_e(a):
    s, e = a
    e = e.copy()
    e[11] += 1 << 33
    return s, e


@pytest.mark.slow
@pytest.mark.covers_check("crisp", "crisp-pk")
@pytest.mark.parametrize("key", [_uniform_s, _large_e], ids=["uniform-secret", "large-error"])
@pytest.mark.parametrize("force", [True, False], ids=["sends-anyway", "restarts"])
def test_dishonest_key_aborts(key, force):
    """pk0 = e' - a s' exactly for a large s' or e' (so the key is consistent, just not
    short): the cheating prover either sends its (out-of-range) responses or keeps
    restarting; the server aborts either way before any offline or online work."""
    adv = _dishonest_key(key)
    res = run_crisp(MLP, X[:1], "malicious", linear="ckks", extra=HE, adversary=_forced(adv) if force else adv)
    _assert_pk_abort(res)


@pytest.mark.covers_check("crisp", "crisp-pk")
def test_tampered_response_coefficient_aborts():
    def flip(z):
        zb = bytearray(z)
        zb[len(zb) // 2] ^= 0x10
        return bytes(zb)
    _assert_pk_abort(run_crisp(MLP, X[:1], "malicious", linear="ckks", extra=HE,
                               adversary=_on_bytes(r"crisp/he-pk/z\d+", flip)))


@pytest.mark.covers_check("crisp", "crisp-pk")
def test_tampered_hash_aborts():
    _assert_pk_abort(run_crisp(MLP, X[:1], "malicious", linear="ckks", extra=HE,
                               adversary=_on_bytes(r"crisp/he-pk/h\d+", lambda h: bytes([h[0] ^ 1]) + h[1:])))


@pytest.mark.covers_check("crisp", "crisp-pk")
def test_pk0_not_matching_the_proof_aborts():
    def bump(pk0):
        pk0 = pk0.copy()
        pk0[0, 9] = (pk0[0, 9] + np.uint64(1)) % np.uint64(1 << 40)   # still below q_0
        return pk0
    _assert_pk_abort(run_crisp(MLP, X[:1], "malicious", linear="ckks", extra=HE, adversary=_on_pk0(bump)))


@pytest.mark.parametrize("adv", [
    lambda: _on_pk0(lambda p: p[:-1]),                                      # one prime short
    lambda: _on_bytes(r"crisp/he-pk0", lambda b: b"\xff" * len(b)),         # residues above the primes
    lambda: _on_bytes(r"crisp/he-pk0", lambda b: b[:-1]),                   # packed pk0 one byte short
    lambda: _on_bytes(r"crisp/he-pk/z\d+", lambda z: z[:-1]),              # response one byte short
    lambda: _on_bytes(r"crisp/he-pk/h\d+", lambda h: h + b"\x00"),         # 33-byte hash
], ids=["pk0-shape", "pk0-unreduced", "pk0-short", "z-short", "h-long"])
def test_wrong_size_key_messages_are_frame_errors(adv):
    res = run_crisp(MLP, X[:1], "malicious", linear="ckks", extra=HE, adversary=adv())
    assert isinstance(res["server"], FrameError), res["server"]
    assert isinstance(res["client"], BaseException)


def test_semi_honest_baseline_sends_a_plain_key_without_proof():
    spy = Adversary(spy=True)
    res = run_crisp(MLP, X[:1], "semi-honest", linear="ckks", extra=HE, adversary=spy)
    assert not isinstance(res["server"], BaseException), res["server"]
    np.testing.assert_array_equal(res["client"].output_ring, run_fixed(MLP, X[:1], FX64))
    assert "crisp/he-pk" in spy.sent and not [t for t in spy.sent if re.fullmatch(KEY_TAGS, t)]


@pytest.mark.slow
@pytest.mark.parametrize("pname,expect", [("ckks-n14-q380-128", (104, 1, 6)), ("ckks-n14-128", (104, 1, 6))])
def test_hardened_budgets_of_benchmarks_a_and_b_fit(pname, expect):
    """With the proven key bounds (||s|| <= 2^26, ||e_pk|| <= 2^30) every linear layer of
    muse-a and muse-b fits both 128-bit sets with one 104-bit digit at level 6 (300 bits):
    2 t nu0 < Q there, with t = 2^105 and the flooding sized for the proven noise."""
    from secinfer.arith.ring import Ring
    from secinfer.ir import zoo
    from secinfer.protocols.crisp.ckks_engine import CKKSLinear
    from secinfer.protocols.crisp.he_rows import rows_and_mats
    from secinfer.protocols.crisp.plan import compile_plan

    eng = CKKSLinear(Ring(104), 13, True, pname)
    for name in ("muse-a", "muse-b"):
        plan = compile_plan(load_model(zoo.build(name, seed=0)), FX64, 1)
        for i, st in enumerate(plan.steps):
            if st.op != "lin":
                continue
            lay = eng.conv_layout(st)
            buds = [lay] if lay is not None else [
                eng.budget(k_in, n_out, st.wbits)
                for (_, _, k_in, n_out) in rows_and_mats(st, plan.weights[i].w, None, None)[0]]
            for b in buds:
                assert (b.D, b.T, b.level) == expect, (name, st.name)
                assert b.noise_bits >= 78 and 2 * b.t * b.nu0 < eng.params.q_level(b.level)
                assert b.t_bits == 105 and b.phi >= b.noise_bits + b.sigma
