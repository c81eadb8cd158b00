"""Tiny ONNX models built in tests (shared across test folders)."""

from __future__ import annotations

import numpy as np


def gemm_model(path, w: float, b: float, name: str = "big_bias") -> str:
    """y = x @ [[w]] + [b], one feature in, one out, saved at ``path``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "B"], ["y"], name=name)], "bias",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])],
        [numpy_helper.from_array(np.array([[w]], np.float32), "W"),
         numpy_helper.from_array(np.array([b], np.float32), "B")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return str(path)
