"""Outputs equal scikit-learn's predictions (and the exact fixed-point oracle) [ASTRA 5.5]."""

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC, LinearSVR

from astra_helpers import run_protocol
from secinfer.arith.fixed import FX64
from secinfer.errors import UnsupportedOpError
from secinfer.protocols.astra import model as mdl
from secinfer.protocols.astra.protocol import SPEC


@pytest.fixture(scope="module")
def cancer():
    x, y = load_breast_cancer(return_X_y=True)
    return x[:450], y[:450], x[450:], y[450:]


@pytest.fixture(scope="module")
def diabetes():
    x, y = load_diabetes(return_X_y=True)
    return x[:330], y[:330], x[330:], y[330:]


def _ok(res):
    for r, v in res.items():
        if isinstance(v, BaseException):
            raise v
    assert all(res[r].output is None for r in res if r != "client")
    return res["client"]


def _bound(lm, x):
    """|fixed - float| for z @ W + b with x at f bits, W at f_w bits, exact final shift."""
    fw = lm.wfrac(FX64)
    ex, ew = 2.0 ** -(FX64.frac_bits + 1), 2.0 ** -(fw + 1)
    w = np.abs(lm.weights)
    k = w.shape[0]
    return np.abs(x).sum(1, keepdims=True) * ew + ex * w.sum(0) + ex * ew * k + 2.0 ** -FX64.frac_bits + 1e-9


@pytest.mark.parametrize("security", ["semi-honest", "malicious", "fair"])
def test_classifiers_match_sklearn(cancer, security):
    xtr, ytr, xte, _ = cancer
    ests = [make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(xtr, ytr)]
    if security == "semi-honest":
        ests.append(make_pipeline(StandardScaler(), LinearSVC(max_iter=20000)).fit(xtr, ytr))
    for est in ests:
        out = _ok(run_protocol(est, xte, security)[0])
        assert np.array_equal(out.output[:, 0], est.predict(xte))
        lm = mdl.resolve_wfrac(mdl.to_linear(est), FX64)
        assert np.array_equal(out.output_ring[:, 0].astype(np.int64), mdl.oracle(lm, xte, FX64)[:, 0])


@pytest.mark.parametrize("security", ["semi-honest", "malicious", "fair"])
def test_regressors_within_fixed_point_bound(diabetes, security):
    xtr, ytr, xte, _ = diabetes
    ests = [LinearRegression().fit(xtr, ytr)]
    if security == "semi-honest":
        ests += [Ridge(alpha=0.1).fit(xtr, ytr), LinearSVR(C=100.0, max_iter=50000).fit(xtr, ytr)]
    for est in ests:
        out = _ok(run_protocol(est, xte, security)[0])
        lm = mdl.resolve_wfrac(mdl.to_linear(est), FX64)
        assert np.array_equal(out.output_ring, mdl.oracle(lm, xte, FX64))    # bit-exact oracle
        err = np.abs(out.output[:, 0] - est.predict(xte))
        assert np.all(err <= _bound(lm, xte)[:, 0])


def test_bundled_onnx_models():
    from secinfer.ir.onnx_import import load_model
    import importlib.resources as ir
    base = ir.files("secinfer.ir") / "bundled"
    d = np.load(base / "breast_cancer_test.npz")
    g = load_model(str(base / "cancer-logreg.onnx"))
    SPEC.check_model(g, "malicious")
    out = _ok(run_protocol(g, d["X"], "malicious")[0])
    from secinfer.ir.float_exec import run_float
    ref = (run_float(g, d["X"].astype(np.float32))[:, 0] > 0.5).astype(float)
    assert np.mean(out.output[:, 0] == ref) == 1.0
    dd = np.load(base / "diabetes_test.npz")
    g = load_model(str(base / "diabetes-linreg.onnx"))
    out = _ok(run_protocol(g, dd["X"], "semi-honest")[0])
    ref = run_float(g, dd["X"].astype(np.float32))[:, 0]
    assert np.max(np.abs(out.output[:, 0] - ref)) < 0.05
    g = load_model(str(base / "cancer-linsvc.onnx"))
    out = _ok(run_protocol(g, d["X"], "semi-honest", {"output": "label"})[0])
    assert np.array_equal(out.output[:, 0], (run_float(g, d["X"].astype(np.float32))[:, 0] > 0).astype(float))


def test_check_model_rejects_non_linear():
    from secinfer.ir import zoo
    from secinfer.ir.onnx_import import load_model
    g = load_model(zoo.build("secureml-a"))
    with pytest.raises(UnsupportedOpError):
        SPEC.check_model(g, "semi-honest")
    with pytest.raises(UnsupportedOpError):
        mdl.from_sklearn(LogisticRegression().fit(np.eye(3), [0, 1, 2]))
