"""CRISP's proof of plaintext knowledge for the client's ciphertexts [Fig. 2 note a],
end to end: honest runs stay exact, every kind of malformed ciphertext or proof message
makes the server abort (check ``crisp-popk``) before it answers, and the client gets
nothing."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from secinfer.arith.fixed import FX64
from secinfer.crypto.he.evaluator import Evaluator
from secinfer.crypto.he.rlwe import coeff_encode
from secinfer.errors import FrameError, PeerAbortedError, ProtocolAbort
from secinfer.ir import bundled
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model

sys.path.insert(0, os.path.dirname(__file__))
from crisp_helpers import Adversary, run_crisp  # noqa: E402

HE = {"he_params": "ckks-n12-wide-insecure", "allow_insecure_he": True}
MLP = load_model(bundled.bundled_path("digits-mlp"))
CNN = load_model(bundled.bundled_path("digits-cnn"))
X, _ = bundled.bundled_testset("digits-mlp")


def _forced(adv: Adversary) -> Adversary:
    """The client's ciphertext prover sends its responses even when they are out of range
    (a cheating prover); the key proof stays honest."""
    from secinfer.crypto.zk import keyproof, popk

    def wrap(orig):
        def respond(self, seed, force=False):
            return orig(self, seed, force=force or not isinstance(self, keyproof.KeyProver))
        return respond
    return adv.patch(popk.Prover, "respond", wrap)


def _ct_once(fn, force=False) -> Adversary:
    """Replace the client's first ciphertext and its proof witness by ``fn((ct, witness))``
    (the client's encryption, patched for this run); optionally a cheating prover."""
    from secinfer.protocols.crisp.he_core import HECore

    adv = Adversary()

    def wrap(orig):
        def encrypt(self, poly, bud):
            out = orig(self, poly, bud)
            if adv.fired == 0 and out[1] is not None:
                adv.fired += 1
                return fn(out)
            return out
        return encrypt
    adv.patch(HECore, "encrypt", wrap)
    return _forced(adv) if force else adv


def _popk_frame_once(what: str, fn) -> Adversary:
    """Rewrite the bytes of the client's first proof message ``what`` (h, or a z that is not
    a restart)."""
    def rule(arrays):
        if arrays[0].size == 1 and arrays[0][0] == 0:
            return None
        out = fn(arrays[0].tobytes())
        return [np.frombuffer(out, np.uint8)]
    return Adversary().on_send(rf"crisp/lin/\d+/popk/\d+\.\d+/{what}\d+", rule, once=True)


def _add_plain(ct, pos, value):
    """ct + (value at coefficient pos, in c0): scale-Delta plaintext, exact."""
    vals = np.zeros(ct.params.n)
    vals[pos] = value / 2.0 ** ct.log_scale
    with coeff_encode(ct.params, vals, 2.0 ** ct.log_scale, ct.level) as pt:
        out = Evaluator(ct.params).add(ct, pt)
    ct.close()
    return out


def _add_message(ct, pos, x):
    """ct + an encryption-free Delta x at coefficient pos (Delta = t^-1 mod Q, the crisp
    engine's encoding with t = 2^105 in the malicious lifted ring Z_2^104): the ciphertext
    then really encrypts a message changed by x there."""
    from secinfer.crypto.he.linmap import to_limbs
    from secinfer.crypto.he.rlwe import encode_limbs

    prm = ct.params
    vals = np.zeros(prm.n, dtype=object)
    vals[pos] = x
    delta = pow(1 << 105, -1, prm.q_level(ct.level))
    with encode_limbs(prm, to_limbs(vals, 4), np.zeros((1, prm.n), np.int64), 0, ct.level, delta=delta) as pt:
        out = Evaluator(prm).add(ct, pt)
    ct.close()
    return out


def _assert_popk_abort(res):
    assert isinstance(res["server"], ProtocolAbort), res["server"]
    assert res["server"].check == "crisp-popk" and res["server"].suspect == "client"
    assert isinstance(res["client"], BaseException)       # no output for the client


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_honest_runs_pass_the_proof_and_stay_exact(model):
    g, x = (MLP, X[20:22]) if model == "mlp" else (CNN, X[30:32])
    res = run_crisp(g, x, "malicious", linear="ckks", extra=HE)
    assert not isinstance(res["server"], BaseException), res["server"]
    np.testing.assert_array_equal(res["client"].output_ring, run_fixed(g, x, FX64))
    assert "missing" not in res["client"].info and "missing" not in res["server"].info


POS = 20      # a coefficient of the first layer's real half whose input has non-zero weights


def _digit(bits):
    """One digit raised by 2^bits + 1 (odd: a real change of the share in Z_2^n, whatever
    the weight; the ciphertext really encrypts it); the cheater's witness says so when its
    limbs can hold it, else it keeps the honest one."""
    def fn(a):
        ct, (m, u, e0, e1) = a
        m = m.copy()
        if m.ndim == 2 and bits // 40 < m.shape[0]:   # 40-bit limbs (digits beyond int64)
            m[0, POS] += 1
            m[bits // 40, POS] += 1 << (bits % 40)
        elif m.ndim == 1 and bits < 62:
            m[POS] += (1 << bits) + 1
        return _add_message(ct, POS, (1 << bits) + 1), [m, u, e0, e1]
    return fn


def _noise(bits):
    """e0 raised by 2^bits in one coefficient, witness consistent."""
    def fn(a):
        ct, (m, u, e0, e1) = a
        e0 = e0.copy()
        e0[5] += 1 << bits
        return _add_plain(ct, 5, 2.0 ** bits), [m, u, e0, e1]
    return fn


def _random_ct(a):                # c * r for a random polynomial r: no short preimage known
    ct, w = a
    rng = np.random.default_rng(5)
    r = rng.integers(0, 1 << 40, ct.params.n).astype(np.float64)
    with coeff_encode(ct.params, r, 1.0, ct.level) as pt:
        out = Evaluator(ct.params).mul(ct, pt, relin=False)
    ct.close()
    return out, w


@pytest.mark.covers_check("crisp", "crisp-popk")
@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("bad", ["digit-2^160", "noise-2^42", "random"])
def test_malformed_client_ciphertext_aborts(bad, force):
    # e0 is rounded away in the proof: it is proven below the rounding prime q_r < 2^41
    # (popk.E0_PROVEN), so the noise that must abort is above that
    fn = {"digit-2^160": _digit(160), "noise-2^42": _noise(42), "random": _random_ct}[bad]
    res = run_crisp(MLP, X[:1], "malicious", linear="ckks", extra=HE, adversary=_ct_once(fn, force))
    _assert_popk_abort(res)


def test_dishonest_but_provable_values_are_harmless():
    """Within the soundness slack the proof accepts (by design); the budget is sized for
    the proven bounds, so a larger noise still decrypts exactly, and a changed digit is a
    changed share, which the MAC check catches."""
    # e0 is rounded away: |e0| is proven below q_r ~ 2^40; a spike of 2^33 still passes
    # the prover's band check on most attempts (a row keeps its high part unless the low
    # part is within 2^33 of the block's end)
    for bits in (20, 33):
        res = run_crisp(MLP, X[:1], "malicious", linear="ckks", extra=HE, adversary=_ct_once(_noise(bits)))
        assert not isinstance(res["server"], BaseException), res["server"]
        np.testing.assert_array_equal(res["client"].output_ring, run_fixed(MLP, X[:1], FX64))
    res = run_crisp(MLP, X[:1], "malicious", linear="ckks", extra=HE, adversary=_ct_once(_digit(56)))
    assert isinstance(res["server"], ProtocolAbort) and res["server"].check == "crisp-consistency"
    assert isinstance(res["client"], PeerAbortedError)


@pytest.mark.covers_check("crisp", "crisp-popk")
def test_malformed_ciphertext_in_conv_layer_aborts():
    res = run_crisp(CNN, X[:1], "malicious", linear="ckks", extra=HE, adversary=_ct_once(_noise(42), True))
    _assert_popk_abort(res)


def _flip(pos):
    def fn(b):
        b = bytearray(b)
        b[pos] ^= 0x04
        return bytes(b)
    return fn


@pytest.mark.covers_check("crisp", "crisp-popk")
@pytest.mark.parametrize("what,pos", [("h", 0), ("z", -1)])
def test_tampered_commitment_or_response_aborts(what, pos):
    res = run_crisp(MLP, X[:1], "malicious", linear="ckks", extra=HE, adversary=_popk_frame_once(what, _flip(pos)))
    _assert_popk_abort(res)


@pytest.mark.parametrize("cut", [lambda z: z[:-1], lambda z: b"\x07"])
def test_wrong_size_response_is_typed_error(cut):
    """A response of the wrong length (a 1-byte message other than the restart byte 0
    included) is a FrameError at the server, before any check or computation."""
    res = run_crisp(MLP, X[:1], "malicious", linear="ckks", extra=HE, adversary=_popk_frame_once("z", cut))
    assert isinstance(res["server"], FrameError), res["server"]
    assert "crisp-popk" in str(res["server"])
    assert isinstance(res["client"], BaseException)


def test_semi_honest_runs_without_the_proof():
    res = run_crisp(MLP, X[:1], "semi-honest", linear="ckks", extra=HE)
    assert not isinstance(res["server"], BaseException), res["server"]
    np.testing.assert_array_equal(res["client"].output_ring, run_fixed(MLP, X[:1], FX64))
    assert "missing" not in res["client"].info


def test_large_batch_is_split_into_proofs_of_at_most_64(monkeypatch):
    """70 inputs in the single-sample layout (the batched one would pack them into a few
    ciphertexts): a layer group of 70 client ciphertexts runs as proofs of 64 + 6."""
    from secinfer.crypto.zk import popk
    from secinfer.protocols.crisp import budget

    monkeypatch.setattr(budget, "choose_rows_layout",
                        lambda params, level, drop, k_in, n_out, n_rows, half:
                        budget.single_rows_layout(half, k_in, n_out))
    sizes = []
    orig = popk.Prover.__init__

    def init(self, *a, **k):
        orig(self, *a, **k)
        sizes.append(self.g.n)
    monkeypatch.setattr(popk.Prover, "__init__", init)
    x = X[:70]
    res = run_crisp(MLP, x, "malicious", linear="ckks", extra=HE)
    assert not isinstance(res["server"], BaseException), res["server"]
    np.testing.assert_array_equal(res["client"].output_ring, run_fixed(MLP, x, FX64))
    assert popk.N_MAX in sizes and max(sizes) == popk.N_MAX and min(sizes) < popk.N_MAX


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_no_answer_leaves_the_server_before_the_proof_is_checked(model, monkeypatch):
    """The server computes a group's answers while the client answers the challenge, but
    sends them only after the check: with a malformed first-layer ciphertext no answer
    (crisp/lin/*/res) is ever sent, and in an honest run every answer of a group is sent
    after the response of the group's proof was received."""
    from secinfer.net.channel import Endpoint

    log = []
    orig_send, orig_recv = Endpoint.send, Endpoint.recv

    def send(self, peer, tag, *arrays):
        log.append(("send", self.me, tag))
        return orig_send(self, peer, tag, *arrays)

    def recv(self, peer, tag, *specs, **kw):
        out = orig_recv(self, peer, tag, *specs, **kw)
        log.append(("recv", self.me, tag))
        return out
    monkeypatch.setattr(Endpoint, "send", send)
    monkeypatch.setattr(Endpoint, "recv", recv)
    g = MLP if model == "mlp" else CNN
    res = run_crisp(g, X[:1], "malicious", linear="ckks", extra=HE, adversary=_ct_once(_noise(42), True))
    _assert_popk_abort(res)
    assert not [e for e in log if e[0] == "send" and e[2].endswith("/res")]
    log.clear()
    res = run_crisp(g, X[:1], "malicious", linear="ckks", extra=HE)
    assert not isinstance(res["server"], BaseException), res["server"]
    open_, answers = set(), 0       # steps with a challenge out and no response read yet
    for k, me, t in log:
        if me != "server":
            continue
        step = t.split("/")[2] if t.startswith("crisp/lin/") else None
        if k == "send" and "/popk/" in t and "/ch" in t:
            open_.add(step)
        elif k == "recv" and "/popk/" in t and "/z" in t:
            open_.discard(step)
        elif k == "send" and t.endswith("/res"):
            assert step not in open_, f"answer of step {step} sent before the proof's response"
            answers += 1
    assert answers > 0 and not open_
