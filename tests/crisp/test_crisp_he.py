"""CRISP with the HE linear layer (Lattigo CKKS ciphertexts, exact complex packing)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from secinfer.arith.fixed import FX64
from secinfer.crypto.fss.group import Z2k
from secinfer.crypto.prg import PRG
from secinfer.errors import FrameError, PeerAbortedError, ProtocolAbort
from secinfer.ir import bundled, zoo
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.fixed_ops import encode_weights
from secinfer.ir.onnx_import import load_model
from secinfer.net.channel import run_local
from secinfer.protocols.crisp import lifted
from secinfer.protocols.crisp.ckks_engine import CKKSLinear, LayerBudget

sys.path.insert(0, os.path.dirname(__file__))
from crisp_helpers import add_at, run_crisp  # noqa: E402

# malicious budgets are sized for the client's *proven* bounds (proof slack): they need the
# long modulus chains of the 2^14 sets, here on a small insecure ring -- the default's
# (380 bits: one 104-bit digit per share) and ckks-n14-128's (300 bits: two 52-bit digits)
HE_TEST = {"he_params": "ckks-n12-q380-insecure", "allow_insecure_he": True}
CHAINS = ["ckks-n12-q380-insecure", "ckks-n12-wide-insecure"]
MLP = load_model(bundled.bundled_path("digits-mlp"))
CNN = load_model(bundled.bundled_path("digits-cnn"))
X, _ = bundled.bundled_testset("digits-mlp")


def test_mlp_malicious_he_equals_oracle():
    x = X[20:22]
    res = run_crisp(MLP, x, "malicious", linear="ckks", extra=HE_TEST)
    assert not isinstance(res["server"], BaseException), res["server"]
    np.testing.assert_array_equal(res["client"].output_ring, run_fixed(MLP, x, FX64))
    assert res["client"].info["linear_engine"] == "ckks" and not res["client"].info["insecure"]


def test_cnn_semi_honest_he_equals_oracle():
    x = X[30:31]
    res = run_crisp(CNN, x, "semi-honest", linear="ckks", extra=HE_TEST)
    assert not isinstance(res["server"], BaseException), res["server"]
    np.testing.assert_array_equal(res["client"].output_ring, run_fixed(CNN, x, FX64))


def test_he_share_deviation_aborts():
    res = run_crisp(MLP, X[:1], "malicious", linear="ckks", extra=HE_TEST,
                    tamper=add_at("c3re", step=4, index=3))
    assert isinstance(res["server"], ProtocolAbort) and res["server"].check == "crisp-consistency"
    assert isinstance(res["client"], PeerAbortedError)


@pytest.mark.parametrize("bad", ["garbage", "truncated", "other-params"])
def test_malformed_ciphertext_rejected_before_computation(bad):
    def corrupt(p, idx, raw):
        if p != "ct" or idx != 2:
            return raw
        if bad == "garbage":
            return np.zeros_like(raw)
        if bad == "truncated":
            return raw[: len(raw) // 2]
        from secinfer.crypto.he.params import get_params
        other = get_params("ckks-n11-insecure")
        kp = other.keygen()
        return np.frombuffer(other.encrypt(np.zeros(4), kp.pk).to_bytes(), np.uint8)

    res = run_crisp(MLP, X[:1], "malicious", linear="ckks", extra=HE_TEST, tamper=corrupt)
    assert isinstance(res["server"], FrameError), res["server"]
    assert "ciphertext rejected" in str(res["server"])


def test_production_parameters_refuse_nothing_and_insecure_need_opt_in():
    from secinfer.errors import InsecureParametersError
    with pytest.raises(InsecureParametersError):
        CKKSLinear(Z2k(104), 13, True, "ckks-n12-insecure")


@pytest.mark.parametrize("pname,digits", [("ckks-n14-q380-128", (104, 1)), ("ckks-n14-128", (52, 2))])
def test_largest_muse_b_layer_exact_at_production_parameters(pname, digits):
    """CKKS-in-Z_2^n: the 64x(64*3*3) convolution of benchmark B (its largest layer by
    weights per output), at the 128-bit sets (the default: one digit), on uniform shares in the
    lifted ring Z_2^104: decrypted values round to the exact ring shares, the noise stays
    below Delta/2 with the margin the budget claims, and the budget fits log Q."""
    g = load_model(zoo.build("muse-b", seed=0))
    w = FX64.ring.to_signed(encode_weights(g, FX64)["conv_w1"]).reshape(64, -1).T  # (576, 64)
    grp = Z2k(104)
    rows = 1
    wbits = int(np.max(np.abs(w))).bit_length()
    step = {"op": "lin", "node_op": "Gemm", "name": "muse-b/conv1-rows", "in_shape": [rows, 576],
            "out_shape": [rows, 64], "wbits": wbits, "attrs": {}}
    prg = PRG.for_tests(7)
    v0, v1, w0, w1 = (grp.random(prg, (rows, 576)) for _ in range(4))
    mu = grp.random(prg, ())
    eng_c = CKKSLinear(grp, 13, True, pname)
    eng_s = CKKSLinear(grp, 13, True, pname)
    from secinfer.protocols.crisp.proof import hardened

    bud = hardened(LayerBudget(eng_s.params, 104, 576, 64, wbits, 40), eng_s.params, 40)
    assert bud.log_delta + bud.B + bud.sigma + 2 <= bud.log_q
    assert (bud.D, bud.T) == digits

    def client(ep):
        eng_c.setup_client(ep)
        return eng_c.client(ep, 1, step, v1, w1, lambda p, i, a: a)

    def server(ep):
        eng_s.setup_server(ep)
        return eng_s.server(ep, 1, step, {"w": w, "b": None}, v0, w0, mu, PRG.for_tests(8))

    res = run_local({"client": client, "server": server}, timeout=600)
    (c_re, c_im, _), (s_re, s_im, _) = res["client"], res["server"]
    exact_re = lifted.matmul_signed(grp, grp.add(v0, v1), w)
    exact_im = lifted.matmul_signed(grp, grp.add(w0, w1), w)
    np.testing.assert_array_equal(grp.add(c_re, s_re), exact_re)
    np.testing.assert_array_equal(grp.add(c_im, s_im), exact_im)
    st = eng_c.stats
    assert st["log2_delta"] == bud.log_delta
    # flooding noise is at most 2^phi = Delta / 4, and the rest is far below it
    assert st["max_log2_noise"] < bud.log_delta - 1.9


@pytest.mark.parametrize("chain", CHAINS)
@pytest.mark.parametrize("c,m,hin,stride,spills", [(12, 3, 9, 2, True), (2, 9, 9, 2, False),
                                                    (6, 20, 13, 1, True)])
def test_channel_packed_conv_exact(c, m, hin, stride, spills, chain):
    """Packed convolution (several channel groups, or several output blocks), padding 1, on
    uniform Z_2^104 shares: shares reconstruct to the exact convolution, real and MAC half.
    ``spills`` (300-bit chain): the chosen layout's product runs past N/2 (he_conv.spill_ok), so a wrong
    feasibility rule would mix the halves at the targets and break one of them."""
    from secinfer.protocols.crisp import he_conv, linops

    grp = Z2k(104)
    prg = PRG.for_tests(11)
    w = (prg.uint64((m, c, 3, 3)).astype(np.int64) % 4001) - 2000
    o = (hin - 1) // stride + 1
    step = {"op": "lin", "node_op": "Conv", "name": "conv", "in": "a", "out": "b", "in_shape": [1, c, hin, hin],
            "out_shape": [1, m, o, o], "wbits": 11,
            "attrs": {"kernel_shape": [3, 3], "strides": [stride, stride], "pads": [1, 1, 1, 1],
                      "dilations": [1, 1], "group": 1}}
    eng_c = CKKSLinear(grp, 13, True, chain, allow_insecure=True)
    eng_s = CKKSLinear(grp, 13, True, chain, allow_insecure=True)
    lay = eng_s._conv_layout(step)
    assert lay is not None and (lay.n_cg > 1 or lay.n_mb > 1)
    assert (lay.T, lay.D) == ((1, 104) if "q380" in chain else (2, 52))
    top = lay.C_b * lay.Hp * lay.Wp - 1 + lay.O + (lay.M_b - 1) * lay.Dm
    if "wide" in chain:         # (the byte-optimal layout depends on the chain)
        assert (top >= eng_s.params.n // 2) == spills
    v0, v1, w0, w1 = (grp.random(prg, (1, c, hin, hin)) for _ in range(4))
    mu = grp.random(prg, ())

    def client(ep):
        eng_c.setup_client(ep)
        return eng_c.client(ep, 1, step, v1, w1, lambda p, i, a: a)

    def server(ep):
        eng_s.setup_server(ep)
        return eng_s.server(ep, 1, step, {"w": w, "b": None}, v0, w0, mu, PRG.for_tests(12))

    res = run_local({"client": client, "server": server}, timeout=600)
    (c_re, c_im, _), (s_re, s_im, _) = res["client"], res["server"]
    np.testing.assert_array_equal(grp.add(c_re, s_re), linops.server_linear(step, w, grp, grp.add(v0, v1)))
    np.testing.assert_array_equal(grp.add(c_im, s_im), linops.server_linear(step, w, grp, grp.add(w0, w1)))


def test_share_halving_matches_big_integers():
    """Malicious: the server computes on 2 c (the proof bounds 2 c), so the answer carries
    C = 2 v - R; the server's share is ceil(R / 2), the client's floor(C / 2), and they add
    up to v mod 2^104 exactly -- checked against Python integers for random R and v,
    both parities; the semi-honest engine keeps R itself."""
    grp = Z2k(104)
    eng = CKKSLinear(grp, 13, True, "ckks-n12-q380-insecure", allow_insecure=True)
    assert eng.ct_factor == 2
    bud = LayerBudget(eng.params, 104, 64, 8, 8, 40)
    neg_r, _, rmask = eng._mask_limbs(bud, PRG.for_tests(3))
    r = [-sum(int(neg_r[l, j]) << (40 * l) for l in range(neg_r.shape[0])) for j in range(neg_r.shape[1])]
    share = [int(x) for x in grp.to_int(rmask)]
    assert {x % 2 for x in r} == {0, 1}
    assert share == [((x + 1) >> 1) % (1 << 104) for x in r]
    rng = np.random.default_rng(4)
    for x, s in zip(r[:200], share[:200]):
        v = int(rng.integers(-2 ** 62, 2 ** 62)) << int(rng.integers(0, 40))
        c = 2 * v - x                                    # what the client decodes
        assert ((c >> 1) + s - v) % (1 << 104) == 0
    honest = CKKSLinear(grp, 13, False, "ckks-n12-q380-insecure", allow_insecure=True)
    neg_r, _, rmask = honest._mask_limbs(bud, PRG.for_tests(3))
    r = [-sum(int(neg_r[l, j]) << (40 * l) for l in range(neg_r.shape[0])) for j in range(neg_r.shape[1])]
    assert [int(x) for x in grp.to_int(rmask)] == [x % (1 << 104) for x in r]


@pytest.mark.parametrize("mal", [False, True])
@pytest.mark.parametrize("k_in,n_out,wbits", [(576, 64, 9), (256, 100, 8), (1024, 10, 10), (16, 4, 5)])
def test_answer_drop_is_exact_and_largest(mal, k_in, n_out, wbits):
    """Budget.drop: after dividing by the dropped primes Q_d, Delta' = Delta / Q_d >= 4 N, so
    the rescale's rounding (<= 1/2 + N/2 with a ternary key) plus the flooded noise
    (<= Delta'/4 (1 + 2^-39)) stays below Delta'/2; Delta >= 2^(phi + 2) and the level's
    range condition still hold; and one prime more could not be dropped at this level."""
    import math

    from secinfer.crypto.he.params import get_params
    from secinfer.protocols.crisp.proof import hardened

    prm = get_params("ckks-n14-q380-128")
    bud = LayerBudget(prm, 104, k_in, n_out, wbits, 40)
    if mal:
        bud = hardened(bud, prm, 40)
    qd = 1
    for lv in range(bud.level - bud.drop + 1, bud.level + 1):
        qd *= prm.q[lv]
    assert (1 << bud.log_delta) >= 4 * prm.n * qd
    assert bud.log_delta >= bud.phi + 2
    log_q = prm.q_level(bud.level).bit_length() - 1
    assert bud.log_delta + bud.B + bud.sigma + 3 <= log_q
    noise = 2.0 ** bud.phi * (1 + 2.0 ** -39) / qd + 0.5 + prm.n / 2
    assert noise < 2.0 ** bud.log_delta / qd / 2
    if bud.level - bud.drop >= 1:          # the next prime would push Delta past the level
        more = math.log2(qd * prm.q[bud.level - bud.drop])
        assert math.ceil(more + math.log2(prm.n) + 2) + bud.B + bud.sigma + 3 > log_q
    assert bud.drop >= 1
