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
from secinfer.protocols.rep3 import linear as mdl
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


@pytest.mark.parametrize("classifier", [False, True])
def test_plain_gemm_graph_is_bit_exact_with_run_fixed(classifier):
    """x -> Gemm [-> Sigmoid]: the protocol's output equals the IR's fixed-point oracle."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from secinfer.crypto.prg import PRG
    from secinfer.ir.fixed_exec import run_fixed
    from secinfer.ir.onnx_import import load_model
    g = PRG.for_tests(11)
    w = (g.uint64((40, 2 if not classifier else 1)).astype(np.float64) / 2**64 - 0.5).astype(np.float32)
    b = (g.uint64((w.shape[1],)).astype(np.float64) / 2**64).astype(np.float32)
    x = g.uint64((9, 40)).astype(np.float64) / 2**64 * 8 - 4
    nodes = [helper.make_node("Gemm", ["x", "W", "b"], ["s" if classifier else "y"])]
    if classifier:
        nodes.append(helper.make_node("Sigmoid", ["s"], ["y"]))
    graph = helper.make_graph(nodes, "lin", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 40])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", w.shape[1]])],
                              [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
    model = load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    out = _ok(run_protocol(model, x, "malicious")[0])
    if classifier:
        from secinfer.ir.fixed_ops import gemm
        enc = FX64.encode
        score = gemm(enc(x), enc(w.astype(np.float64)), enc(b.astype(np.float64)), FX64)
        want = FX64.ring.to_signed(score)[:, 0] > 0
        assert np.array_equal(out.output_ring[:, 0].astype(np.int64), want)
        # edge: a decision value in (0, 2^-f) at 2f bits truncates to 0 -> class 0, like the oracle
        lm = mdl.to_linear(model)
        assert np.array_equal(mdl.oracle(lm, x, FX64)[:, 0], want)
    else:
        assert np.array_equal(out.output_ring, run_fixed(model, x, FX64))


def test_garbled_circuit_library_and_program_are_ready_before_the_online_phase(monkeypatch, cancer):
    """[issue 23] A party's first use of the native garbling library and of the circuit's
    gate program (which, in a party process of its own, loads or builds the library and
    compiles the program) happens before its online phase: P2 evaluates online, so it
    prepares both offline. The parties share this test process, so each party's first
    use is recorded per party (thread)."""
    import threading

    from secinfer.crypto.gc import garble
    from secinfer.crypto.he import _native
    where = threading.local()
    first = {}

    class PhaseSpy:
        def wrap(self, role, ep):
            where.role = role

            class EP:
                def phase(self, name):
                    outer = ep.phase(name)

                    class Ctx:
                        def __enter__(self):
                            where.phase = name
                            return outer.__enter__()

                        def __exit__(self, *exc):
                            where.phase = None
                            return outer.__exit__(*exc)
                    return Ctx()

                def __getattr__(self, name):
                    return getattr(ep, name)
            return EP()

    def spy(kind, orig):
        def f(*args):
            first.setdefault((getattr(where, "role", None), kind), getattr(where, "phase", None))
            return orig(*args)
        return f
    monkeypatch.setattr(_native, "load", spy("load", _native.load))
    monkeypatch.setattr(garble, "_program", spy("program", garble._program))
    xtr, ytr, xte, _ = cancer
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000)).fit(xtr, ytr)
    res, _ = run_protocol(clf, xte[:4], "semi-honest", adversary=PhaseSpy())
    assert np.array_equal(_ok(res).output[:, 0], clf.predict(xte[:4]))
    assert ("p2", "load") in first and ("p2", "program") in first, first
    assert all(ph != "online" for ph in first.values()), first
