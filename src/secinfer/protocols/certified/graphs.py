"""psi as an ONNX graph: the linear use cases written as one MatMul, so that
``secinfer run -p certified -m FILE.onnx`` takes a graph a user can inspect.

A graph qualifies when it is ``y = x @ w`` (``MatMul`` or ``Gemm`` without bias) with a
constant (n, 1) weight: all-ones weights are the ``sum`` use case, any others the
``weighted-sum`` use case with those weights. ``build(name, n, weights)`` writes such a
graph. The distance use case is not linear and is chosen by name (option usecase).
"""

from __future__ import annotations

import numpy as np

from secinfer.errors import ProtocolError


def usecase_of(graph) -> tuple[str, list | None, float | None]:
    """(use case, weights, step bound) of a qualifying graph, else ProtocolError."""
    nodes = [n for n in graph.nodes if n.op != "Identity"]
    if len(nodes) != 1 or nodes[0].op not in ("MatMul", "Gemm") or len(nodes[0].inputs) != 2:
        raise ProtocolError("certified takes psi as one MatMul x @ w (sum, weighted-sum) "
                            "or a named use case")
    w = graph.initializers.get(nodes[0].inputs[1])
    if w is None or w.ndim != 2 or w.shape[1] != 1:
        raise ProtocolError("certified: the MatMul's second operand must be a constant (n, 1)")
    w = np.asarray(w, dtype=np.float64).reshape(-1)
    if np.all(w == 1.0):
        return "sum", None, None
    return "weighted-sum", w.tolist(), None


def build(name: str, n: int, weights=None):
    """An ONNX model of a linear use case over n data points."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if name not in ("sum", "weighted-sum"):
        raise ProtocolError(f"no ONNX form for use case {name!r}")
    w = np.ones((n, 1), np.float32) if name == "sum" else \
        np.asarray(weights, np.float32).reshape(n, 1)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["psi"])], f"certified-{name}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
        [helper.make_tensor_value_info("psi", TensorProto.FLOAT, [1, 1])],
        [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(m)
    return m
