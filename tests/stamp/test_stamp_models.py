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


@pytest.mark.slow
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
    assert res["p1"].info["output_fused"] == 1   # the last Gemm opened by p1's LTEE


@pytest.mark.slow
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
    assert res["p1"].info["output_fused"] == 1   # Flatten, Gemm: the Gemm opened by p1's LTEE


@pytest.mark.slow
def test_digits_mlp_malicious():
    g = load_model(bundled_path("digits-mlp"))
    x, _ = bundled_testset("digits-mlp")
    res = run_model(g, x[:64], "malicious")
    assert np.array_equal(res["p1"].output_ring, run_fixed(g.with_batch(64), x[:64], FX32))
    assert res["p1"].info["output_fused"] == 1


def test_spec_declares_roles_and_rejects_fair():
    spec = get("stamp")
    assert spec.roles == ("p0", "p1", "p2") and spec.model_role == "p0" and spec.input_role == "p1"
    from secinfer.errors import ProtocolError
    g = load_model(bundled_path("digits-mlp"))
    with pytest.raises(ProtocolError):
        spec.check_model(g, "fair")
    spec.check_model(g, "malicious")


@pytest.mark.slow
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
    # is inside Q's chain (no product of its own); Q, K and V finish in one device step
    # (executor ``product_siblings``), the out-projection and FFN2 each with their residual Add and
    # LayerNorm (``_residual_chain``): 9 + 2 + 1 - 2 - 2 = 8 device calls, the last one
    # the fused output step (was 12)
    assert info["products"] == 9
    assert info["device_calls"] == 9 + 2 + 1 - 2 - 2
    rounds = max(res[r].info["meter"]["phases"]["online"]["rounds"] for r in res)
    if security == "semi-honest":   # input 1, seven device steps 2 each, output step 1 (was 24)
        assert rounds == 1 + 7 * 2 + 1
    else:   # + the verified re-shares of Q/K/V (together), QK^T, AV, out-projection: 1 each;
        #     FFN1, FFN2 and the head are premultiplied (their inputs come from device steps)
        assert rounds == 1 + 7 * 2 + 4 + 1
        assert res["p1"].info["premultiplied"] == 3


