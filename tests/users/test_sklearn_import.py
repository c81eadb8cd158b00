"""scikit-learn models as skl2onnx exports them (default options, and zipmap=False) import
into the IR, and the IR's output means what onnxruntime and scikit-learn say it means."""

import numpy as np
import pytest
from skl2onnx import to_onnx

from secinfer.arith.fixed import FX64
from secinfer.errors import UnsupportedOpError
from secinfer.ir.fixed_exec import derived_error_bound, run_fixed
from secinfer.ir.float_exec import run_float
from secinfer.ir.onnx_import import load_model
from secinfer.ir.outputs import meaning_of, model_output, predictions
from sk_models import CLASSIFIERS, MODELS, fitted, ort_outputs, sklearn_scores


def _export(est, x, zipmap):
    opts = {id(est): {"zipmap": False}} if zipmap is False else None
    return to_onnx(est, x[:1].astype(np.float32), options=opts)


@pytest.mark.parametrize("zipmap", [None, False], ids=["default", "zipmap-false"])
@pytest.mark.parametrize("name", MODELS)
def test_export_imports_and_matches_onnxruntime_and_sklearn(name, zipmap):
    est, x = fitted(name)
    if zipmap is False and not hasattr(est, "predict_proba"):
        pytest.skip("skl2onnx has no zipmap option for this estimator")
    proto = _export(est, x, zipmap)
    g = load_model(proto)
    assert all(n.op not in ("ArgMax",) for n in g.nodes)
    meaning = meaning_of(g)
    raw = run_float(g, x)
    ours = model_output(meaning, raw)
    label, ort_scores = ort_outputs(proto, x)
    # the model's own output, as the ONNX graph defines it (float32 weights in the file)
    assert ours.shape == ort_scores.shape
    np.testing.assert_allclose(ours, ort_scores, rtol=1e-4, atol=1e-4 * (1 + np.max(np.abs(ort_scores))))
    np.testing.assert_allclose(ours, sklearn_scores(est, x), rtol=1e-3,
                               atol=1e-3 * (1 + np.max(np.abs(ort_scores))))
    pred = predictions(meaning, raw)
    if name in CLASSIFIERS:
        assert meaning["task"] == "classification"
        assert np.array_equal(pred, est.predict(x))
        assert np.array_equal(pred, label)
    else:
        assert meaning["decision"] == "identity"
        np.testing.assert_allclose(pred, est.predict(x), rtol=1e-4, atol=1e-3)
    # the bit-exact fixed-point oracle stays within its derived bound of the float graph
    ref = FX64.decode(run_fixed(g.with_batch(len(x)), x, FX64))
    bound = derived_error_bound(g.with_batch(len(x)), FX64, x=x)["bound"]
    assert np.max(np.abs(ref - raw)) <= bound + 1e-9


def test_binary_logistic_is_one_sigmoid_column_like_astras_form():
    est, x = fitted("logreg-binary")
    g = load_model(_export(est, x, None))
    assert [n.op for n in g.nodes] == ["Sub", "Mul", "Gemm", "Sigmoid"]
    assert g.outputs[0].shape[-1] == 1
    m = meaning_of(g)
    assert m["binary"] == "proba" and m["zipmap"] and m["classes"] == [0, 1]
    assert m["label_outputs"] == ["output_label"] and m["onnx_output"] == "output_probability"


def test_linear_svc_binary_and_regressors_are_one_gemm():
    for name in ("linsvc-binary", "linreg", "linsvr", "svr-linear"):
        est, x = fitted(name)
        g = load_model(_export(est, x, None))
        assert [n.op for n in g.nodes][-1] == "Gemm", name


def test_tree_ensemble_is_refused_with_every_node_named_and_the_doc():
    from sklearn.datasets import load_iris
    from sklearn.ensemble import RandomForestClassifier

    x, y = load_iris(return_X_y=True)
    est = RandomForestClassifier(n_estimators=2, max_depth=2, random_state=0).fit(x, y)
    with pytest.raises(UnsupportedOpError) as ei:
        load_model(to_onnx(est, x[:1].astype(np.float32)))
    msg = str(ei.value)
    assert "TreeEnsembleClassifier" in msg and "docs/models.md" in msg and "ZipMap" not in msg.split("Refused")[0]


def test_every_refused_node_is_listed():
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["X"], ["a"], name="ok"),
             helper.make_node("TopK", ["a", "k"], ["v", "i"], name="top"),
             helper.make_node("Imputer", ["v"], ["y"], name="imp", domain="ai.onnx.ml",
                              imputed_value_floats=[0.0], replaced_value_float=0.0)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])],
                          [helper.make_tensor("k", TensorProto.INT64, [1], [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    with pytest.raises(UnsupportedOpError) as ei:
        load_model(m, check=False)
    msg = str(ei.value)
    assert "TopK 'top'" in msg and "Imputer 'imp'" in msg and "docs/models.md" in msg
    assert onnx is not None


def test_normalizer_in_front_is_refused_with_the_client_side_recipe():
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import Normalizer

    x, y = load_iris(return_X_y=True)
    est = make_pipeline(Normalizer(), LogisticRegression(max_iter=500)).fit(x, y)
    with pytest.raises(UnsupportedOpError) as ei:
        load_model(to_onnx(est, x[:1].astype(np.float32)))
    assert "Normalizer" in str(ei.value) and "on the client" in str(ei.value)


def test_a_label_used_in_arithmetic_is_refused():
    from onnx import TensorProto, helper

    nodes = [helper.make_node("ArgMax", ["X"], ["idx"], axis=1, keepdims=0, name="am"),
             helper.make_node("Cast", ["idx"], ["f"], to=TensorProto.FLOAT, name="c"),
             helper.make_node("Mul", ["f", "f"], ["y"], name="bad")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError, match="label"):
        load_model(m)
