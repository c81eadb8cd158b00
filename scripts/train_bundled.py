#!/usr/bin/env python
"""Train the bundled models and write them under src/secinfer/ir/bundled/.

    .venv/bin/python scripts/train_bundled.py            # train, export, measure, write
    .venv/bin/python scripts/train_bundled.py --check    # retrain and compare, write nothing

Deterministic: fixed splits (random_state=0), fixed estimator seeds, and a seeded numpy
trainer for the CNN, so a rerun reproduces the same weights, ONNX files, held-out splits
and metrics. Data sets come with scikit-learn (nothing is downloaded).

Every model is exported by hand as a small standard-ONNX graph (input standardisation as
constant Sub/Mul, Gemm/Conv/Relu/AveragePool/Sigmoid). ``skl2onnx_model`` gives the
skl2onnx conversion of the same estimator, which the tests use as a second opinion.
The fixed-point figures come from ``secinfer.ir.evaluate`` when the fixed-point executor
is available.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from sklearn.exceptions import ConvergenceWarning
from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC, LinearSVR

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from secinfer.ir import bundled  # noqa: E402

OPSET = 17
IR_VERSION = 8

# ---- data ------------------------------------------------------------------------------------


def load_split(dataset: str):
    """(X_train, X_test, y_train, y_test): a 75/25 split, stratified for classes."""
    if dataset == "digits":
        d = load_digits()
        strat = d.target
    elif dataset == "breast_cancer":
        d = load_breast_cancer()
        strat = d.target
    elif dataset == "diabetes":
        d = load_diabetes()
        strat = None
    else:
        raise ValueError(dataset)
    return train_test_split(d.data, d.target, test_size=0.25, random_state=0, stratify=strat)


# ---- estimators ------------------------------------------------------------------------------


def fit_sklearn(name: str):
    """The fitted scikit-learn estimator behind a bundled model (a Pipeline)."""
    info = bundled.bundled_info(name)
    xtr, _, ytr, _ = load_split(info["dataset"])
    if name == "digits-mlp":
        # Pixels are 0..16; the model sees x/16 (a power of two: exact in fixed point).
        est = make_pipeline(
            _Scale16(),
            MLPClassifier(hidden_layer_sizes=(32,), activation="relu", alpha=1e-3,
                          max_iter=400, random_state=0))
    elif name == "cancer-logreg":
        est = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))
    elif name == "cancer-linsvc":
        est = make_pipeline(StandardScaler(),
                            LinearSVC(C=0.1, max_iter=20000, random_state=0))
    elif name == "diabetes-linreg":
        est = make_pipeline(StandardScaler(), LinearRegression())
    elif name == "diabetes-linsvr":
        est = make_pipeline(StandardScaler(),
                            LinearSVR(C=10.0, epsilon=0.0, loss="epsilon_insensitive",
                                      max_iter=200000, random_state=0, dual=True))
    else:
        raise ValueError(f"{name} is not a scikit-learn model")
    with warnings.catch_warnings():
        # The MLP stops at max_iter (a fixed budget keeps the run deterministic).
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(xtr, ytr)


class _Scale16(StandardScaler):
    """x/16 as a fixed scaler (mean 0, scale 16) so the pipeline shape is uniform."""

    def __init__(self) -> None:
        super().__init__()

    def fit(self, x, y=None):
        n = np.asarray(x).shape[1]
        self.mean_ = np.zeros(n)
        self.scale_ = np.full(n, 16.0)
        self.var_ = self.scale_ ** 2
        self.n_features_in_ = n
        self.n_samples_seen_ = np.asarray(x).shape[0]
        return self


LOGIT_PENALTY = 0.003


def train_cnn(seed: int = 0, epochs: int = 40, lr: float = 0.01, batch: int = 32) -> dict:
    """Conv 3x3 (1->8, pad 1) -> ReLU -> 2x2 mean pool -> dense 128->10, softmax loss,
    Adam; plain numpy (torch is not a dependency). Returns the weights."""
    xtr, _, ytr, _ = load_split("digits")
    rng = np.random.default_rng(seed)
    x = (xtr / 16.0).reshape(-1, 8, 8)
    n = x.shape[0]
    params = {
        "cw": rng.normal(0.0, np.sqrt(2.0 / 9), (8, 9)),    # (out channel, 3x3 taps)
        "cb": np.zeros(8),
        "fw": rng.normal(0.0, np.sqrt(1.0 / 128), (128, 10)),
        "fb": np.zeros(10),
    }
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(v) for k, v in params.items()}
    b1, b2, eps = 0.9, 0.999, 1e-8
    step = 0
    for _ in range(epochs):
        order = rng.permutation(n)
        for start in range(0, n, batch):
            idx = order[start:start + batch]
            grads = _cnn_grads(params, x[idx], ytr[idx])
            step += 1
            for k in params:
                m[k] = b1 * m[k] + (1 - b1) * grads[k]
                v[k] = b2 * v[k] + (1 - b2) * grads[k] ** 2
                mhat = m[k] / (1 - b1 ** step)
                vhat = v[k] / (1 - b2 ** step)
                params[k] = params[k] - lr * mhat / (np.sqrt(vhat) + eps)
    return params


def _patches(x: np.ndarray) -> np.ndarray:
    """(N, 8, 8) -> (N, 64, 9): the zero-padded 3x3 neighbourhood of every pixel."""
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1)))
    cols = [xp[:, di:di + 8, dj:dj + 8] for di in range(3) for dj in range(3)]
    return np.stack(cols, axis=-1).reshape(x.shape[0], 64, 9)


def cnn_forward(params: dict, x: np.ndarray):
    """x (N, 8, 8) in [0, 1] -> logits (N, 10) and the cache for backprop."""
    p = _patches(x)
    pre = p @ params["cw"].T + params["cb"]                    # (N, 64, 8)
    act = np.maximum(pre, 0.0)
    chw = act.transpose(0, 2, 1).reshape(-1, 8, 8, 8)          # (N, C, H, W)
    pooled = chw.reshape(-1, 8, 4, 2, 4, 2).mean(axis=(3, 5))  # (N, 8, 4, 4)
    flat = pooled.reshape(-1, 128)                             # channel-major, as Flatten
    logits = flat @ params["fw"] + params["fb"]
    return logits, (p, pre, flat)


def _cnn_grads(params: dict, x: np.ndarray, y: np.ndarray) -> dict:
    logits, (p, pre, flat) = cnn_forward(params, x)
    z = logits - logits.max(axis=1, keepdims=True)
    prob = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    prob[np.arange(len(y)), y] -= 1.0
    # Softmax cross-entropy plus LOGIT_PENALTY/2 * mean ||logits||^2: capping values
    # during training keeps the logits inside FX32's product range (|.| < 32) -- the
    # remedy [STAMP 5.3] suggests for fixed-point range failures.
    dlog = (prob + LOGIT_PENALTY * logits) / len(y)
    g = {"fw": flat.T @ dlog, "fb": dlog.sum(axis=0)}
    dpool = (dlog @ params["fw"].T).reshape(-1, 8, 4, 1, 4, 1) / 4.0
    dchw = np.broadcast_to(dpool, (len(y), 8, 4, 2, 4, 2)).reshape(-1, 8, 64)
    dpre = dchw.transpose(0, 2, 1) * (pre > 0)                 # (N, 64, 8)
    g["cw"] = np.einsum("npc,npk->ck", dpre, p)
    g["cb"] = dpre.sum(axis=(0, 1))
    return g


# ---- ONNX export -----------------------------------------------------------------------------


def _f32(a) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32))


def _model(name: str, nodes, inits, n_in: int, out_dim: int, meta: dict) -> onnx.ModelProto:
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", n_in])
    out = helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", out_dim])
    graph = helper.make_graph(nodes, name.replace("-", "_"), [inp], [out],
                              initializer=[numpy_helper.from_array(_f32(v), k)
                                           if v.dtype != np.int64 else
                                           numpy_helper.from_array(v, k)
                                           for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="secinfer/scripts/train_bundled.py")
    model.ir_version = IR_VERSION
    helper.set_model_props(model, {k: str(v) for k, v in meta.items()})
    onnx.checker.check_model(model)
    return model


def _standardise(scaler, inits: dict, nodes: list) -> str:
    """(x - mean) * (1/scale) as constant Sub and Mul nodes (the digits use Mul only)."""
    inits["inv_scale"] = 1.0 / scaler.scale_
    if np.any(scaler.mean_ != 0):
        inits["mean"] = scaler.mean_
        nodes.append(helper.make_node("Sub", ["input", "mean"], ["centred"], name="centred"))
        src = "centred"
    else:
        src = "input"
    nodes.append(helper.make_node("Mul", [src, "inv_scale"], ["z"], name="z"))
    return "z"


def export_sklearn(name: str, est: Pipeline) -> onnx.ModelProto:
    info = bundled.bundled_info(name)
    scaler, model = est.steps[0][1], est.steps[-1][1]
    nodes: list = []
    inits: dict = {}
    h = _standardise(scaler, inits, nodes)
    if isinstance(model, MLPClassifier):
        layers = list(zip(model.coefs_, model.intercepts_))
        for i, (w, b) in enumerate(layers):
            inits[f"W{i}"], inits[f"b{i}"] = w, b
            last = i == len(layers) - 1
            out = "output" if last else f"fc{i}"
            nodes.append(helper.make_node("Gemm", [h, f"W{i}", f"b{i}"], [out], name=out))
            if not last:
                nodes.append(helper.make_node("Relu", [out], [f"relu{i}"], name=f"relu{i}"))
                h = f"relu{i}"
        out_dim = layers[-1][0].shape[1]
    else:
        coef = np.atleast_2d(model.coef_)           # (1, n)
        inits["W"], inits["b"] = coef.T, np.atleast_1d(model.intercept_)
        sig = isinstance(model, LogisticRegression)
        gemm_out = "score" if sig else "output"
        nodes.append(helper.make_node("Gemm", [h, "W", "b"], [gemm_out], name="gemm"))
        if sig:
            nodes.append(helper.make_node("Sigmoid", ["score"], ["output"], name="output"))
        out_dim = 1
    meta = {"task": info["task"], "decision": info["decision"], "dataset": info["dataset"]}
    return _model(name, nodes, inits, info["n_features"], out_dim, meta)


def export_cnn(params: dict) -> onnx.ModelProto:
    info = bundled.bundled_info("digits-cnn")
    inits = {
        "inv_scale": np.array(1.0 / 16.0),
        "shape": np.array([-1, 1, 8, 8], dtype=np.int64),
        "conv_w": params["cw"].reshape(8, 1, 3, 3),
        "conv_b": params["cb"],
        "fc_w": params["fw"],
        "fc_b": params["fb"],
    }
    nodes = [
        helper.make_node("Mul", ["input", "inv_scale"], ["z"], name="z"),
        helper.make_node("Reshape", ["z", "shape"], ["img"], name="img"),
        helper.make_node("Conv", ["img", "conv_w", "conv_b"], ["conv"], name="conv",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"], name="relu"),
        helper.make_node("AveragePool", ["relu"], ["pool"], name="pool",
                         kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["pool"], ["flat"], name="flat", axis=1),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["output"], name="output"),
    ]
    meta = {"task": info["task"], "decision": info["decision"], "dataset": info["dataset"]}
    return _model("digits-cnn", nodes, inits, 64, 10, meta)


def skl2onnx_model(est: Pipeline, n_features: int) -> onnx.ModelProto:
    """skl2onnx's conversion of the pipeline's final estimator (it takes standardised
    input: feed ``est[:-1].transform(x)``), a second opinion for the tests."""
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType

    final = est.steps[-1][1]
    options = {id(final): {"zipmap": False}} if hasattr(final, "predict_proba") else None
    return to_onnx(final, initial_types=[("input", FloatTensorType([None, n_features]))],
                   target_opset={"": OPSET, "ai.onnx.ml": 3}, options=options)


def fit(name: str):
    """The trained model behind ``name``: a fitted Pipeline, or the CNN's weight dict."""
    return train_cnn() if name == "digits-cnn" else fit_sklearn(name)