# ---- the last product fused with the output opening (StampBackend.product_output) --------
def _declared_network_a(batch: int, security: str, fused: bool, premul: bool = True) -> int:
    """Online inter-party bytes of Network-A (FC 784-128-128-10) from the per-protocol
    declarations of ``costmodel``; batch >= 3, so every device path runs three jobs, each
    carrying the layer's bias once [STAMP 4.2]."""
    from secinfer.protocols.stamp import costmodel as cm
    mal = security == "malicious"
    layers = [(784, 128), (128, 128), (128, 10)]
    total = cm.declared_input(batch * 784, security, masked=mal)
    for k, (fin, fout) in enumerate(layers):
        n, n_out = 3 * fout + batch * fout, batch * fout   # three jobs' bias + the data
        if mal and premul:   # f(A, W) re-shared with the input's rho or the ReLU's step 2
            total += cm.declared_premultiplied(n_out)["bytes"]
        elif mal:   # no product opens rho: the input's comes with the masked input, the others'
            #        from the LTEEs of the device step before (StampBackend._act_setup)
            total += cm.declared_verified_product(batch * fin, n_out, rho_open=False)["bytes"]
        if k < 2 or not fused:
            total += cm.declared("rss" if mal else "3of3", n, security, n_out)["bytes"]
        else:
            total += cm.declared_output(batch * fout + fout, security)["bytes"]
    if mal:   # delta hashes: with the step-5 messages of each device step that has deltas
        #       pending (the two ReLUs; unfused also the last FC's own step), else before the
        #       output step (the last FC's, when it is not premultiplied)
        total += (2 if premul else 3) * cm.DELTA_CHECK_BYTES
    if not fused:   # the opening to p1 (malicious: the missing component twice)
        total += 2 * 4 * batch * 10 if mal else 4 * batch * 10
    if not mal:     # p1's and p2's components of the first layer are sent ahead (offline,
        #             ``StampOps.ahead``): with the batch split in three jobs (evaluators p0,
        #             p1, p2), 4 of the 6 (job, sender) pairs, each the job's rows and the bias
        total -= 4 * 4 * (batch // 3 * layers[0][1] + layers[0][1])
    return total


@pytest.mark.slow
@pytest.mark.parametrize("security,fused,premul,rounds", [
    ("semi-honest", True, True, 6), ("semi-honest", False, True, 8),
    ("malicious", True, True, 6), ("malicious", False, True, 8),
    ("malicious", True, False, 10), ("malicious", False, False, 11)])
def test_network_a_rounds_and_bytes(security, fused, premul, rounds):
    """Network-A: input 1, two fused FC+ReLU 2 + 2, the last FC with the opening 1 (was
    2 + 1): 6 rounds semi-honest. Malicious: the same 6 with premultiplied products (each
    FC's f(A, W) re-shared with the round that makes A known, its delta hash with the next
    step-5 messages); 10 without (each FC's verified re-share 1 round, the delta check
    before the output 1; unfused 11: the last check rides on the last FC's own device
    step, was 12). Bytes equal the declarations."""
    from secinfer.ir.zoo import build
    g = load_model(build("secureml-a", seed=0, batch=3))
    x = PRG.for_tests(6).uint64((3, 784)).astype(np.float64) / 2.0 ** 64
    res = run_model(g, x, security, options={"stamp_fuse_output": fused, "stamp_premultiply": premul})
    assert np.array_equal(res["p1"].output_ring, run_fixed(g, x, FX32))
    online = [res[r].info["meter"]["phases"]["online"] for r in ("p0", "p1", "p2")]
    assert max(o["rounds"] for o in online) == rounds
    assert sum(o["sent_payload"] for o in online) == _declared_network_a(3, security, fused, premul)
    assert res["p1"].info["output_fused"] == int(fused)
    assert res["p1"].info["rho_from_device"] == (2 if security == "malicious" else 0)
    assert res["p1"].info["premultiplied"] == (3 if security == "malicious" and premul else 0)


def _product_then_moves_model():
    """Gemm + ReLU, Gemm, then Reshape and Transpose to the output."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    prg = PRG.for_tests(8)

    def w(shape, name, s):
        u = prg.uint64(shape).astype(np.float64) / 2.0 ** 64
        return numpy_helper.from_array(((u - 0.5) * 2 * s).astype(np.float32), name)
    inits = [w((6, 12), "w1", 0.5), w((6,), "b1", 0.1), w((4, 6), "w2", 0.5), w((4,), "b2", 0.1),
             numpy_helper.from_array(np.array([-1, 2, 2], dtype=np.int64), "shp")]
    nodes = [helper.make_node("Gemm", ["input", "w1", "b1"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["z"], transB=1),
             helper.make_node("Reshape", ["z", "shp"], ["z2"]),
             helper.make_node("Transpose", ["z2"], ["output"], perm=[0, 2, 1])]
    graph = helper.make_graph(nodes, "moves", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [4, 12])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [4, 2, 2])],
                              initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return load_model(m)


@pytest.mark.parametrize("security", ["semi-honest", "malicious"])
def test_last_product_followed_by_movement_ops(security):
    g = _product_then_moves_model()
    x = PRG.for_tests(9).uint64((4, 12)).astype(np.float64) / 2.0 ** 64
    res = run_model(g, x, security)
    ref = run_fixed(g, x, FX32)
    assert res["p1"].output_ring.shape == (4, 2, 2)
    assert np.array_equal(res["p1"].output_ring, ref)
    assert res["p1"].info["output_fused"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("name,rounds", [("network-b", 6), ("network-c", 8), ("lenet", 8)])
def test_zoo_convnets_malicious_premultiplied_exact(name, rounds):
    """Malicious, every product premultiplied (convolutions included: the masked input's,
    then each one after a device step): outputs equal the oracle; input 1, one device step
    (2 rounds) per non-linear layer, the output step 1."""
    from secinfer.ir.zoo import build
    g = load_model(build(name, seed=0, batch=4))
    x = PRG.for_tests(6).uint64((4,) + tuple(g.inputs[0].shape[1:])).astype(np.float64) / 2.0 ** 64
    res = run_model(g, x, "malicious")
    assert np.array_equal(res["p1"].output_ring, run_fixed(g, x, FX32))
    info = res["p1"].info
    assert info["premultiplied"] == info["products"]
    assert max(res[r].info["meter"]["phases"]["online"]["rounds"] for r in res) == rounds
