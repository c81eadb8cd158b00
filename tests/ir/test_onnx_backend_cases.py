"""The ONNX backend node test cases shipped in the onnx package, through load_model + run_float.

Every case (all ops, not only supported ones) must either reproduce ONNX's expected
outputs or be refused with a typed error (UnsupportedOpError / ModelError): never a
wrong answer. Cases run twice: as shipped, and with every input but the first baked in
as an initializer (weights are constants in real models) keeping only the first output.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
from onnx import numpy_helper

from secinfer.errors import ModelError, UnsupportedOpError
from secinfer.ir.float_exec import run_float_all
from secinfer.ir.onnx_import import load_model
from secinfer.ir.outputs import predictions

# Ops that must have at least one backend case reproduced exactly (as shipped or baked).
MUST_COVER = {"Conv", "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Relu", "MaxPool",
              "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "BatchNormalization",
              "Flatten", "Reshape", "Transpose", "Softmax", "Sigmoid", "LayerNormalization",
              "Identity", "Concat", "Split", "Slice", "Squeeze", "Unsqueeze", "Gather", "Tanh",
              "Erf", "Exp", "Sqrt", "Neg", "Gelu", "Dropout", "Sum"}


def _collect():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return collect_testcases(None)


def _tolerances(expected: np.ndarray, case) -> tuple[float, float]:
    if expected.dtype in (np.float16,) or expected.dtype.name == "bfloat16":
        return 1e-2, 1e-2
    return max(1e-4, case.rtol), max(1e-5, case.atol)


def _graph_inputs(model):
    inits = {i.name for i in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def _baked(model: onnx.ModelProto, inputs: list) -> tuple[onnx.ModelProto, list] | None:
    gin = _graph_inputs(model)
    if len(gin) < 2 and len(model.graph.output) < 2:
        return None
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    keep = gin[0].name
    for vi, val in zip(gin[1:], inputs[1:]):
        if not isinstance(val, np.ndarray):
            return None
        g.initializer.append(numpy_helper.from_array(val, vi.name))
    new_inputs = [vi for vi in g.input if vi.name == keep]
    del g.input[:]
    g.input.extend(new_inputs)
    first = g.output[0]
    del g.output[1:]
    used = {i for n in g.node for i in n.input} | {first.name}
    for n in g.node:
        for k, o in enumerate(n.output):
            if k > 0 and o not in used:
                n.output[k] = ""
    return m, inputs[:1]


def _run(model, inputs, outputs, case) -> str:
    """'ok', 'refused' or a failure description."""
    try:
        g = load_model(model)
    except (UnsupportedOpError, ModelError):
        return "refused"
    feeds = {vi.name: v for vi, v in zip(_graph_inputs(model), inputs)}
    try:
        got = run_float_all(g, feeds)
    except (UnsupportedOpError, ModelError):
        return "refused"
    labels = (g.meaning or {}).get("label_outputs", [])
    for vi, exp in zip(model.graph.output, outputs):
        exp = np.asarray(exp)
        if vi.name in labels:   # a label output: the argmax of the scores, taken on the client
            pred = predictions(g.meaning, got[g.output_names[0]])
            if not np.array_equal(pred.reshape(-1), exp.reshape(-1)):
                return f"{vi.name}: labels {pred.reshape(-1)[:5]} != expected {exp.reshape(-1)[:5]}"
            continue
        y = got[vi.name]
        if y.shape != exp.shape:
            return f"{vi.name}: shape {y.shape} != expected {exp.shape}"
        rtol, atol = _tolerances(exp, case)
        if not np.allclose(y, exp.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True):
            return f"{vi.name}: max abs err {np.nanmax(np.abs(y - exp)):.3g}"
    return "ok"


def test_backend_node_cases_match_or_are_refused():
    cases = _collect()
    assert len(cases) > 500
    failures, covered, n_ok = [], set(), 0
    for case in cases:
        if case.kind != "node" or not case.data_sets:
            continue
        inputs, outputs = case.data_sets[0]
        if not all(isinstance(v, np.ndarray) for v in list(inputs) + list(outputs)):
            continue  # sequences/optionals/TensorProto payloads: not tensors we can feed
        ops = {n.op_type for n in case.model.graph.node}
        variants = [(case.model, list(inputs), list(outputs))]
        b = _baked(case.model, list(inputs))
        if b is not None:
            variants.append((b[0], b[1], list(outputs)[:1]))
        for model, ins, outs in variants:
            r = _run(model, ins, outs, case)
            if r == "ok":
                n_ok += 1
                covered |= ops
            elif r != "refused":
                failures.append(f"{case.name}: {r}")
    assert not failures, "wrong answers:\n" + "\n".join(failures[:30])
    missing = MUST_COVER - covered
    assert not missing, f"supported ops with no reproduced backend case: {sorted(missing)}"
    assert n_ok >= 150
