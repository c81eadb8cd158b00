"""Fitted scikit-learn models as a data scientist exports them (skl2onnx, default options)."""

import warnings

import numpy as np


def _fit(name):
    from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
    from sklearn.neural_network import MLPClassifier, MLPRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler, StandardScaler
    from sklearn.svm import SVR, LinearSVC, LinearSVR

    xc, yc = load_breast_cancer(return_X_y=True)
    xi, yi = load_iris(return_X_y=True)
    xr, yr = load_diabetes(return_X_y=True)
    table = {
        "logreg-binary": (make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)), xc, yc),
        "logreg-multi": (make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)), xi, yi),
        "linsvc-binary": (LinearSVC(C=0.01, max_iter=20000), xc[:, :10], yc),  # skl2onnx 1.20 cannot
        # convert Pipeline(StandardScaler, LinearSVC) (it injects a zipmap option LinearSVC refuses)
        "linsvc-multi": (LinearSVC(C=0.5, max_iter=20000), xi, yi),
        "linreg": (LinearRegression(), xr, yr),
        "ridge": (make_pipeline(StandardScaler(), Ridge()), xr, yr),
        "linsvr": (LinearSVR(C=1.0, max_iter=20000), xr, yr),
        "svr-linear": (SVR(kernel="linear", C=10.0), xr[:80], yr[:80]),
        "mlp-classifier": (MLPClassifier(hidden_layer_sizes=(8,), max_iter=300, random_state=0), xi, yi),
        "mlp-binary": (make_pipeline(StandardScaler(), MLPClassifier(hidden_layer_sizes=(6,), max_iter=300,
                                                                     random_state=0)), xc, yc),
        "mlp-regressor": (make_pipeline(StandardScaler(), MLPRegressor(hidden_layer_sizes=(8,), max_iter=300,
                                                                       random_state=0)), xr, yr / 100.0),
        "minmax-logreg": (make_pipeline(MinMaxScaler(), LogisticRegression(max_iter=2000)), xi, yi),
    }
    est, x, y = table[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(x, y)
    rows = np.random.default_rng(0).choice(len(x), 6, replace=False)
    return est, x[rows]


MODELS = ["logreg-binary", "logreg-multi", "linsvc-binary", "linsvc-multi", "linreg", "ridge", "linsvr",
          "svr-linear", "mlp-classifier", "mlp-binary", "mlp-regressor", "minmax-logreg"]
CLASSIFIERS = {"logreg-binary", "logreg-multi", "linsvc-binary", "linsvc-multi", "mlp-classifier", "mlp-binary",
               "minmax-logreg"}


_CACHE: dict = {}


def fitted(name):
    """(fitted estimator, 6 of its training rows); fitted once per test session."""
    if name not in _CACHE:
        _CACHE[name] = _fit(name)
    return _CACHE[name]


def sklearn_scores(est, x):
    """What the ONNX graph's first non-label output holds for this estimator."""
    if hasattr(est, "predict_proba"):
        return est.predict_proba(x)
    if hasattr(est, "decision_function") and hasattr(est, "classes_"):
        d = est.decision_function(x)
        return d.reshape(len(x), -1)
    return np.asarray(est.predict(x), np.float64).reshape(len(x), -1)


def ort_outputs(proto, x):
    """onnxruntime's (label or None, scores as an array) for an exported model."""
    import onnxruntime as ort

    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    outs = sess.run(None, {name: x.astype(np.float32)})
    names = [o.name for o in sess.get_outputs()]
    label = None
    scores = None
    for n, v in zip(names, outs):
        if isinstance(v, list):      # ZipMap: a list of {class: probability}
            keys = list(v[0].keys())
            scores = np.array([[row[k] for k in keys] for row in v], np.float64)
        elif np.asarray(v).dtype.kind in "iuUSO":
            label = np.asarray(v).reshape(-1)
        else:
            scores = np.asarray(v, np.float64)
    return label, scores.reshape(len(x), -1)
