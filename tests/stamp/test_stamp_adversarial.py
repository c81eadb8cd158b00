"""Malicious setting: one deviation per checked step; the honest parties abort with no output."""

import numpy as np
import pytest

from secinfer.errors import ProtocolAbort
from secinfer.ir.graph import Node
from secinfer.protocols.stamp.backend import StampBackend
from secinfer.sharing.replicated import Pair
from stamp_harness import dealer_pairs, run3
from test_stamp_kernels import _rand

RELU = Node("r", "Relu", [], [], {})
GEMM = Node("g", "Gemm", [], [], {})


def _check_aborted(res, adversary, checks):
    honest = [i for i in range(3) if i != adversary]
    seen = set()
    for i in honest:
        r = res[i]
        assert isinstance(r, ProtocolAbort) or r is None, f"honest party {i} returned {r!r}"
        if isinstance(r, ProtocolAbort):
            seen.add(r.check)
    if 1 in honest:
        assert isinstance(res[1], ProtocolAbort), "the input party must abort with no output"
    assert seen & set(checks), f"expected one of {checks}, honest parties saw {seen}"


def _relu_body(x_shares, perturb_input=None):
    def body(i, eng, ops):
        p = x_shares[i]
        if perturb_input == i:
            p = Pair(eng.ring.add(p.a, np.uint64(1)), p.b)
        y = StampBackend(eng, ops).chain(p, [RELU], [[]], p.a.shape)
        return eng.reveal_to(1, y)
    return body


X = _rand((6, 8), 21)


@pytest.mark.covers_check("stamp", "relu-step2")
@pytest.mark.parametrize("adversary", [0, 2])
def test_altered_step2_value(adversary):
    res, _ = run3(_relu_body(dealer_pairs(X)), malicious=True, adversary=adversary, send_tag="stamp/x'")
    _check_aborted(res, adversary, ["relu-step2"])


@pytest.mark.covers_check("stamp", "relu-step5")
@pytest.mark.parametrize("adversary", [1, 2])
def test_altered_value_passed_to_device(adversary):
    res, _ = run3(_relu_body(dealer_pairs(X)), malicious=True, adversary=adversary, device_tamper=True)
    _check_aborted(res, adversary, ["relu-step5"])


@pytest.mark.parametrize("tag", ["stamp/z", "stamp/z^"])
def test_altered_step5_reshare(tag):
    res, _ = run3(_relu_body(dealer_pairs(X)), malicious=True, adversary=0, send_tag=tag)
    _check_aborted(res, 0, ["relu-step5"])


def test_inconsistent_input_shares():
    res, _ = run3(_relu_body(dealer_pairs(X), perturb_input=2), malicious=True)
    _check_aborted(res, 2, ["relu-step2", "reconstruct-consistency"])


@pytest.mark.covers_check("stamp", "reconstruct-consistency")
def test_wrong_share_in_reconstruction():
    res, _ = run3(_relu_body(dealer_pairs(X)), malicious=True, adversary=0, send_tag="rss/reveal")
    _check_aborted(res, 0, ["reconstruct-consistency"])


@pytest.mark.covers_check("stamp", "multiplication-check")
def test_tampered_multiplication():
    """The adversary adds an error to its product component consistently (the copy it sends
    and the copy it keeps agree), so only the triple check can catch it."""
    w = _rand((8, 3), 22, 0.5)
    xs, ws = dealer_pairs(X, 1), dealer_pairs(w, 2)

    def body(i, eng, ops):
        if i == 2:
            honest_zero3 = eng.zero3
            eng.zero3 = lambda shape: eng.ring.add(honest_zero3(shape), np.uint64(1))
        y = StampBackend(eng, ops).product(GEMM, xs[i], ws[i], None, [RELU], [[]], (6, 3))
        return eng.reveal_to(1, y)
    res, _ = run3(body, malicious=True)
    _check_aborted(res, 2, ["multiplication-check"])


def test_inconsistent_reshare_copy():
    w = _rand((8, 3), 22, 0.5)
    xs, ws = dealer_pairs(X, 1), dealer_pairs(w, 2)

    def body(i, eng, ops):
        y = StampBackend(eng, ops).product(GEMM, xs[i], ws[i], None, [RELU], [[]], (6, 3))
        return eng.reveal_to(1, y)
    res, _ = run3(body, malicious=True, adversary=2, send_tag="rss/reshare")
    _check_aborted(res, 2, ["relu-step2", "multiplication-check", "reconstruct-consistency"])


