"""The client's encode-and-mask in one native call (``encode_native.BoundEncode``,
``native/go/ring64/encode.go``; docs/protocols/astra.md "Seventh pass"): equal to the numpy
steps it replaces (``direct.encode_masked``) and to ``encode_input`` + the mask on random
queries with ties, signs, zeros and values near the range; the fallback where it does not
apply; a value out of range fails before anything is written; and in a whole run with it
and without it every party sends the same bytes and the output is the oracle's."""

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from astra_helpers import run_protocol
from secinfer.arith.fixed import FX64
from secinfer.native.errors import HEArgumentError
from secinfer.protocols.astra import direct, encode_native
from secinfer.protocols.rep3 import linear as mdl
from test_warm_online import _Recorder


def _query(rows, cols, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 40, (rows, cols))
    x[0, :8] = [0.5 / 2 ** 13, -0.5 / 2 ** 13, 2.5 / 2 ** 13, -2.5 / 2 ** 13, 0.0, -0.0, -1e-9, 1e-300]
    if rows > 1:
        x[1, :4] = [2.0 ** 40, -(2.0 ** 40), 2.0 ** 40 - 2.0 ** -13, -(2.0 ** 40) + 2.0 ** -12]
    return x, rng.integers(0, 2**64, x.shape, dtype=np.uint64)


@pytest.mark.parametrize("rows,cols", [(1, 784), (2, 37), (300, 37)])
def test_bound_encode_equals_the_numpy_steps(rows, cols):
    x, lam = _query(rows, cols, rows)
    mdl.encode_input(x, 13, FX64)   # (the client's check: the query fits)
    want = direct.encode_masked(x, 13, lam.copy(), direct.encode_buffers(x.shape))
    assert np.array_equal(want, mdl.encode_input(x, 13, FX64) + lam)
    buf = lam.copy()
    b = encode_native.BoundEncode(x, 13, buf)
    assert b.ok
    for _ in range(2):   # bound once, called again on a fresh mask in the same buffer
        got = b()
        assert got is buf and np.array_equal(got, want)
        buf[...] = lam
    enc = direct.bound_encoder(x, 13, buf, direct.encode_buffers(x.shape))
    assert isinstance(enc, encode_native.BoundEncode) and np.array_equal(enc(), want)


def test_bound_encode_falls_back_where_it_does_not_apply(monkeypatch):
    x, lam = _query(2, 37, 9)
    want = mdl.encode_input(x, 13, FX64) + lam
    bufs = direct.encode_buffers(x.shape)
    ro = lam.copy()
    ro.flags.writeable = False
    cases = [(x.astype(np.float32), lam.copy()), (np.asfortranarray(x), lam.copy()), (x, ro), (x, lam[:, :5].copy())]
    for xx, ll in cases:
        assert not encode_native.BoundEncode(xx, 13, ll).ok
    enc = direct.bound_encoder(np.asfortranarray(x), 13, lam.copy(), bufs)
    assert not isinstance(enc, encode_native.BoundEncode) and np.array_equal(enc(), want)
    monkeypatch.setattr(encode_native, "_native", lambda: None)
    assert not encode_native.BoundEncode(x, 13, lam.copy()).ok


@pytest.mark.parametrize("bad", [np.nan, np.inf, 2.0 ** 52])
def test_bound_encode_refuses_a_value_out_of_range_before_writing(bad):
    x, lam = _query(1, 16, 4)
    x[0, 9] = bad
    buf = lam.copy()
    with pytest.raises(HEArgumentError):
        encode_native.BoundEncode(x, 13, buf)()
    assert np.array_equal(buf, lam)


def _model(task):
    if task == "regression":
        x, y = load_diabetes(return_X_y=True)
        return LinearRegression().fit(x[:300], y[:300]), x[300:301]
    x, y = load_breast_cancer(return_X_y=True)
    est = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(x[:450], y[:450])
    return est, x[450:453]


def _run(est, q, native, monkeypatch):
    calls = []
    if native:
        f = encode_native.BoundEncode.__call__
        monkeypatch.setattr(encode_native.BoundEncode, "__call__", lambda self: (calls.append(1), f(self))[1])
    else:
        monkeypatch.setattr(encode_native, "_native", lambda: None)
    rec = _Recorder()
    res, meters = run_protocol(est, q, "semi-honest", options={"warm_online": True}, seed=7, adversary=rec)
    for v in res.values():
        if isinstance(v, BaseException):
            raise v
    monkeypatch.undo()
    return res["client"], rec.sent, len(calls)


@pytest.mark.parametrize("task", ["regression", "classifier"])
def test_native_encode_changes_no_message_or_output(task, monkeypatch):
    est, q = _model(task)
    on = _run(est, q, True, monkeypatch)
    off = _run(est, q, False, monkeypatch)
    assert on[1] == off[1]                     # every party's messages, in order, byte for byte
    assert np.array_equal(on[0].output_ring, off[0].output_ring)
    assert on[2] == 2 and off[2] == 0          # the warm run's and the query's
    want = mdl.oracle(mdl.resolve_wfrac(mdl.to_linear(est), FX64), q, FX64)
    got = on[0].output_ring if task == "regression" else on[0].output_ring[:, 0].astype(np.int64)
    assert np.array_equal(got, want if task == "regression" else want[:, 0])
