"""Small trained models shipped with secinfer, and their held-out test splits.

Trained by ``scripts/train_bundled.py`` on data sets that ship inside scikit-learn (no
download): the 8x8 digits, breast cancer and diabetes. Every model is a plain
standard-ONNX graph (Sub/Mul input standardisation, Gemm, Relu, Conv, AveragePool,
Sigmoid) with a symbolic batch dimension, input "input" and output "output". Graphs stop
at scores: ``predict_from_output`` turns the output into class labels (argmax, or a
threshold for the binary models) or regression values, so a secure protocol never needs
an argmax.

``metrics.json`` holds the float figures on the held-out split (onnxruntime, and the
scikit-learn estimator itself) and, once measured by ``secinfer.ir.evaluate``, the
fixed-point figures for FX64 and FX32.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from secinfer.errors import ConfigError

BUNDLED_DIR = Path(__file__).resolve().parent
METRICS_FILE = BUNDLED_DIR / "metrics.json"


@dataclass(frozen=True)
class BundledInfo:
    name: str
    dataset: str          # the held-out split file is <dataset>_test.npz
    task: str             # "classification" | "regression"
    metric: str           # headline metric: "accuracy" | "r2"
    estimator: str        # how it was trained
    decision: str         # "argmax" | "threshold:<t>" | "identity"
    n_features: int
    description: str


_INFOS = [
    BundledInfo("digits-mlp", "digits", "classification", "accuracy",
                "sklearn.neural_network.MLPClassifier(hidden_layer_sizes=(32,), relu)",
                "argmax", 64,
                "x/16 -> Gemm 64-32 -> Relu -> Gemm 32-10 (logits)"),
    BundledInfo("digits-cnn", "digits", "classification", "accuracy",
                "numpy Adam trainer in scripts/train_bundled.py (sklearn has no CNN)",
                "argmax", 64,
                "x/16 -> Reshape 1x8x8 -> Conv 3x3 (1->8, pad 1) -> Relu -> AveragePool 2 "
                "-> Flatten -> Gemm 128-10 (logits)"),
    BundledInfo("cancer-logreg", "breast_cancer", "classification", "accuracy",
                "sklearn StandardScaler + LogisticRegression", "threshold:0.5", 30,
                "(x-mean)*(1/std) -> Gemm 30-1 -> Sigmoid (P[benign])"),
    BundledInfo("cancer-linsvc", "breast_cancer", "classification", "accuracy",
                "sklearn StandardScaler + LinearSVC", "threshold:0", 30,
                "(x-mean)*(1/std) -> Gemm 30-1 (decision score)"),
    BundledInfo("diabetes-linreg", "diabetes", "regression", "r2",
                "sklearn StandardScaler + LinearRegression", "identity", 10,
                "(x-mean)*(1/std) -> Gemm 10-1"),
    BundledInfo("diabetes-linsvr", "diabetes", "regression", "r2",
                "sklearn StandardScaler + LinearSVR", "identity", 10,
                "(x-mean)*(1/std) -> Gemm 10-1"),
]
_BY_NAME = {i.name: i for i in _INFOS}


def bundled_names() -> list[str]:
    return [i.name for i in _INFOS]


def _info(name: str) -> BundledInfo:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ConfigError(f"unknown bundled model {name!r}; known: {bundled_names()}") from None


def bundled_info(name: str) -> dict:
    """Task kind, metric, estimator kind, decision rule and the recorded metrics."""
    out = asdict(_info(name))
    out["metrics"] = bundled_metrics().get(name, {})
    return out


def bundled_path(name: str) -> Path:
    path = BUNDLED_DIR / f"{_info(name).name}.onnx"
    if not path.is_file():
        raise ConfigError(f"bundled model file {path} is missing; run scripts/train_bundled.py")
    return path


def testset_path(dataset: str) -> Path:
    return BUNDLED_DIR / f"{dataset}_test.npz"


def bundled_testset(name: str) -> tuple[np.ndarray, np.ndarray]:
    """The held-out split (X float64 raw features, y int64 labels or float64 targets)."""
    info = _info(name)
    path = testset_path(info.dataset)
    if not path.is_file():
        raise ConfigError(f"held-out split {path} is missing; run scripts/train_bundled.py")
    with np.load(path, allow_pickle=False) as data:
        x = data["X"].astype(np.float64)
        y = data["y"].astype(np.int64 if info.task == "classification" else np.float64)
    return x, y


def bundled_metrics() -> dict:
    if not METRICS_FILE.is_file():
        return {}
    return json.loads(METRICS_FILE.read_text())["models"]


def predict_from_output(name: str, output: np.ndarray) -> np.ndarray:
    """Model output (N, k) -> predictions: class labels (int64) or values (float64)."""
    rule = _info(name).decision
    out = np.asarray(output, dtype=np.float64)
    if out.ndim != 2:
        raise ConfigError(f"{name}: expected a (N, k) output, got shape {out.shape}")
    if rule == "argmax":
        return np.argmax(out, axis=1).astype(np.int64)
    if rule.startswith("threshold:"):
        return (out[:, 0] > float(rule.split(":", 1)[1])).astype(np.int64)
    return out[:, 0]


def score(name: str, y_true: np.ndarray, y_pred: np.ndarray) -> dict:
    """Accuracy for classifiers; R^2 and MAE for regressors (no sklearn needed)."""
    y_true = np.asarray(y_true)
    y_pred = np.asarray(y_pred)
    if _info(name).task == "classification":
        return {"accuracy": float(np.mean(y_true == y_pred))}
    resid = y_true - y_pred
    ss_tot = float(np.sum((y_true - y_true.mean()) ** 2))
    return {"r2": 1.0 - float(np.sum(resid ** 2)) / ss_tot, "mae": float(np.mean(np.abs(resid)))}