def test_semi_honest_does_not_detect_but_malicious_does():
    """The same deviation passes unnoticed in the semi-honest protocol (it is not checked
    there): the test above is meaningful only because the malicious checks exist."""
    res, _ = run3(_relu_body(dealer_pairs(X)), malicious=False, adversary=0, send_tag="stamp/x'")
    assert not any(isinstance(r, Exception) for r in res.values())
    assert res[1] is not None


@pytest.mark.covers_check("stamp", "softmax-step2")
def test_altered_softmax_step2_value():
    sm = Node("s", "Softmax", ["x"], ["y"], {"axis": 1})
    shares = dealer_pairs(X)

    def body(i, eng, ops):
        y = StampBackend(eng, ops).softmax(shares[i], sm)
        return eng.reveal_to(1, y)
    res, _ = run3(body, malicious=True, adversary=1, send_tag="stamp/exp'")
    _check_aborted(res, 1, ["softmax-step2"])


# ---- shared masked openings: sigma = W - B (weights) and rho = X - A (an activation) ------
def _shared_operand_body(tamper_second=None, tamper_rho_second=None):
    """x @ W and y @ W share W's sigma (opened once by ``prepare``); y feeds two products,
    which share y's rho. ``tamper_second``: that party adds 1 to its product component of
    the second product with W only (consistently), i.e. after sigma has been shared."""
    from types import SimpleNamespace
    w = _rand((8, 3), 22, 0.5)
    y = _rand((6, 8), 23)
    v = _rand((8, 3), 24, 0.5)
    xs, ws, ys, vs = dealer_pairs(X, 1), dealer_pairs(w, 2), dealer_pairs(y, 3), dealer_pairs(v, 4)
    g1 = Node("g1", "Gemm", ["x", "w"], ["h1"], {})
    g2 = Node("g2", "Gemm", ["y", "w"], ["h2"], {})
    g3 = Node("g3", "Gemm", ["y", "v"], ["h3"], {})
    graph = SimpleNamespace(nodes=[g1, g2, g3], weight_info={"w": None, "v": None})

    def body(i, eng, ops):
        be = StampBackend(eng, ops)
        be.prepare(graph, {"w": ws[i], "v": vs[i]})
        h1 = be.product(g1, xs[i], ws[i], None, [RELU], [[]], (6, 3))
        if tamper_second == i:
            honest_zero3 = eng.zero3
            eng.zero3 = lambda shape: eng.ring.add(honest_zero3(shape), np.uint64(1))
        h2 = be.product(g2, ys[i], ws[i], None, [RELU], [[]], (6, 3))
        if tamper_second == i:
            eng.zero3 = honest_zero3
        if tamper_rho_second == i:
            honest_zero3 = eng.zero3
            eng.zero3 = lambda shape: eng.ring.add(honest_zero3(shape), np.uint64(1 << 31))
        h3 = be.product(g3, ys[i], vs[i], None, [RELU], [[]], (6, 3))
        out = eng.reveal_to(1, Pair(np.concatenate([h1.a, h2.a, h3.a]), np.concatenate([h1.b, h2.b, h3.b])))
        return out, dict(be.counts)
    return body, (w, y, v)


def test_shared_sigma_and_rho_honest_run_is_exact():
    from secinfer.arith.fixed import FX32
    from secinfer.ir import fixed_ops
    body, (w, y, v) = _shared_operand_body()
    res, _ = run3(body, malicious=True)
    for r in res.values():
        assert not isinstance(r, Exception), r
    out, counts = res[1]
    ref = np.concatenate([fixed_ops.relu(fixed_ops.gemm(X, w, None, FX32), FX32),
                          fixed_ops.relu(fixed_ops.gemm(y, w, None, FX32), FX32),
                          fixed_ops.relu(fixed_ops.gemm(y, v, None, FX32), FX32)])
    assert np.array_equal(out, ref)
    assert counts["sigma_reused"] == 3 and counts["rho_reused"] == 1


