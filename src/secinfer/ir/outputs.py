"""One meaning for a model's output: the ONNX graph's own output and the predicted class.

A protocol computes the graph's first output (the *scores*: probabilities, decision
values or regression values). ``meaning_of(graph)`` says what those are: the task, the
class labels, the decision rule that turns scores into a prediction, and how the ONNX
graph's own output is rebuilt from them (a binary scikit-learn classifier's ONNX output
has two columns [1 - p, p] while the secure graph computes p alone; see onnx_ml.py).

* ``model_output(meaning, out)``: the output as the ONNX graph (and onnxruntime) define it;
* ``predictions(meaning, out)``: class labels (classifiers) or values (regressors), the
  argmax of the scores taken on the client after the output is revealed;
* ``labels_from_indices``: when a protocol reveals only the class (ASTRA's classification
  reveal), its 0/1 output is the class index.

Graphs without ai.onnx.ml steps get a meaning from their shape (``default_meaning``);
bundled models from their recorded decision rule (``bundled_meaning``).
"""

from __future__ import annotations

import numpy as np

from secinfer.errors import ConfigError

OUTPUT_KINDS = ("scores", "labels")


def default_meaning(graph) -> dict:
    """For a plain graph: a final Softmax is a classifier (argmax), a final Sigmoid with
    one column a binary classifier (p > 0.5), several columns are class scores (argmax),
    one column without a Sigmoid is a value (regression, or a decision score)."""
    out = graph.outputs[0]
    width = out.shape[-1] if out.shape else 1
    last = next((n for n in reversed(graph.nodes) if out.name in n.outputs), None)
    op = last.op if last is not None else ""
    if op == "Softmax" or (width and width > 1):
        decision, task = "argmax", "classification"
    elif op == "Sigmoid":
        decision, task = "threshold:0.5", "classification"
    else:
        decision, task = "identity", "regression"
    kind = {"Softmax": "probabilities", "Sigmoid": "probabilities"}.get(op, "scores" if task != "regression"
                                                                         else "values")
    return {"task": task, "classes": None, "decision": decision, "binary": None, "score_kind": kind,
            "label_outputs": [], "zipmap": False, "onnx_output": out.name, "output": out.name,
            "guessed": True}


def bundled_meaning(name: str, graph) -> dict:
    """The meaning of a bundled model, from its recorded decision rule."""
    from secinfer.ir import bundled

    info = bundled.bundled_info(name)
    m = default_meaning(graph)
    m.pop("guessed", None)
    m["decision"] = info["decision"]
    m["task"] = info["task"]
    if info["task"] == "classification":
        m["classes"] = [0, 1] if info["decision"].startswith("threshold") else None
        if info["decision"] == "threshold:0":
            m["score_kind"] = "decision"
    return m


def meaning_of(graph) -> dict:
    return dict(graph.meaning) if getattr(graph, "meaning", None) else default_meaning(graph)


def model_output(meaning: dict, out) -> np.ndarray:
    """The protocol's output -> the ONNX graph's own first output (scores as it defines them)."""
    y = np.asarray(out, dtype=np.float64)
    mode = meaning.get("binary")
    if mode is None:
        return y
    col = y.reshape(y.shape[0], -1)[:, :1]
    other = 1.0 - col if mode == "proba" else -col
    return np.concatenate([other, col], axis=1)


def _class_values(meaning: dict, idx: np.ndarray) -> np.ndarray:
    classes = meaning.get("classes")
    if not classes:
        return idx.astype(np.int64)
    arr = np.asarray(classes)
    if np.any(idx < 0) or np.any(idx >= len(arr)):
        raise ConfigError(f"class index out of range for {len(arr)} classes")
    return arr[idx]


def predictions(meaning: dict, out) -> np.ndarray:
    """Scores (the protocol's output) -> predicted class labels, or values for regressors."""
    y = np.asarray(out, dtype=np.float64)
    y2 = y.reshape(y.shape[0], -1) if y.ndim else y.reshape(1, 1)
    rule = meaning.get("decision", "identity")
    if rule == "argmax":
        return _class_values(meaning, np.argmax(y2, axis=1))
    if rule.startswith("threshold:"):
        return _class_values(meaning, (y2[:, 0] > float(rule.split(":", 1)[1])).astype(np.int64))
    return y2[:, 0] if y2.shape[1] == 1 else y2


def labels_from_indices(meaning: dict, idx) -> np.ndarray:
    """A protocol that reveals only the class index (0/1) -> the class labels."""
    i = np.asarray(idx).reshape(-1).astype(np.int64)
    return _class_values(meaning, i)


def is_classifier(meaning: dict) -> bool:
    return meaning.get("decision", "identity") != "identity"


def format_rows(meaning: dict, output, preds, label_only: bool = False, limit: int = 50) -> str:
    """One row per sample: its index, the predicted class (or value) and the model's output."""
    preds = np.asarray(preds)
    y = np.asarray(output, dtype=np.float64)
    y2 = y.reshape(len(preds), -1) if y.size and len(preds) else y.reshape(0, 0)
    cls = is_classifier(meaning)
    head = "prediction" if not cls else "predicted class"
    lines = []
    if label_only or y2.size == 0:
        lines.append(f"{'sample':>6}  {head}")
    else:
        what = meaning.get("score_kind", "output")
        classes = meaning.get("classes")
        cols = f"{what} per class {list(classes)}" if cls and classes and y2.shape[1] == len(classes) else what
        lines.append(f"{'sample':>6}  {head:<16} {cols}")
    for i in range(min(len(preds), limit)):
        p = preds[i]
        shown = f"{p:.6g}" if isinstance(p, (float, np.floating)) else str(p)
        if label_only or y2.size == 0:
            lines.append(f"{i:>6}  {shown}")
        else:
            vals = " ".join(f"{v:.6g}" for v in y2[i])
            lines.append(f"{i:>6}  {shown:<16} {vals}")
    if len(preds) > limit:
        lines.append(f"   ... {len(preds) - limit} more rows (use --json or --output for all)")
    return "\n".join(lines)
