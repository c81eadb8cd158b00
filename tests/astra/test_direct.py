"""The precomputed semi-honest ``reveal="direct"`` path (``protocols/astra/direct.py``):
outputs equal the fixed-point oracle bit for bit and the ``paper`` message structure's,
for regressions with one and several outputs (both dot-product kernels), batches and
classifiers; P0 has no online phase in a regression; the classification's comparison is
garbled by P1, P2 and evaluated by P0 (three online rounds, nothing reaches the evaluators
online but the query); a bad query fails with a typed error before the online phase."""

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from astra_helpers import run_protocol
from secinfer.arith.fixed import FX64
from secinfer.errors import ProtocolError
from secinfer.protocols.rep3 import linear as mdl


def _ok(res):
    for v in res.values():
        if isinstance(v, BaseException):
            raise v
    return res["client"]


def _online_msgs(meters, role, direction):
    return [(p, tag) for (ph, d, p, tag), c in meters[role].counters.items() if ph == "online" and d == direction]


@pytest.fixture(scope="module")
def diabetes():
    return load_diabetes(return_X_y=True)


@pytest.mark.parametrize("outputs", [1, 3, 6])   # 6 > 4: the limb-split ring product
def test_regression_equals_oracle_and_paper_path(diabetes, outputs):
    x, y = diabetes
    rng = np.random.default_rng(outputs)
    ys = np.stack([y * (1 + 0.1 * i) + rng.normal(0, 5, y.shape) for i in range(outputs)], axis=1)
    est = LinearRegression().fit(x[:300], ys[:300, 0] if outputs == 1 else ys[:300])
    q = x[300:305]
    res, meters = run_protocol(est, q, "semi-honest")
    out = _ok(res)
    paper = _ok(run_protocol(est, q, "semi-honest", options={"reveal": "paper"}, seed=3)[0])
    lm = mdl.resolve_wfrac(mdl.to_linear(est), FX64)
    want = mdl.oracle(lm, q, FX64)
    assert np.array_equal(out.output_ring, want) and np.array_equal(paper.output_ring, want)
    # P0 sent lambda_y with its "ready": no online phase at P0, one round each way
    assert meters["p0"].windows.get("online") is None
    assert _online_msgs(meters, "p0", "sent") == []
    assert sorted(_online_msgs(meters, "client", "recv")) == [("p1", "astra/out/y/m1"), ("p2", "astra/out/y/m2")]
    assert max(m.rounds("online") for m in meters.values()) == 2


def test_classifier_equals_oracle_in_three_rounds():
    x, y = load_breast_cancer(return_X_y=True)
    est = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(x[:450], y[:450])
    q = x[450:470]
    res, meters = run_protocol(est, q, "semi-honest")
    out = _ok(res)
    lm = mdl.resolve_wfrac(mdl.to_linear(est), FX64)
    assert np.array_equal(out.output_ring[:, 0].astype(np.int64), mdl.oracle(lm, q, FX64)[:, 0])
    assert np.array_equal(out.output[:, 0], est.predict(q))
    # query -> P1, P2; their labels -> P0; y -> client; r came from P1 offline
    assert max(m.rounds("online") for m in meters.values()) == 3
    assert sorted(_online_msgs(meters, "p0", "recv")) == [("p1", "astra/bx/bitext#2/64/k1"),
                                                          ("p2", "astra/bx/bitext#2/64/k2")]
    for ev in ("p1", "p2"):
        assert _online_msgs(meters, ev, "recv") == [("client", "astra/sh/X")]
    assert _online_msgs(meters, "client", "recv") == [("p0", "astra/out/y/y")]


@pytest.mark.parametrize("task", ["regression", "classifier"])
def test_output_does_not_depend_on_which_frame_comes_first(diabetes, task):
    """The client takes its two parts (regression) and P0 the two label frames (classifier)
    with one ``recv`` each in a fixed order (P2's then P1's parts; P1's then P2's labels);
    here the frame taken second is sent first (the first one held back by its sender), so
    it waits queued while the receiver waits for the other: the output is still the oracle's."""
    import time as _time

    from adversary import Corrupt, match

    def late(arrays):
        _time.sleep(0.3)
        return arrays
    if task == "regression":
        x, y = diabetes
        est, q = LinearRegression().fit(x[:200], y[:200]), x[200:203]
        adv = Corrupt("p2").replace_send(match(prefix="astra/out/y/m2"), late)
    else:
        x, y = load_breast_cancer(return_X_y=True)
        est = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(x[:450], y[:450])
        q = x[450:456]
        adv = Corrupt("p1").replace_send(match(suffix="/k1"), late)
    res, _ = run_protocol(est, q, "semi-honest", adversary=adv)
    out = _ok(res)
    assert adv.fired == 1
    lm = mdl.resolve_wfrac(mdl.to_linear(est), FX64)
    want = mdl.oracle(lm, q, FX64)
    if task == "regression":
        assert np.array_equal(out.output_ring, want)
    else:
        assert np.array_equal(out.output_ring[:, 0].astype(np.int64), want[:, 0])


@pytest.mark.parametrize("bad", [np.nan, np.inf, 1e30])
def test_bad_query_fails_typed_before_the_online_phase(diabetes, bad):
    x, y = diabetes
    est = LinearRegression().fit(x[:100], y[:100])
    q = x[100:102].copy()
    q[1, 3] = bad
    res, meters = run_protocol(est, q, "semi-honest", timeout=5)
    assert isinstance(res["client"], ProtocolError)