@pytest.mark.parametrize("adversary", [0, 2])
def test_tampered_multiplication_with_shared_sigma(adversary):
    """The error goes into the second product with W, whose check reuses the sigma
    opened for the first (and offline): still caught."""
    body, _ = _shared_operand_body(tamper_second=adversary)
    res, _ = run3(body, malicious=True)
    _check_aborted(res, adversary, ["multiplication-check"])


def test_tampered_multiplication_with_shared_rho():
    """A 2^31 error (the worst case for a check over Z_2^32) in the product that reuses
    the first product's rho = y - A: caught (the LTEE triple makes the check exact)."""
    body, _ = _shared_operand_body(tamper_rho_second=0)
    res, _ = run3(body, malicious=True)
    _check_aborted(res, 0, ["multiplication-check"])


# ---- malicious input sharing through the first product's mask (rho = X - A) -------------
def _masked_input_body(split_rho=False):
    from secinfer.arith.fixed import FX32
    w = _rand((8, 3), 22, 0.5)
    ws = dealer_pairs(w, 2)
    g = Node("g", "Gemm", ["input", "w"], ["h"], {})

    def body(i, eng, ops):
        be = StampBackend(eng, ops)
        if split_rho and i == 1:
            honest_send = eng.send_ring

            def send_ring(peer, tag, *arrays):
                if tag == "stamp/input-rho" and peer == 2:
                    arrays = [eng.ring.add(arrays[0], np.uint64(1))]
                return honest_send(peer, tag, *arrays)
            eng.send_ring = send_ring
        x = be.masked_input(1, X if i == 1 else None, X.shape, "input", 1)
        h = be.product(g, x, ws[i], None, [RELU], [[]], (6, 3))
        return eng.reveal_to(1, h)
    return body, w


def test_masked_input_honest_run_is_exact():
    from secinfer.arith.fixed import FX32
    from secinfer.ir import fixed_ops
    body, w = _masked_input_body()
    res, meters = run3(body, malicious=True)
    for r in res.values():
        assert not isinstance(r, Exception), r
    assert np.array_equal(res[1], fixed_ops.relu(fixed_ops.gemm(X, w, None, FX32), FX32))
    # the owner sent rho = X - A to the two others (2n elements); nobody sent an input share
    assert meters[1][0].total("online", tag_prefix="stamp/input-rho") == 2 * 4 * X.size
    assert sum(m[0].total("online", tag_prefix="rss/input") for m in meters.values()) == 0


@pytest.mark.covers_check("stamp", "input-consistency")
def test_input_owner_sending_two_different_rhos():
    """The input owner (p1) sends p0 and p2 different rho = X - A: they compare hashes
    before anything is revealed."""
    body, _ = _masked_input_body(split_rho=True)
    res, _ = run3(body, malicious=True)
    for i in (0, 2):
        assert isinstance(res[i], ProtocolAbort), res[i]
    assert "input-consistency" in {res[i].check for i in (0, 2)}


@pytest.mark.covers_check("stamp", "ltee-policy")
def test_only_the_owner_device_releases_a_whole_input_mask():
    def body(i, eng, ops):
        return ops.operand("a", "in1/input", (4,), full=True)
    res, _ = run3(body, malicious=True)
    assert isinstance(res[0], ProtocolAbort) and res[0].check == "ltee-policy"
    assert isinstance(res[2], ProtocolAbort) and res[2].check == "ltee-policy"
    pair, whole = res[1]
    assert whole.shape == (4,)


