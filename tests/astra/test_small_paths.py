"""The semi-honest direct path's small-query steps (``protocols/astra/direct.py``, "Sixth
pass" in docs/protocols/astra.md): an evaluator's step on Python integers for one output
value (``_scalar_prep`` / ``_scalar_step``), P0's decoding into one byte for at most 8
outputs (``_p0_small_prep``) and the client's reconstruction from a table row or Python
integers (``output_small``). With them and with the numpy steps they replace (same seeds),
every party sends the same messages byte for byte, the meters count the same, the outputs
equal the fixed-point oracle; the small steps run exactly where they apply. And the steps
alone, on random inputs, equal the numpy ones."""

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from astra_helpers import run_protocol
from secinfer.arith.fixed import FX64
from secinfer.protocols.astra import direct
from secinfer.protocols.rep3 import linear as mdl
from test_warm_online import _Recorder


def _model(task, rows):
    if task == "regression":
        x, y = load_diabetes(return_X_y=True)
        return LinearRegression().fit(x[:300], y[:300]), x[300:300 + rows]
    x, y = load_breast_cancer(return_X_y=True)
    est = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(x[:450], y[:450])
    return est, x[450:450 + rows]


def _run(est, q, small, monkeypatch):
    used = []
    if small:
        f = direct._scalar_step
        monkeypatch.setattr(direct, "_scalar_step", lambda *a: (used.append("evaluator"), f(*a))[1])
        h = direct._p0_step
        monkeypatch.setattr(direct, "_p0_step",
                            lambda fast, *a: (used.append("p0") if fast.get("ybuf") else None, h(fast, *a))[1])
        g = direct.combine_output
        monkeypatch.setattr(direct, "combine_output",
                            lambda *a: (used.append("client") if a[-1] is not None else None, g(*a))[1])
    else:   # the numpy steps: none of the small constants made
        monkeypatch.setattr(direct, "_scalar_prep", lambda fast: fast.__setitem__("scalar", None))
        monkeypatch.setattr(direct, "_p0_small_prep", lambda fast, size: fast.__setitem__("ybuf", None))
        monkeypatch.setattr(direct, "output_small", lambda cls, size, extra: None)
    rec = _Recorder()
    res, meters = run_protocol(est, q, "semi-honest", options={"warm_online": False}, seed=5, adversary=rec)
    for v in res.values():
        if isinstance(v, BaseException):
            raise v
    counts = {r: {k: (c.payload, c.messages) for k, c in m.counters.items()} for r, m in meters.items()}
    monkeypatch.undo()
    return res["client"], rec.sent, counts, sorted(used)


@pytest.mark.parametrize("task,rows", [("regression", 1), ("classifier", 1), ("classifier", 6),
                                       ("classifier", 9)])
def test_small_steps_change_no_message_meter_or_output(task, rows, monkeypatch):
    est, q = _model(task, rows)
    on = _run(est, q, True, monkeypatch)
    off = _run(est, q, False, monkeypatch)
    assert on[1] == off[1]                     # every party's messages, in order, byte for byte
    assert on[2] == off[2]                     # the meters
    assert np.array_equal(on[0].output_ring, off[0].output_ring)
    lm = mdl.resolve_wfrac(mdl.to_linear(est), FX64)
    want = mdl.oracle(lm, q, FX64)
    if task == "regression":
        assert np.array_equal(on[0].output_ring, want)
    else:
        assert np.array_equal(on[0].output_ring[:, 0].astype(np.int64), want[:, 0])
        assert np.array_equal(on[0].output[:, 0], est.predict(q))
    # where they apply: the evaluators' step at one output value, P0's decoding at most 8
    # classes, the client's reconstruction at one regression value or at most 8 classes
    evaluator = rows == 1
    client = rows == 1 if task == "regression" else rows <= 8
    p0 = task == "classifier" and rows <= 8
    assert on[3] == sorted((["client"] if client else []) + (["evaluator"] * 2 if evaluator else [])
                           + (["p0"] if p0 else []))


def _fast(cls, k_neg, rng):
    fast = {"cls": cls, "thin": True, "k_neg": k_neg, "coef": rng.integers(0, 2**64, (784, 1), dtype=np.uint64),
            "u": np.full((1, 1), 0, np.uint64)}
    fast["u_flat"] = fast["u"].reshape(-1)
    if cls:
        fast["u_bytes"] = fast["u_flat"].view(np.uint8).reshape(-1, 8)
        fast["k"] = rng.integers(0, 2**64, (1, 1), dtype=np.uint64)
        fast["r_gc"] = rng.integers(0, 2**64, (1, 1, 2), dtype=np.uint64)
        fast["zeros"] = rng.integers(0, 2**64, (1, 64, 2), dtype=np.uint64)
        fast["labels"] = np.full((1, 64, 2), 0, np.uint64)
    else:
        fast["off"] = rng.integers(0, 2**64, (1, 1), dtype=np.uint64)
    return fast


@pytest.mark.parametrize("cls,k_neg", [(False, False), (True, True), (True, False)])
def test_scalar_step_equals_the_numpy_step(cls, k_neg):
    rng = np.random.default_rng(7)
    fast = _fast(cls, k_neg, rng)
    direct._scalar_prep(fast)
    assert fast["scalar"] is not None
    for i in range(20):
        m_x = rng.integers(0, 2**64, (1, 784), dtype=np.uint64)
        if i == 0:
            m_x[:] = np.uint64(2**64 - 1)           # (every product and the sum wrap)
        got = np.array(direct._scalar_step(fast, fast["scalar"], m_x), copy=True)
        ref = dict(fast, scalar=None)
        want = direct._evaluator_step(ref, m_x)
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)


def test_scalar_step_applies_to_one_thin_value_only():
    rng = np.random.default_rng(8)
    for shape, thin in (((2, 1), True), ((1, 2), True), ((1, 1), False)):
        fast = _fast(False, False, rng)
        fast["u"], fast["thin"] = np.full(shape, 0, np.uint64), thin
        direct._scalar_prep(fast)
        assert fast["scalar"] is None


@pytest.mark.parametrize("size", [1, 3, 8])
def test_small_output_reconstruction_equals_the_numpy_one(size):
    rng = np.random.default_rng(size)
    r = rng.integers(0, 2, size).astype(np.uint8)
    tab = direct.output_small(True, size, r)
    assert not tab.flags.writeable
    for y in range(256):
        b = np.array([y], np.uint8)
        assert np.array_equal(direct.combine_output(True, size, r, lambda: b, None, None, tab),
                              direct.combine_output(True, size, r, lambda: b, None, None))
    lam = rng.integers(0, 2**64, 1, dtype=np.uint64)
    small = direct.output_small(False, 1, lam)
    for _ in range(20):
        a, b = (rng.integers(0, 2**64, 1, dtype=np.uint64) for _ in range(2))
        got = direct.combine_output(False, 1, lam, lambda: a, lambda: b, np.zeros(1, np.uint64), small).copy()
        want = direct.combine_output(False, 1, lam, lambda: a, lambda: b, np.zeros(1, np.uint64))
        assert np.array_equal(got, want)
    assert direct.output_small(True, 9, np.zeros(9, np.uint8)) is None
    assert direct.output_small(False, 2, np.zeros(2, np.uint64)) is None