def export(name: str, fitted) -> onnx.ModelProto:
    return export_cnn(fitted) if name == "digits-cnn" else export_sklearn(name, fitted)


def same_weights(a: onnx.ModelProto, b: onnx.ModelProto, rtol: float = 1e-5) -> bool:
    """Same graph and initializers equal up to ``rtol`` (BLAS may differ in the last bits
    between machines, so a retrain is compared by value, not byte for byte)."""
    if [n.op_type for n in a.graph.node] != [n.op_type for n in b.graph.node]:
        return False
    wa = {t.name: numpy_helper.to_array(t) for t in a.graph.initializer}
    wb = {t.name: numpy_helper.to_array(t) for t in b.graph.initializer}
    return wa.keys() == wb.keys() and all(
        wa[k].shape == wb[k].shape and np.allclose(wa[k], wb[k], rtol=rtol, atol=1e-7)
        for k in wa)


# ---- measurement -----------------------------------------------------------------------------


def run_onnx(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": x.astype(np.float32)})[0]


def _round(d: dict) -> dict:
    return {k: round(v, 6) for k, v in d.items()}


def measure(name: str, model: onnx.ModelProto, fitted) -> dict:
    info = bundled.bundled_info(name)
    x, y = bundled.bundled_testset(name)
    pred = bundled.predict_from_output(name, run_onnx(model, x))
    entry = {"task": info["task"], "metric": info["metric"], "dataset": info["dataset"],
             "n_test": int(len(y)), "float": _round(bundled.score(name, y, pred))}
    if name == "digits-cnn":
        logits, _ = cnn_forward(fitted, (x / 16.0).reshape(-1, 8, 8))
        entry["numpy"] = _round(bundled.score(name, y, np.argmax(logits, axis=1)))
    else:
        entry["sklearn"] = _round(bundled.score(name, y, fitted.predict(x)))
    return entry


def fixed_point_figures(name: str) -> dict:
    try:
        from secinfer.ir import evaluate
    except ImportError:
        return {}
    try:
        return evaluate.fixed_point_entry(name)
    except ImportError:   # the fixed-point executor is not there yet
        return {}


# ---- main ------------------------------------------------------------------------------------


def write_testsets() -> None:
    for dataset in ("digits", "breast_cancer", "diabetes"):
        _, xte, _, yte = load_split(dataset)
        path = bundled.testset_path(dataset)
        if path.is_file():
            with np.load(path) as old:
                if np.array_equal(old["X"], xte) and np.array_equal(old["y"], yte):
                    continue          # unchanged: keep the committed bytes
        np.savez_compressed(path, X=xte, y=yte)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="retrain and compare with the committed files; write nothing")
    args = ap.parse_args(argv)
    fitted = {name: fit(name) for name in bundled.bundled_names()}
    models = {name: export(name, f) for name, f in fitted.items()}
    if args.check:
        bad = [n for n, m in models.items()
               if not same_weights(onnx.load(bundled.bundled_path(n)), m)]
        print("differs:" if bad else "all bundled models reproduce", *bad)
        return 1 if bad else 0
    write_testsets()
    metrics = {}
    for name, model in models.items():
        bundled.BUNDLED_DIR.joinpath(f"{name}.onnx").write_bytes(model.SerializeToString())
        metrics[name] = measure(name, model, fitted[name])
        fixed = fixed_point_figures(name)
        if fixed:
            metrics[name]["fixed"] = fixed
        print(name, json.dumps(metrics[name]))
    import sklearn

    doc = {"generated_by": "scripts/train_bundled.py", "sklearn": sklearn.__version__,
           "split": "train_test_split(test_size=0.25, random_state=0, stratified for classes)",
           "models": metrics}
    bundled.METRICS_FILE.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
