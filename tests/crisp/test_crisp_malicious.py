"""Claim 2 [CRISP V-B]: every client deviation makes the server abort; the client gets
nothing but the abort. Plus malformed messages and preprocessing reuse."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from secinfer.arith.fixed import FX64
from secinfer.errors import FrameError, PeerAbortedError, PreprocessingReuseError, ProtocolAbort, ProtocolError
from secinfer.ir import bundled
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model
from secinfer.crypto.preprocessing import ArrayItem, PreprocessingStore

sys.path.insert(0, os.path.dirname(__file__))
from crisp_helpers import add_at, replace_frame, run_crisp  # noqa: E402

MLP = load_model(bundled.bundled_path("digits-mlp"))
CNN = load_model(bundled.bundled_path("digits-cnn"))
X, _ = bundled.bundled_testset("digits-mlp")
x = X[:2]

# digits-mlp plan: 1 Mul(inv_scale) lin, 2 Gemm lin, 3 Relu, 4 Gemm lin (output)
DEVIATIONS = {
    "delta1-relu-input": lambda: add_at("open", step=3),           # share entering the ReLU gate
    "delta1-trunc-input": lambda: add_at("open", step=2),          # share entering the ARS gate
    "delta1-last-layer": lambda: add_at("open", step=4, delta=1 << 20),
    "delta2-re": lambda: add_at("c1", step=2, index=20),           # Re(<m>_1) of Lin
    "delta3-im": lambda: add_at("c2", step=4),                     # Im(<m>_1) of Lin
    "delta4-share-re": lambda: add_at("c3re", step=4),             # complex share to Lin, real part
    "delta4-share-im": lambda: add_at("c3im", step=2, delta=7, index=20),  # ... imaginary part
    "delta4-input-layer": lambda: add_at("c3re", step=1, index=20),
    "delta5-q": lambda: add_at("q", delta=1),
    "delta5-q-high": lambda: add_at("q", delta=1 << 63),
}


def _assert_aborted(res):
    srv, cli, dealer = res["server"], res["client"], res["dealer"]
    assert isinstance(srv, ProtocolAbort) and srv.check == "crisp-consistency", srv
    assert srv.suspect == "client"
    # The client learns nothing but the abort: no PartyResult, no output.
    assert isinstance(cli, PeerAbortedError), cli
    assert not isinstance(dealer, BaseException)


@pytest.mark.covers_check("crisp", "crisp-consistency")
@pytest.mark.parametrize("name", sorted(DEVIATIONS))
def test_deviation_aborts(name):
    _assert_aborted(run_crisp(MLP, x, adversary=DEVIATIONS[name]()))


@pytest.mark.covers_check("crisp", "crisp-consistency")
def test_deviation_in_cnn_conv_and_avgpool():
    # digits-cnn: 1 Mul, 2 Reshape, 3 Conv, 4 Relu, 5 AveragePool, 6 Flatten, 7 Gemm
    _assert_aborted(run_crisp(CNN, X[:1], adversary=add_at("open", step=5)))
    _assert_aborted(run_crisp(CNN, X[:1], adversary=add_at("c3im", step=3, index=5)))


def test_consistent_wrong_input_is_allowed():
    """Claim 2 (1): a different input used consistently just yields the output for it
    (the client encodes another input; the parties' code is unchanged)."""
    from secinfer.arith.fixed import FixedPointConfig
    from crisp_helpers import Adversary

    other = X[5:7]

    def wrap(orig):
        def encode(self, v, *a, **k):
            if np.shape(v) == np.shape(x) and np.array_equal(v, x):
                adv.fired += 1
                v = other
            return orig(self, v, *a, **k)
        return encode
    adv = Adversary().patch(FixedPointConfig, "encode", wrap)
    res = run_crisp(MLP, x, adversary=adv)
    assert not isinstance(res["server"], BaseException), res["server"]
    np.testing.assert_array_equal(res["client"].output_ring, run_fixed(MLP, other, FX64))


def test_semi_honest_baseline_has_no_check():
    """Sanity of the test itself: without MACs the same deviation goes undetected."""
    res = run_crisp(MLP, x, security="semi-honest", adversary=add_at("open", step=3, delta=1 << 14))
    assert not isinstance(res["server"], BaseException)
    assert not np.array_equal(res["client"].output_ring, run_fixed(MLP, x, FX64))


@pytest.mark.parametrize("bad", ["short", "long", "dtype", "top-bits"])
def test_malformed_lin_message_rejected_before_use(bad):
    def corrupt(a):
        if bad == "short":
            return a[:-1]
        if bad == "long":
            return np.concatenate([a, a[:1]])
        if bad == "dtype":
            return a.astype(np.int64)
        b = a.copy()
        b[0, -1] = np.uint64(1) << np.uint64(63)        # bits above 2^(n+s)
        return b

    res = run_crisp(MLP, x, adversary=replace_frame(r"crisp/lin/2", corrupt))
    assert isinstance(res["server"], FrameError), res["server"]
    assert isinstance(res["client"], BaseException)


def test_preprocessing_consumed_once():
    st = PreprocessingStore("t")
    st.put("gate/1/0", ArrayItem({"r": np.zeros(3, np.uint64)}))
    st.take("gate/1/0")
    with pytest.raises(PreprocessingReuseError):
        st.take("gate/1/0")
    with pytest.raises(PreprocessingReuseError):
        st.put("gate/1/0", ArrayItem({}))
    with pytest.raises(ProtocolError):
        st.take("never-stored")


def test_gate_key_cannot_be_replayed_in_a_session():
    """A protocol step that asks for the same gate key twice fails: the store refuses."""
    from secinfer.protocols.crisp import nonlinear

    calls = {"n": 0}
    orig = nonlinear.take_gate_key

    def twice(store, prm, kind, step, pos, party):
        calls["n"] += 1
        if calls["n"] == 2:
            orig(store, prm, kind, 1, 0, party)       # replay the first key
        return orig(store, prm, kind, step, pos, party)

    nonlinear.take_gate_key = twice
    try:
        res = run_crisp(MLP, x)
    finally:
        nonlinear.take_gate_key = orig
    errs = [r for r in res.values() if isinstance(r, PreprocessingReuseError)]
    assert errs, res


def test_honest_run_leaves_no_unused_preprocessing_and_does_not_abort():
    res = run_crisp(MLP, x)
    assert not isinstance(res["server"], BaseException)
    assert res["server"].info["checked_vectors"] == 7


def test_dealer_ahead_of_time_stores_feed_exactly_one_session(tmp_path):
    from secinfer.crypto.prg import PRG
    from secinfer.protocols.crisp.protocol import produce_preprocessing_ahead

    info = produce_preprocessing_ahead(MLP, FX64, 2, "malicious", str(tmp_path), PRG.for_tests(21))
    assert info["server_bytes"] > 0 and (tmp_path / "crisp-client.npz").exists()
    res = run_crisp(MLP, x, extra={"preprocessing_dir": str(tmp_path)})
    assert not isinstance(res["server"], BaseException), res["server"]
    np.testing.assert_array_equal(res["client"].output_ring, run_fixed(MLP, x, FX64))
    assert res["dealer"].info == {"ran_ahead": True}
    assert not (tmp_path / "crisp-server.npz").exists()      # consumed: loading deleted it
    again = run_crisp(MLP, x, extra={"preprocessing_dir": str(tmp_path)})
    assert isinstance(again["server"], FileNotFoundError) and isinstance(again["client"], BaseException)
