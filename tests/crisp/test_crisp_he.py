"""CRISP with the HE linear layer (Lattigo CKKS ciphertexts, exact complex packing)."""

from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest

from secinfer.arith.fixed import FX64
from secinfer.arith.ring import Ring
from secinfer.crypto.prg import PRG
from secinfer.errors import FrameError, PeerAbortedError, ProtocolAbort
from secinfer.ir import bundled, zoo
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.fixed_ops import encode_weights
from secinfer.ir.onnx_import import load_model
from secinfer.net.channel import run_local
from secinfer.protocols.crisp import lifted
from secinfer.protocols.crisp.ckks_engine import CKKSLinear, LayerBudget
from secinfer.protocols.twopc.plan import LinearWeights

sys.path.insert(0, os.path.dirname(__file__))
from crisp_helpers import Adversary, add_at, lin_step, replace_frame, run_crisp  # noqa: E402

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


@pytest.mark.covers_check("crisp", "crisp-consistency")
def test_he_share_deviation_aborts():
    res = run_crisp(MLP, X[:1], "malicious", linear="ckks", extra=HE_TEST,
                    adversary=add_at("c3re", step=4, index=3))
    assert isinstance(res["server"], ProtocolAbort) and res["server"].check == "crisp-consistency"
    assert isinstance(res["client"], PeerAbortedError)


