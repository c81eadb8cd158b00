"""Whole networks through ``secinfer.protocols.stamp`` (SPEC.run_party on a LocalHub)."""

import numpy as np
import pytest

from secinfer.arith.fixed import FX32
from secinfer.crypto.prg import PRG
from secinfer.ir.bundled import bundled_path, bundled_testset, predict_from_output
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model
from secinfer.net.channel import run_local
from secinfer.protocols.base import PartyJob
from secinfer.protocols.registry import get


def run_model(graph, x, security, protocol="stamp", options=None):
    spec = get(protocol)

    def party(role, k):
        def f(ep):
            job = PartyJob(role=role, security=security, fixed=FX32, prg=PRG.for_tests(30 + k),
                           model=graph if role == spec.model_role else None,
                           input=x if role == spec.input_role else None, options=dict(options or {}))
            return spec.run_party(role, ep, job)
        return f
    res = run_local({r: party(r, k) for k, r in enumerate(spec.roles)}, timeout=300)
    for v in res.values():
        if isinstance(v, Exception):
            raise v
    return res


def test_digits_mlp_all_held_out_rows_semi_honest():
    g = load_model(bundled_path("digits-mlp"))
    x, _ = bundled_testset("digits-mlp")
    res = run_model(g, x, "semi-honest")
    out = res["p1"].output_ring
    ref = run_fixed(g.with_batch(len(x)), x, FX32)
    assert np.array_equal(out, ref)
    assert np.array_equal(predict_from_output("digits-mlp", FX32.decode(out)),
                          predict_from_output("digits-mlp", FX32.decode(ref)))
    assert res["p0"].output is None and res["p2"].output is None
    assert res["p1"].info["bus"]["online_bytes"] > 0


@pytest.mark.parametrize("security", ["semi-honest", "malicious"])
def test_digits_cnn_matches_oracle(security):
    g = load_model(bundled_path("digits-cnn"))
    x, _ = bundled_testset("digits-cnn")
    x = x[:40] if security == "malicious" else x
    res = run_model(g, x, security)
    ref = run_fixed(g.with_batch(len(x)), x, FX32)
    assert np.array_equal(res["p1"].output_ring, ref)
    assert np.array_equal(predict_from_output("digits-cnn", res["p1"].output),
                          predict_from_output("digits-cnn", FX32.decode(ref)))
    if security == "malicious":
        assert res["p1"].info["mult_checks"] >= 2


def test_digits_mlp_malicious():
    g = load_model(bundled_path("digits-mlp"))
    x, _ = bundled_testset("digits-mlp")
    res = run_model(g, x[:64], "malicious")
    assert np.array_equal(res["p1"].output_ring, run_fixed(g.with_batch(64), x[:64], FX32))


def test_spec_declares_roles_and_rejects_fair():
    spec = get("stamp")
    assert spec.roles == ("p0", "p1", "p2") and spec.model_role == "p0" and spec.input_role == "p1"
    from secinfer.errors import ProtocolError
    g = load_model(bundled_path("digits-mlp"))
    with pytest.raises(ProtocolError):
        spec.check_model(g, "fair")
    spec.check_model(g, "malicious")


@pytest.mark.parametrize("security", ["semi-honest", "malicious"])
def test_small_transformer_fused_scaling(security):
    """Attention's Q * (1/sqrt(d)) after the head split runs in the Q projection's device
    chain (executor ``_scalar_mul_after_moves``): output within the softmax budget of the
    oracle (2 units), one device call fewer per layer than products + softmaxes + norms."""
    from secinfer.ir.zoo import build
    g = load_model(build("stamp-transformer", seed=3, batch=3, seq=4, d_model=8, heads=2, d_ff=16,
                         layers=1, vocab=16))
    x = PRG.for_tests(5).uint64((3, 4, 8)).astype(np.float64) / 2.0 ** 64
    res = run_model(g, x, security)
    ref = run_fixed(g, x, FX32)
    err = np.abs(FX32.ring.to_signed(res["p1"].output_ring) - FX32.ring.to_signed(ref))
    assert err.max() <= 2
    info = res["p0"].info
    # 1 layer: Q, K, V, QK^T, AV, out-proj, FFN1(+ReLU), FFN2, head = 9 products; the Mul
    # is inside Q's chain (no product of its own); 2 LayerNorms and a softmax on their own
    assert info["products"] == 9
    assert info["device_calls"] == 9 + 2 + 1