def test_ripple_comparison_circuit_equals_the_prefix_one():
    """``direct.msb_sub_ripple`` (63 AND gates) computes msb(u1 - u2) xor u3 as
    ``msb_sub_circuit`` (181) does: in the clear on edge cases and random words, and garbled."""
    from secinfer.crypto.gc import garble as gcm
    from secinfer.crypto.gc.circuit import bits_of, eval_plain, msb_sub_circuit
    from secinfer.protocols.astra.direct import msb_sub_ripple

    circ, ref = msb_sub_ripple(64), msb_sub_circuit(64)
    assert circ.and_count == 63 < ref.and_count
    rng = np.random.default_rng(5)
    n = 400
    a, b = rng.integers(0, 2**64, n, dtype=np.uint64), rng.integers(0, 2**64, n, dtype=np.uint64)
    a[:10], a[10:20], a[20:30] = b[:10], b[10:20] + np.uint64(1), b[20:30] - np.uint64(1)
    a[30:40], a[40:50], b[50:60] = b[30:40] + np.uint64(1 << 63), 0, 0
    r = rng.integers(0, 2, (n, 1)).astype(np.uint8)
    inp = {"u1": bits_of(a, 64), "u2": bits_of(b, 64), "u3": r}
    want = ((a - b) >> np.uint64(63)).astype(np.uint8) ^ r[:, 0]
    assert np.array_equal(eval_plain(circ, inp)[:, 0], want)
    assert np.array_equal(eval_plain(ref, inp)[:, 0], want)
    gen = np.random.default_rng(6)
    R, zeros = gcm.input_labels(circ, n, lambda shape: gen.integers(0, 2**63, shape, dtype=np.uint64))
    g = gcm.garble(circ, R, zeros)
    wires = gcm.wire_buffer(circ, {"u2": gcm.select(zeros["u2"], inp["u2"], R), "u3": gcm.select(zeros["u3"], r, R)})
    out = gcm.evaluate_opened(circ, g.tables, wires, "u1", gcm.select(zeros["u1"], inp["u1"], R))
    assert np.array_equal(gcm.decode(out, g.decode)[:, 0], want)


@pytest.mark.parametrize("native", [True, False], ids=["native", "numpy"])
def test_bound_evaluator_equals_evaluate_opened(native, monkeypatch):
    """P0's ``gcm.OpenedEvaluator`` (native arguments bound offline, labels written into its
    buffer, called twice on the same buffers) gives ``evaluate_opened``'s output labels, and
    the evaluators' one-``unpackbits`` label selection (``direct._bits64``) equals
    ``bits_of`` + ``gcm.select``."""
    from secinfer.crypto.gc import garble as gcm
    from secinfer.crypto.gc.circuit import bits_of
    from secinfer.protocols.astra.direct import _bits64, msb_sub_ripple

    if not native:
        monkeypatch.setattr(gcm, "_native_lib", lambda: None)
    circ, n = msb_sub_ripple(64), 5
    gen = np.random.default_rng(8)
    R, zeros = gcm.input_labels(circ, n, lambda shape: gen.integers(0, 2**63, shape, dtype=np.uint64))
    g = gcm.garble(circ, R, zeros, native=False)
    r = gen.integers(0, 2, (n, 1)).astype(np.uint8)
    wires = gcm.wire_buffer(circ, {"u3": gcm.select(zeros["u3"], r, R)})
    ev = gcm.OpenedEvaluator(circ, g.tables, wires, "u1")
    for _ in range(2):
        a, b = gen.integers(0, 2**64, n, dtype=np.uint64), gen.integers(0, 2**64, n, dtype=np.uint64)
        la = gcm.select(zeros["u1"], bits_of(a, 64), R)
        lb = gcm.select(zeros["u2"], bits_of(b, 64), R)
        assert np.array_equal(_bits64(a), bits_of(a, 64))
        assert np.array_equal(np.multiply(_bits64(a)[:, :, None], R) ^ zeros["u1"], la)
        wires[:, circ.inputs["u2"]] = lb
        ev.labels[...] = la
        got = ev().copy()
        w2 = gcm.wire_buffer(circ, {"u2": lb, "u3": gcm.select(zeros["u3"], r, R)})
        assert np.array_equal(got, gcm.evaluate_opened(circ, g.tables, w2, "u1", la, native=False))
        want = ((a - b) >> np.uint64(63)).astype(np.uint8) ^ r[:, 0]
        assert np.array_equal(gcm.decode(got, g.decode)[:, 0], want)


@pytest.mark.parametrize("rows", [1, 3, 300])   # 300 > ENCODE_ROWS: several passes
def test_encode_masked_equals_encode_then_mask(rows):
    from secinfer.protocols.astra.direct import encode_buffers, encode_masked

    rng = np.random.default_rng(rows)
    x = rng.normal(0, 40, (rows, 37))
    x[0, :6] = [0.5 / 2 ** 13, -0.5 / 2 ** 13, 2.5 / 2 ** 13, -2.5 / 2 ** 13, 0.0, -1e-9]   # ties and zero
    lam = rng.integers(0, 2**64, x.shape, dtype=np.uint64)
    want = mdl.encode_input(x, 13, FX64) + lam
    got = encode_masked(x, 13, lam.copy(), encode_buffers(x.shape))
    assert got.dtype == np.uint64 and np.array_equal(got, want)
