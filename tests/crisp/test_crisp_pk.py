"""CRISP's client public key, proven well formed (server-chosen a = pk1, proof of short
(s, e) with pk0 + a s = e): an honest run passes and stays exact; a key from a large
secret, with a large error, a tampered response or a pk0 that does not match the proof
makes the server abort (check ``crisp-pk``) in the setup phase, and the client gets
nothing; wrong-size key messages are typed errors."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from secinfer.arith.fixed import FX64
from secinfer.errors import FrameError, ProtocolAbort
from secinfer.ir import bundled
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model

sys.path.insert(0, os.path.dirname(__file__))
from crisp_helpers import run_crisp  # noqa: E402

HE = {"he_params": "ckks-n12-wide-insecure", "allow_insecure_he": True}
MLP = load_model(bundled.bundled_path("digits-mlp"))
X, _ = bundled.bundled_testset("digits-mlp")


def _at(point, fn, force=False):
    def tamper(p, idx, a):
        if p == "pk-force":
            return force
        return fn(a) if p == point else a
    return tamper


def _assert_pk_abort(res):
    assert isinstance(res["server"], ProtocolAbort), res["server"]
    assert res["server"].check == "crisp-pk" and res["server"].suspect == "client"
    assert isinstance(res["client"], BaseException)       # no output for the client


def test_honest_key_passes_and_output_is_exact():
    seen = []

    def spy(p, idx, a):
        seen.append(p)
        return a
    res = run_crisp(MLP, X[5:7], "malicious", linear="ckks", extra=HE, tamper=spy)
    assert not isinstance(res["server"], BaseException), res["server"]
    np.testing.assert_array_equal(res["client"].output_ring, run_fixed(MLP, X[5:7], FX64))
    assert {"pk-key", "pk0", "pk-h", "pk-z"} <= set(seen)
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
@pytest.mark.parametrize("key", [_uniform_s, _large_e], ids=["uniform-secret", "large-error"])
@pytest.mark.parametrize("force", [True, False], ids=["sends-anyway", "restarts"])
def test_dishonest_key_aborts(key, force):
    """pk0 = e' - a s' exactly for a large s' or e' (so the key is consistent, just not
    short): the cheating prover either sends its (out-of-range) responses or keeps
    restarting; the server aborts either way before any offline or online work."""
    res = run_crisp(MLP, X[:1], "malicious", linear="ckks", extra=HE, tamper=_at("pk-key", key, force))
    _assert_pk_abort(res)


def test_tampered_response_coefficient_aborts():
    def flip(z):
        zb = bytearray(z)
        zb[len(zb) // 2] ^= 0x10
        return bytes(zb)
    _assert_pk_abort(run_crisp(MLP, X[:1], "malicious", linear="ckks", extra=HE, tamper=_at("pk-z", flip)))


def test_tampered_hash_aborts():
    _assert_pk_abort(run_crisp(MLP, X[:1], "malicious", linear="ckks", extra=HE,
                               tamper=_at("pk-h", lambda h: bytes([h[0] ^ 1]) + h[1:])))


def test_pk0_not_matching_the_proof_aborts():
    def bump(pk0):
        pk0 = pk0.copy()
        pk0[0, 9] = (pk0[0, 9] + np.uint64(1)) % np.uint64(1 << 40)   # still below q_0
        return pk0
    _assert_pk_abort(run_crisp(MLP, X[:1], "malicious", linear="ckks", extra=HE, tamper=_at("pk0", bump)))


@pytest.mark.parametrize("point,fn", [
    ("pk0", lambda p: p[:-1]),                                  # one prime short
    ("pk0-bytes", lambda b: np.full_like(b, 0xFF)),             # residues above the primes
    ("pk0-bytes", lambda b: b[:-1]),                            # packed pk0 one byte short
    ("pk-z", lambda z: z[:-1]),                                 # response one byte short
    ("pk-h", lambda h: h + b"\x00"),                            # 33-byte hash
], ids=["pk0-shape", "pk0-unreduced", "pk0-short", "z-short", "h-long"])
def test_wrong_size_key_messages_are_frame_errors(point, fn):
    res = run_crisp(MLP, X[:1], "malicious", linear="ckks", extra=HE, tamper=_at(point, fn))
    assert isinstance(res["server"], FrameError), res["server"]
    assert isinstance(res["client"], BaseException)


def test_semi_honest_baseline_sends_a_plain_key_without_proof():
    seen = []

    def spy(p, idx, a):
        seen.append(p)
        return a
    res = run_crisp(MLP, X[:1], "semi-honest", linear="ckks", extra=HE, tamper=spy)
    assert not isinstance(res["server"], BaseException), res["server"]
    np.testing.assert_array_equal(res["client"].output_ring, run_fixed(MLP, X[:1], FX64))
    assert not any(p.startswith("pk") for p in seen)


@pytest.mark.slow
@pytest.mark.parametrize("pname,expect", [("ckks-n14-q380-128", (104, 1, 6)), ("ckks-n14-128", (104, 1, 6))])
def test_hardened_budgets_of_benchmarks_a_and_b_fit(pname, expect):
    """With the proven key bounds (||s|| <= 2^26, ||e_pk|| <= 2^30) every linear layer of
    muse-a and muse-b fits both 128-bit sets with one 104-bit digit at level 6 (300 bits):
    2 t nu0 < Q there, with t = 2^105 and the flooding sized for the proven noise."""
    from secinfer.crypto.fss.group import Z2k
    from secinfer.ir import zoo
    from secinfer.protocols.crisp.ckks_engine import CKKSLinear, rows_and_mats
    from secinfer.protocols.crisp.plan import compile_plan

    eng = CKKSLinear(Z2k(104), 13, True, pname)
    for name in ("muse-a", "muse-b"):
        plan = compile_plan(load_model(zoo.build(name, seed=0)), FX64, 1)
        for i, st in enumerate(plan.public):
            if st.get("op") != "lin":
                continue
            lay = eng._conv_layout(st)
            buds = [lay] if lay is not None else [
                eng._budget(k_in, n_out, st["wbits"])
                for (_, _, k_in, n_out) in rows_and_mats(st, plan.weights[i]["w"], None, None)[0]]
            for b in buds:
                assert (b.D, b.T, b.level) == expect, (name, st["name"])
                assert b.noise_bits >= 78 and 2 * b.t * b.nu0 < eng.params.q_level(b.level)
                assert b.t_bits == 105 and b.phi >= b.noise_bits + b.sigma