# ---- rho of the next product from the LTEEs of the device step (StampBackend._act_setup) --
def _act_body(tamper_product=None, premultiply=True, tamper_premul=None):
    """relu(x W) feeds the product with V: the ReLU's LTEEs share their result as A + rho
    (A the product's mask), so that product opens no rho. ``premultiply``: f(A, V) is
    re-shared with the ReLU's step 2 (``StampBackend._premultiply``); ``tamper_premul``:
    that party adds 2^31 to its component of f(A, V), consistently (the copy it sends and
    the one it keeps agree)."""
    from types import SimpleNamespace
    w, v = _rand((8, 3), 22, 0.5), _rand((3, 2), 25, 0.5)
    xs, ws, vs = dealer_pairs(X, 1), dealer_pairs(w, 2), dealer_pairs(v, 4)
    g1 = Node("g1", "Gemm", ["x", "w"], ["h"], {})
    relu = Node("r", "Relu", ["h"], ["r"], {})
    g2 = Node("g2", "Gemm", ["r", "v"], ["o"], {})
    graph = SimpleNamespace(nodes=[g1, relu, g2], weight_info={"w": None, "v": None},
                            shapes={"x": (6, 8), "h": (6, 3), "r": (6, 3), "o": (6, 2)},
                            input_names=["x"], output_names=["o"])

    seen = {}

    def body(i, eng, ops):
        be = StampBackend(eng, ops, output_receiver=1, premultiply=premultiply)
        be.prepare(graph, {"w": ws[i], "v": vs[i]})
        if tamper_premul == i:
            honest_send = eng.reshare_send

            def reshare_send(z3, tag, on_recv):
                z3 = z3.copy()
                z3.reshape(-1)[0] = eng.ring.add(z3.reshape(-1)[0], np.uint64(1 << 31))
                return honest_send(z3, tag, on_recv)
            eng.reshare_send = reshare_send
        h = be.product(g1, xs[i], ws[i], None, [relu], [[]], (6, 3))
        if tamper_product == i:
            honest_zero3 = eng.zero3
            eng.zero3 = lambda shape: eng.ring.add(honest_zero3(shape), np.uint64(1 << 31))
        m = eng.ep.meter
        rho0 = m.total("online", tag_prefix="rss/reshare/rho")
        # the last product fused with the opening: the ReLU step is the only rss step
        o = be.product_output(g2, h, vs[i], None, (6, 2))
        seen[i] = (dict(be.counts), m.total("online", tag_prefix="rss/reshare/rho") - rho0)
        return o
    return body, (w, v), seen


@pytest.mark.slow
@pytest.mark.parametrize("premultiply", [True, False])
def test_rho_from_the_device_step_honest_run_is_exact(premultiply):
    from secinfer.arith.fixed import FX32
    from secinfer.ir import fixed_ops
    body, (w, v), seen = _act_body(premultiply=premultiply)
    res, meters = run3(body, malicious=True)
    for r in res.values():
        assert not isinstance(r, Exception), r
    assert np.array_equal(res[1], fixed_ops.gemm(fixed_ops.relu(fixed_ops.gemm(X, w, None, FX32), FX32), v, None, FX32))
    counts = seen[1][0]
    assert counts["rho_from_device"] == 1 and counts["rho_reused"] == 1
    assert counts["premultiplied"] == int(premultiply)
    assert sum(seen[i][1] for i in range(3)) == 0   # the second product opened no rho
    # sigma (prepare, in this harness's one phase) 1, first product's re-share 1, ReLU 2,
    # output step 1; without premultiplying, the second product's re-share and the delta
    # check before the output step are 2 rounds more
    assert max(m[0].rounds("online") for m in meters.values()) == (5 if premultiply else 7)
    if premultiply:   # the second product's re-share travelled with the ReLU's step 2
        assert sum(m[0].total("online", tag_prefix="stamp/premul") for m in meters.values()) == 3 * 4 * 12


def _check_stopped(res, adversary, check):
    """Every honest party stops with no output: an abort (one of them with ``check``), or,
    when it waited for the adversary, which stopped after the abort, a dead peer."""
    from secinfer.errors import PeerDeadError
    honest = [i for i in range(3) if i != adversary]
    for i in honest:
        assert res[i] is None or isinstance(res[i], (ProtocolAbort, PeerDeadError)), f"party {i}: {res[i]!r}"
    if adversary != 1:
        assert isinstance(res[1], (ProtocolAbort, PeerDeadError)), "p1 must stop with no output"
    assert check in {res[i].check for i in honest if isinstance(res[i], ProtocolAbort)}


@pytest.mark.slow
@pytest.mark.parametrize("adversary,tag", [(0, "stamp/rho^"), (2, "stamp/rho^"), (1, "stamp/z")])
def test_altered_rho_or_real_component_from_the_device_step(adversary, tag):
    """The leader forwards rho (from its LTEE), the evaluator A_t + rho: the third party
    compares them, whichever is altered."""
    body, _, _ = _act_body()
    res, _ = run3(body, malicious=True, adversary=adversary, send_tag=tag)
    _check_stopped(res, adversary, "relu-step5")


