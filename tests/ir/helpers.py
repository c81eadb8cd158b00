"""Small ONNX model builders shared by the ir tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_model(nodes, inputs: dict, outputs: dict, inits: dict | None = None, opset: int = 17,
               name: str = "t") -> onnx.ModelProto:
    """inputs/outputs: name -> shape (None or str entries are symbolic)."""
    ins = [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v)) for k, v in inputs.items()]
    outs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, None if v is None else list(v))
            for k, v in outputs.items()]
    init = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    g = helper.make_graph(nodes, name, ins, outs, init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def ort_run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {k: np.asarray(v, np.float32) for k, v in feeds.items()})


def f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)
