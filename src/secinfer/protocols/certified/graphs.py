"""psi as an ONNX graph: the linear use cases written as one MatMul, so that
``secinfer run -p certified -m FILE.onnx`` takes a graph a user can inspect.

A graph qualifies when it is ``y = x @ w`` (``MatMul`` or ``Gemm`` without bias) with a
constant (n, 1) weight: all-ones weights are the ``sum`` use case, any others the
``weighted-sum`` use case with those weights; or the graph ``build("distance", ...)``
writes (named ``certified-distance``, its polynomial's coefficients c0, c1, c2 read from
it). ``build`` writes each; the CLI builds them for ``-m sum|weighted-sum|distance``.
"""

from __future__ import annotations

import numpy as np

from secinfer.errors import ProtocolError


_DISTANCE_OPS = ["Slice", "Slice", "Sub", "Mul", "Gemm", "Mul", "Mul", "Mul", "Add", "Add", "Gemm"]


def usecase_of(graph) -> tuple[str, list | None, list | None]:
    """(use case, weights, distance coefficients) of a qualifying graph, else ProtocolError."""
    nodes = [n for n in graph.nodes if n.op != "Identity"]
    if getattr(graph, "name", "") == "certified-distance":
        if [n.op for n in nodes] != _DISTANCE_OPS or not all(
                k in graph.initializers for k in ("c0", "c1", "c2")):
            raise ProtocolError("certified-distance graph does not have the distance form")
        return "distance", None, [float(np.asarray(graph.initializers[k]).reshape(-1)[0])
                                  for k in ("c0", "c1", "c2")]
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


def build(name: str, n: int, weights=None, step_bound: float = 4.0):
    """An ONNX model of a use case over n data points (real units)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if name == "distance":
        return _build_distance(n, step_bound)
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


def _build_distance(n: int, step_bound: float):
    """sum_i p(|p_{i+1} - p_i|^2) over a trace x = (x0, y0, x1, y1, ...), p the degree-2
    fit of sqrt (``usecases.sqrt_poly``), with Slice/Sub/Mul/MatMul."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from secinfer.protocols.certified.usecases import sqrt_poly

    if n % 2 or n < 4:
        raise ProtocolError("distance needs a trace of at least two (x, y) points")
    k = n // 2 - 1
    pair = np.zeros((n - 2, k), np.float32)
    pair[np.arange(0, n - 2, 2), np.arange(k)] = 1
    pair[np.arange(1, n - 2, 2), np.arange(k)] = 1
    c = sqrt_poly(step_bound).astype(np.float32)
    inits = [numpy_helper.from_array(v, name) for name, v in (
        ("pair", pair), ("ones", np.ones((k, 1), np.float32)), ("c0", c[:1]), ("c1", c[1:2]),
        ("c2", c[2:3]), ("s_hi", np.array([2, n], np.int64)), ("s_lo", np.array([0, n - 2], np.int64)),
        ("ax", np.array([1, 1], np.int64)))]
    inits = [i for i in inits if i.name not in ("s_hi", "s_lo", "ax")] + [
        numpy_helper.from_array(np.array([2], np.int64), "st_a"),
        numpy_helper.from_array(np.array([n], np.int64), "en_a"),
        numpy_helper.from_array(np.array([0], np.int64), "st_b"),
        numpy_helper.from_array(np.array([n - 2], np.int64), "en_b"),
        numpy_helper.from_array(np.array([1], np.int64), "axis1")]
    nodes = [
        helper.make_node("Slice", ["x", "st_a", "en_a", "axis1"], ["nxt"]),
        helper.make_node("Slice", ["x", "st_b", "en_b", "axis1"], ["cur"]),
        helper.make_node("Sub", ["nxt", "cur"], ["dlt"]),
        helper.make_node("Mul", ["dlt", "dlt"], ["sq"]),
        helper.make_node("MatMul", ["sq", "pair"], ["t"]),
        helper.make_node("Mul", ["t", "t"], ["t2"]),
        helper.make_node("Mul", ["t", "c1"], ["p1"]),
        helper.make_node("Mul", ["t2", "c2"], ["p2"]),
        helper.make_node("Add", ["p1", "p2"], ["p12"]),
        helper.make_node("Add", ["p12", "c0"], ["p"]),
        helper.make_node("MatMul", ["p", "ones"], ["psi"]),
    ]
    g = helper.make_graph(nodes, "certified-distance",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                          [helper.make_tensor_value_info("psi", TensorProto.FLOAT, [1, 1])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(m)
    return m


def cli_model_path(name: str, x, options: dict, workdir: str | None = None) -> str:
    """``secinfer run -p certified -m NAME``: the ONNX file of use case NAME over the input's
    data points (options: ``weights`` for weighted-sum, ``step_bound`` for distance)."""
    import os
    import tempfile

    import onnx

    from secinfer.protocols.certified.usecases import USECASES

    if name not in USECASES:
        raise ProtocolError(f"certified: -m takes an ONNX file or a use case "
                            f"({', '.join(sorted(USECASES))}), not {name!r}")
    n = int(np.asarray(x).size)
    model = build(name, n, options.get("weights"), float(options.get("step_bound", 4.0)))
    d = workdir or tempfile.mkdtemp(prefix="secinfer-certified-")
    out = os.path.join(d, f"certified-{name}.onnx")
    onnx.save(model, out)
    return out