class _ShiftEvalLink:
    """The host adds 2^20 to every element it passes to its LTEE's evaluations."""

    def __init__(self, link) -> None:
        self._link = link

    def call(self, cmd, *arrays, kind=None):
        if cmd == "eval":
            arrays = list(arrays)
            arrays[2] = arrays[2] + arrays[2].dtype.type(1 << 20)
        return self._link.call(cmd, *arrays, kind=kind)

    def __getattr__(self, name):
        return getattr(self._link, name)


@pytest.mark.parametrize("adversary", [0, 1, 2])
def test_altered_value_passed_to_the_device_with_rho(adversary):
    """Each party is the evaluator of one job and the leader of another: altering what it
    passes to its LTEE changes one of the two evaluations, and the third party sees it."""
    body, _, _ = _act_body()

    def shifted(i, eng, ops):
        if i == adversary:
            ops.link = _ShiftEvalLink(ops.link)
        return body(i, eng, ops)
    res, _ = run3(shifted, malicious=True)
    _check_stopped(res, adversary, "relu-step5")


def test_tampered_multiplication_with_rho_from_the_device():
    """A 2^31 error in the product whose rho came from the LTEEs: caught by the check."""
    body, _, _ = _act_body(tamper_product=2, premultiply=False)
    res, _ = run3(body, malicious=True)
    _check_stopped(res, 2, "multiplication-check")


# ---- premultiplied products: f(A, W) re-shared before x = A + rho exists ----------------
@pytest.mark.parametrize("adversary", [0, 1, 2])
def test_tampered_premultiplied_product(adversary):
    """A consistent 2^31 error in a party's component of the premultiplied f(A, V): the
    triple check catches it -- with the ReLU step's own messages, so the honest parties
    abort before the output step and p1 gets nothing (also when p1 is the adversary)."""
    body, _, _ = _act_body(tamper_premul=adversary)
    res, _ = run3(body, malicious=True)
    _check_stopped(res, adversary, "multiplication-check")
    for i in range(3):   # nobody reached the output step
        if i != adversary:
            assert not (isinstance(res[i], np.ndarray)), res[i]


@pytest.mark.parametrize("adversary", [0, 2])
def test_inconsistent_premultiplied_copy(adversary):
    """The re-shared f(A, V) altered on the wire only (the sender keeps the honest copy)."""
    body, _, _ = _act_body()
    res, _ = run3(body, malicious=True, adversary=adversary, send_tag="stamp/premul")
    _check_stopped(res, adversary, "multiplication-check")


@pytest.mark.slow
@pytest.mark.parametrize("adversary", [0, 1, 2])
def test_altered_delta_hash_riding_on_step5(adversary):
    """The hash of the pending deltas (sent with the ReLU's step-5 messages) altered: its
    receiver aborts before the output step."""
    body, _, _ = _act_body()
    res, _ = run3(body, malicious=True, adversary=adversary, send_tag="rss/mcheck")
    _check_stopped(res, adversary, "multiplication-check")


def test_activation_masks_policy():
    """An activation mask is for the malicious replicated path only, and its segments must
    cover exactly the operand."""
    from secinfer.protocols.stamp.ltee import LteeRefused, spec_bytes
    spec = {"shape": [2, 3], "out_shape": [2, 3], "params": [], "steps": [], "act": 1}

    def body(i, eng, ops):
        if i != 0:
            return None
        codes = []
        for args in (("eval", np.array([1, 54, 0, 0, 0, 0], np.int64), spec_bytes(spec), np.zeros(6, np.uint32)),
                     ("operand", np.array([1, 54, 0, 0], np.int64),
                      spec_bytes({"which": "a", "a_id": "act/1", "shape": [2, 3], "a_seg": [[0, 0, 5]]}))):
            try:
                ops.link.call(*args)
                codes.append("served")
            except LteeRefused as r:
                codes.append(r.code)
        return codes
    res, _ = run3(body)
    assert res[0] == ["policy", "bad-request"]