@pytest.mark.parametrize("bad", ["garbage", "truncated", "other-params"])
def test_malformed_ciphertext_rejected_before_computation(bad):
    def corrupt(raw):
        if bad == "garbage":
            return np.zeros_like(raw)
        if bad == "truncated":
            return raw[: len(raw) // 2]
        from secinfer.crypto.he.params import get_params
        other = get_params("ckks-n11-insecure")
        kp = other.keygen()
        return np.frombuffer(other.encrypt(np.zeros(4), kp.pk).to_bytes(), np.uint8)

    res = run_crisp(MLP, X[:1], "malicious", linear="ckks", extra=HE_TEST,
                    adversary=replace_frame(r"crisp/lin/2/ct", corrupt, once=True))
    assert isinstance(res["server"], FrameError), res["server"]
    assert "ciphertext rejected" in str(res["server"])


def test_production_parameters_refuse_nothing_and_insecure_need_opt_in():
    from secinfer.errors import InsecureParametersError
    with pytest.raises(InsecureParametersError):
        CKKSLinear(Ring(104), 13, True, "ckks-n12-insecure")


@pytest.mark.slow
@pytest.mark.parametrize("pname,digits", [("ckks-n14-q380-128", (104, 1)), ("ckks-n14-128", (104, 1))])
def test_largest_muse_b_layer_exact_at_production_parameters(pname, digits):
    """CKKS-in-Z_2^n: the 64x(64*3*3) convolution of benchmark B (its largest layer by
    weights per output), at the 128-bit sets (one digit: the plaintext modulus t does not
    depend on the digit size), on uniform shares in the lifted ring Z_2^104: the decrypted
    values are the exact ring shares, the answers' noise stays within the bound their drop
    was sized for, and the level's modulus holds 2 t nu0."""
    g = load_model(zoo.build("muse-b", seed=0))
    w = FX64.ring.to_signed(encode_weights(g, FX64)["conv_w1"]).reshape(64, -1).T  # (576, 64)
    grp = Ring(104)
    rows = 1
    wbits = int(np.max(np.abs(w))).bit_length()
    step = lin_step({"op": "lin", "node_op": "Gemm", "name": "muse-b/conv1-rows", "in_shape": [rows, 576],
            "out_shape": [rows, 64], "wbits": wbits, "attrs": {}})
    prg = PRG.for_tests(7)
    v0, v1, w0, w1 = (grp.random(prg, (rows, 576)) for _ in range(4))
    mu = grp.random(prg, ())
    eng_c = CKKSLinear(grp, 13, True, pname)
    eng_s = CKKSLinear(grp, 13, True, pname)
    from secinfer.protocols.crisp.proof import hardened

    bud = hardened(LayerBudget(eng_s.params, 104, 576, 64, wbits, 40), eng_s.params, 40)
    assert 2 * bud.t * bud.nu0 < eng_s.params.q_level(bud.level)
    assert (bud.D, bud.T) == digits

    def client(ep):
        eng_c.setup_client(ep)
        return eng_c.client(ep, 1, step, v1, w1)

    def server(ep):
        eng_s.setup_server(ep)
        return eng_s.server(ep, 1, step, LinearWeights(w), v0, w0, mu, PRG.for_tests(8))

    res = run_local({"client": client, "server": server}, timeout=600)
    (c_re, c_im, _), (s_re, s_im, _) = res["client"], res["server"]
    exact_re = lifted.matmul_signed(grp, grp.add(v0, v1), w)
    exact_im = lifted.matmul_signed(grp, grp.add(w0, w1), w)
    np.testing.assert_array_equal(grp.add(c_re, s_re), exact_re)
    np.testing.assert_array_equal(grp.add(c_im, s_im), exact_im)
    st = eng_c.stats
    prm = eng_s.params
    assert st["log2_answer_modulus"] == prm.q_level(bud.level - bud.drop).bit_length()
    # the answers' noise |e'| (Y = U' + t e') stays within the bound the drop was sized for,
    # which leaves decryption a factor > 2 of room: 2 t nu < Q'
    nu = bud.answer_bound(bud.drop, bud.nu0)
    assert 2.0 ** st["max_log2_noise"] <= float(nu)
    assert 2 * bud.t * nu < prm.q_level(bud.level - bud.drop)


@pytest.mark.slow
@pytest.mark.parametrize("chain", CHAINS)
@pytest.mark.parametrize("c,m,hin,stride,spills", [(12, 3, 9, 2, True), (2, 9, 9, 2, False),
                                                    (6, 20, 13, 1, True)])
def test_channel_packed_conv_exact(c, m, hin, stride, spills, chain):
    """Packed convolution (several channel groups, or several output blocks), padding 1, on
    uniform Z_2^104 shares: shares reconstruct to the exact convolution, real and MAC half.
    ``spills`` (300-bit chain): the chosen layout's product runs past N/2 (he_conv.spill_ok), so a wrong
    feasibility rule would mix the halves at the targets and break one of them."""
    from secinfer.protocols.crisp import linops

    grp = Ring(104)
    prg = PRG.for_tests(11)
    w = (prg.uint64((m, c, 3, 3)).astype(np.int64) % 4001) - 2000
    o = (hin - 1) // stride + 1
    step = lin_step({"op": "lin", "node_op": "Conv", "name": "conv", "in": "a", "out": "b", "in_shape": [1, c, hin, hin],
            "out_shape": [1, m, o, o], "wbits": 11,
            "attrs": {"kernel_shape": [3, 3], "strides": [stride, stride], "pads": [1, 1, 1, 1],
                      "dilations": [1, 1], "group": 1}})
    eng_c = CKKSLinear(grp, 13, True, chain, allow_insecure=True)
    eng_s = CKKSLinear(grp, 13, True, chain, allow_insecure=True)
    lay = eng_s.conv_layout(step)
    assert lay is not None and (lay.n_cg > 1 or lay.n_mb > 1)
    assert (lay.T, lay.D) == (1, 104)
    top = lay.C_b * lay.Hp * lay.Wp - 1 + lay.O + (lay.M_b - 1) * lay.Dm
    if "wide" in chain:         # (the byte-optimal layout depends on the chain)
        assert (top >= eng_s.params.n // 2) == spills
    v0, v1, w0, w1 = (grp.random(prg, (1, c, hin, hin)) for _ in range(4))
    mu = grp.random(prg, ())

    def client(ep):
        eng_c.setup_client(ep)
        return eng_c.client(ep, 1, step, v1, w1)

    def server(ep):
        eng_s.setup_server(ep)
        return eng_s.server(ep, 1, step, LinearWeights(w), v0, w0, mu, PRG.for_tests(12))

    res = run_local({"client": client, "server": server}, timeout=600)
    (c_re, c_im, _), (s_re, s_im, _) = res["client"], res["server"]
    np.testing.assert_array_equal(grp.add(c_re, s_re), linops.server_linear(step, w, grp, grp.add(v0, v1)))
    np.testing.assert_array_equal(grp.add(c_im, s_im), linops.server_linear(step, w, grp, grp.add(w0, w1)))


def test_share_halving_matches_big_integers():
    """Malicious: the server computes on 2 c (the proof bounds 2 c), so with t = 2^105 the
    answer carries U = (2 v - R) mod t; the server's share is ceil(R / 2), the client's
    floor(U / 2), and they add up to v mod 2^104 exactly -- checked against Python integers
    for random R and v, both parities; the semi-honest engine (t = 2^104) keeps R itself."""
    from secinfer.protocols.crisp.proof import hardened

    grp = Ring(104)
    eng = CKKSLinear(grp, 13, True, "ckks-n12-q380-insecure", allow_insecure=True)
    assert eng.ct_factor == 2
    bud = hardened(LayerBudget(eng.params, 104, 64, 8, 8, 40), eng.params, 40)
    assert bud.t == 1 << 105
    neg_r, _, rmask = eng._mask_limbs(bud, PRG.for_tests(3))
    r = [-sum(int(neg_r[l, j]) << (40 * l) for l in range(neg_r.shape[0])) for j in range(neg_r.shape[1])]
    share = [int(x) for x in grp.to_int(rmask)]
    assert {x % 2 for x in r} == {0, 1} and max(r) >= 1 << 104 and min(r) >= 0
    assert share == [((x + 1) >> 1) % (1 << 104) for x in r]
    rng = np.random.default_rng(4)
    for x, s in zip(r[:200], share[:200]):
        v = int(rng.integers(-2 ** 62, 2 ** 62)) << int(rng.integers(0, 60))
        u = (2 * v - x) % bud.t                          # what the client decodes
        assert ((u >> 1) + s - v) % (1 << 104) == 0
    honest = CKKSLinear(grp, 13, False, "ckks-n12-q380-insecure", allow_insecure=True)
    bud = LayerBudget(eng.params, 104, 64, 8, 8, 40)
    neg_r, _, rmask = honest._mask_limbs(bud, PRG.for_tests(3))
    r = [-sum(int(neg_r[l, j]) << (40 * l) for l in range(neg_r.shape[0])) for j in range(neg_r.shape[1])]
    assert max(r) < 1 << 104 and [int(x) for x in grp.to_int(rmask)] == r
    with pytest.raises(Exception, match="plaintext modulus"):   # a budget of the other kind
        eng._mask_limbs(bud, PRG.for_tests(3))


def _budget(mal, k_in, n_out, wbits):
    from secinfer.crypto.he.params import get_params
    from secinfer.protocols.crisp.proof import hardened

    prm = get_params("ckks-n14-q380-128")
    bud = LayerBudget(prm, 104, k_in, n_out, wbits, 40)
    return prm, (hardened(bud, prm, 40) if mal else bud)


LAYERS = [(576, 64, 9), (256, 100, 8), (1024, 10, 10), (16, 4, 5)]


@pytest.mark.parametrize("mal", [False, True])
@pytest.mark.parametrize("k_in,n_out,wbits", LAYERS)
def test_answer_drop_is_exact_and_largest(mal, k_in, n_out, wbits):
    """Budget, recomputed from its definitions with a closed form: F (2^phi) floods
    K + E_w + the mask's own noise 2^(sigma + 24) times over (2^-sigma over <= 2^24 read
    coefficients per inference); the level is the lowest whose modulus
    Q holds 2 t nu0 (nu0 = 1 + 2^phi + that noise: |U + t e| < t nu0); after dividing by the
    dropped primes Q_d, |Y| <= t (nu0 / Q_d + (N + 1)/2 (1 + 2^-38)) < Q'/2 (Lattigo's
    rounding adds <= t (1 + N)/2 per prime with a ternary key); and one prime more could
    not be dropped."""
    from fractions import Fraction

    from secinfer.crypto.zk import keyproof

    prm, bud = _budget(mal, k_in, n_out, wbits)
    n, t = prm.n, bud.t
    fresh = keyproof.ProvenBounds(n, 40).noise_bound() if mal else (2 * n + 1) * 19.2
    assert bud.t_bits == 104 + mal and (bud.D, bud.T) == (104, 1)
    pre = 2 ** (bud.B - bud.t_bits) + 2 + 2 ** bud.noise_bits + fresh
    # 2^-sigma over the whole view: per read coefficient 2^-(sigma + 24), <= 2^24 of them
    assert 2 ** bud.phi >= 2 ** (bud.sigma + 24) * pre
    nu0 = 1 + 2 ** bud.phi + math.ceil(pre)
    q = prm.q_level(bud.level)
    assert 2 * t * nu0 < q
    assert bud.level == 0 or 2 * t * nu0 >= prm.q_level(bud.level - 1)
    qd = q // prm.q_level(bud.level - bud.drop)
    q_out = q // qd
    slack = Fraction(n + 1, 2) * (1 + Fraction(1, 1 << 38))
    assert 2 * t * (Fraction(nu0, qd) + slack) < q_out
    if bud.level - bud.drop >= 1:
        nxt = prm.q[bud.level - bud.drop]
        assert 2 * t * (Fraction(nu0, qd * nxt) + Fraction(n + 1, 2)) >= q_out // nxt
    assert bud.drop >= 1


def test_plan_reading_more_flooded_coefficients_than_budgeted_is_refused():
    """The flooding's union bound covers 2^24 read coefficients per inference: a plan whose
    linear outputs (x2 with MACs) exceed that is refused before any work."""
    from secinfer.errors import ConfigError
    from secinfer.protocols.crisp.budget import FLOOD_UNION_BITS

    eng = CKKSLinear(Ring(104), 13, True, "ckks-n12-q380-insecure", allow_insecure=True)
    step = lin_step({"op": "lin", "node_op": "Gemm", "name": "wide", "in_shape": [1 << 13, 8],
            "out_shape": [1 << 13, 1 << 11], "wbits": 8, "attrs": {}})
    with pytest.raises(ConfigError, match="flooded coefficients"):
        eng.prepare_server([step], {0: LinearWeights(np.zeros((8, 1 << 11), np.int64))}, PRG.for_tests(1))
    assert FLOOD_UNION_BITS == 24 and (1 << 13) * (1 << 11) * 2 > 1 << FLOOD_UNION_BITS


@pytest.mark.parametrize("mal", [False, True])
def test_decode_is_exact_up_to_the_bound_and_not_beyond(mal):
    """decode_residues on synthetic answers at the edge: for U uniform in Z_t and noise e
    with |U' + t e| just below Q'/2 (U' = U Q_d^-1 mod t, what the drop leaves), the phase
    t'^-1 (U' + t e) mod Q' decodes to the exact share (U, or floor(U / 2) with the factor
    2); just beyond Q'/2 it does not (the test can fail)."""

    prm, bud = _budget(mal, 576, 64, 9)
    eng = CKKSLinear(Ring(104), 13, mal, "ckks-n14-q380-128")
    lv = bud.level - bud.drop
    q_out, t = prm.q_level(lv), bud.t
    qd = prm.q_level(bud.level) // q_out
    rng = np.random.default_rng(9)
    cnt = 64
    us = [int.from_bytes(rng.bytes(14), "little") % t for _ in range(cnt)]
    half = 2 if mal else 1
    pos = np.arange(cnt)

    def decode(edge):
        ys = []
        for j in range(half * cnt):
            u1 = us[j % cnt] * pow(qd, -1, t) % t
            e = (edge - u1) // t if j % 2 else -((edge + u1) // t)
            ys.append(u1 + t * e)
        assert max(abs(y) for y in ys) < edge + t
        phase = [y * pow(t, -1, q_out) % q_out for y in ys]
        res = np.array([[p % prm.q[i] for p in phase] for i in range(lv + 1)], dtype=np.uint64)
        return eng.decode_residues(res, bud, pos)

    want = [(u >> 1) if mal else u for u in us]
    got = decode(q_out // 2 - t)
    for h in range(half):
        assert [int(x) for x in eng.g.to_int(got[h])] == [w % (1 << 104) for w in want]
    bad = decode(q_out // 2 + 4 * t)
    assert [int(x) for x in eng.g.to_int(bad[0])] != [w % (1 << 104) for w in want]


@pytest.mark.parametrize("security", ["malicious", "semi-honest"])
def test_batch_uses_the_batched_row_layout_exactly_and_input_layer_offline(security):
    """Six samples: the first Gemm (64 -> 32) gets the batched row layout (several input
    chunks, several output blocks, several rows per polynomial; checked), the output equals
    the oracle bit for bit, and the HE part of the layer on the input (the Mul, step 1) is
    sent before the client's masked input (the offline phase), the Gemm's after it."""
    from secinfer.crypto.he.params import get_params

    x = X[40:46]
    prm = get_params(HE_TEST["he_params"])
    span = prm.n // 2 if security == "malicious" else prm.n
    bud = LayerBudget(prm, 104, 64, 32, 9, 40, len(x), span)
    assert bud.n_chunks > 1 and bud.n_blocks > 1 and bud.rows_per > 1
    spy = Adversary(spy=True)
    res = run_crisp(MLP, x, security, linear="ckks", extra=HE_TEST, adversary=spy)
    assert not isinstance(res["server"], BaseException), res["server"]
    np.testing.assert_array_equal(res["client"].output_ring, run_fixed(MLP, x, FX64))
    sent = spy.sent
    first_in = sent.index("crisp/input")
    assert "crisp/lin/1/ct" in sent[:first_in] and "crisp/lin/1/ct" not in sent[first_in:]
    assert "crisp/lin/2/ct" in sent[first_in:] and "crisp/lin/2/ct" not in sent[:first_in]
    assert "he_input_layers" in res["client"].info["offline_seconds"]


LAYOUT_CASES = [(784, 128, 128), (128, 128, 128), (128, 10, 128), (100, 30, 7), (576, 64, 1), (64, 10, 3)]


@pytest.mark.parametrize("mal", [False, True])
@pytest.mark.parametrize("k_in,n_out,n_rows", LAYOUT_CASES)
def test_batched_row_layout_fits_its_span_and_the_budget_follows_it(mal, k_in, n_out, n_rows):
    """The row layout chosen for n_rows rows (``choose_rows_layout``): every product of a
    row group ends below the span (N/2 with the MAC half, N without: no overlap with the MAC
    half, no wrap around X^N), the targets are distinct, one row (or as many as the
    single-sample layout holds) keeps the single-sample layout, no layout of the search
    space costs less, and the budget's B and noise_bits follow from the chosen
    (c, n_chunks, n_o) in closed form, so the level / drop argument of
    ``test_answer_drop_is_exact_and_largest`` applies unchanged."""
    from secinfer.crypto.he.params import get_params
    from secinfer.crypto.zk import keyproof
    from secinfer.protocols.crisp import budget as bm
    from secinfer.protocols.crisp.he_rows import targets
    from secinfer.protocols.crisp.proof import hardened

    prm = get_params("ckks-n14-q380-128")
    span = prm.n // 2 if mal else prm.n
    wbits = 12
    bud = LayerBudget(prm, 104, k_in, n_out, wbits, 40, n_rows, span)
    bud = hardened(bud, prm, 40) if mal else bud
    c, n_o = bud.c, bud.n_o
    # geometry: the last row's product (input degree < c, weight degree < c n_o) ends below span
    assert bud.S == c * (n_o + 1) and (bud.rows_per - 1) * bud.S + c - 1 + c * n_o - 1 < span
    assert bud.n_chunks == -(-k_in // c) and bud.n_blocks == -(-n_out // n_o)
    _, _, pos = targets(bud, n_rows, 0, 0, n_out)
    assert pos.size == np.unique(pos).size and pos.max() < span
    c1, n1 = bm.single_rows_layout(span, k_in, n_out)
    if n_rows <= span // (c1 * (n1 + 1)):
        assert (c, n_o) == (c1, n1)
    else:
        base = bm.Budget(prm, 104, c1 * -(-k_in // c1), c1 * n1, -(-k_in // c1), wbits, 40)
        args = (prm, base.level, base.drop, k_in, n_out, n_rows)     # what the choice weighs
        best = bm.rows_layout_cost(*args, c, n_o, span)
        cap = max(bm.MAX_WEIGHT_POLYS, bm.rows_layout_cost(*args, c1, n1, span)[1])
        assert best[1] <= cap and best[0] <= bm.rows_layout_cost(*args, c1, n1, span)[0]
        for cc in range(1, min(k_in, span // 2) + 1, 7):            # a sample of the space
            for nn in range(1, n_out + 1, 5):
                if cc * (nn + 1) <= span:
                    cost, pts = bm.rows_layout_cost(*args, cc, nn, span)
                    assert pts > cap or cost >= best[0] * (1 - 1e-6)
    # the budget from the chosen layout, in closed form
    if mal:
        pb = keyproof.ProvenBounds(prm.n, 40)
        fresh, extra = pb.noise_bound(), pb.m_extra_bits
    else:
        fresh, extra = (2 * prm.n + 1) * 19.2, 0
    b = lambda v: max(1, math.ceil(math.log2(max(v, 1))))               # noqa: E731
    assert bud.B == b(c * bud.n_chunks) + bud.D + extra + wbits + 1
    assert bud.noise_bits == b(fresh) + b(c * n_o) + wbits + b(bud.n_chunks)
    assert 2 * bud.t * bud.nu0 < prm.q_level(bud.level) and bud.decodable(bud.drop)