# ---- sibling products (one input, several weights): verified re-shares in one round -----
def _siblings_body(tamper=None):
    from types import SimpleNamespace
    w1, w2 = _rand((8, 3), 22, 0.5), _rand((8, 4), 23, 0.5)
    xs, w1s, w2s = dealer_pairs(X, 1), dealer_pairs(w1, 2), dealer_pairs(w2, 3)
    g1, g2 = Node("g1", "Gemm", ["x", "w1"], ["h1"], {}), Node("g2", "Gemm", ["x", "w2"], ["h2"], {})
    graph = SimpleNamespace(nodes=[g1, g2], weight_info={"w1": None, "w2": None},
                            shapes={"x": (6, 8), "h1": (6, 3), "h2": (6, 4)}, input_names=[], output_names=["h1", "h2"])

    def body(i, eng, ops):
        be = StampBackend(eng, ops)
        be.prepare(graph, {"w1": w1s[i], "w2": w2s[i]})
        if tamper == i:
            honest_zero3 = eng.zero3
            eng.zero3 = lambda shape: eng.ring.add(honest_zero3(shape), np.uint64(1 << 31))
        m = eng.ep.meter
        r0 = m.rounds("online")
        ys = be.products([(g1, xs[i], w1s[i], None, [RELU], [[]], (6, 3)),
                          (g2, xs[i], w2s[i], None, [RELU], [[]], (6, 4))])
        rounds = m.rounds("online") - r0
        out = [eng.reveal_to(1, y) for y in ys]
        return out, rounds, m.total("online", tag_prefix="rss/reshare/rho"), dict(be.counts)
    return body, (w1, w2)


def test_sibling_products_honest_run_is_exact_in_one_device_step():
    """Two products of one input: both re-shares (and the one rho opening) in one round,
    both device steps in one operation: 3 rounds for the two products."""
    from secinfer.arith.fixed import FX32
    from secinfer.ir import fixed_ops
    body, (w1, w2) = _siblings_body()
    res, _ = run3(body, malicious=True)
    for r in res.values():
        assert not isinstance(r, Exception), r
    (y1, y2), rounds, rho_bytes, counts = res[1]
    assert np.array_equal(y1, fixed_ops.relu(fixed_ops.gemm(X, w1, None, FX32), FX32))
    assert np.array_equal(y2, fixed_ops.relu(fixed_ops.gemm(X, w2, None, FX32), FX32))
    assert max(res[i][1] for i in range(3)) == 3
    assert counts["rho_reused"] == 1 and counts["device_calls"] == 1
    # x's rho opened once: one copy and one hash per party
    assert sum(res[i][2] for i in range(3)) == 3 * 4 * X.size + 3 * 32


@pytest.mark.slow
@pytest.mark.parametrize("adversary", [0, 1, 2])
def test_tampered_sibling_products(adversary):
    body, _ = _siblings_body(tamper=adversary)
    res, _ = run3(body, malicious=True)
    _check_aborted(res, adversary, ["multiplication-check"])


class _WithholdingLink:
    """An LTEE that withholds the stream seeds of its zero-sharing (all zero bytes)."""

    def __init__(self, link) -> None:
        self._link, self.withheld = link, 0

    def call(self, cmd, *arrays, kind=None):
        out = self._link.call(cmd, *arrays, kind=kind)
        if cmd == "zshare":
            self.withheld += 1
            return [np.zeros_like(a) for a in out]
        return out

    def call_many(self, requests):     # the seed requests of one device operation, batched
        outs = self._link.call_many(requests)
        for k, (cmd, _, _) in enumerate(requests):
            if cmd == "zshare":
                self.withheld += 1
                outs[k] = [np.zeros_like(a) for a in outs[k]]
        return outs

    def __getattr__(self, name):
        return getattr(self._link, name)


@pytest.mark.covers_check("stamp", "ltee-seed")
def test_a_withheld_seed_aborts():
    """Beyond the threat model (the devices are trusted): a zero-sharing whose seeds the
    device withheld must make its host abort, not compute with zero seeds."""
    links = {}

    def body(i, eng, ops):
        if i == 2:
            ops.link = links[i] = _WithholdingLink(ops.link)
        return _relu_body(dealer_pairs(X))(i, eng, ops)
    res, _ = run3(body, malicious=True)
    assert links[2].withheld
    assert isinstance(res[2], ProtocolAbort) and res[2].check == "ltee-seed"
