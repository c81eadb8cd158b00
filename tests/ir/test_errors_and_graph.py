"""Typed errors with clear messages; public architecture bytes; summary."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper as h

from helpers import f32, make_model
from secinfer.arith.fixed import FX64
from secinfer.errors import ModelError, ShapeError, UnsupportedOpError
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.float_exec import run_float
from secinfer.ir.graph import Graph
from secinfer.ir.onnx_import import load_model

N = h.make_node
R = np.random.default_rng(5)


def small_cnn():
    nodes = [N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), N("Relu", ["c"], ["r"]),
             N("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             N("Flatten", ["p"], ["f"]), N("Gemm", ["f", "w2", "b2"], ["y"], transB=1)]
    inits = {"w": np.full((4, 3, 3, 3), 0.123456789, np.float32), "b": f32(R, 4),
             "w2": f32(R, 10, 64), "b2": f32(R, 10)}
    return make_model(nodes, {"x": ("N", 3, 8, 8)}, {"y": ("N", 10)}, inits, name="cnn")


def test_malformed_bytes_give_model_error():
    with pytest.raises(ModelError, match="not a valid ONNX model"):
        load_model(b"\x08\x07garbage\xff\xff\xff")
    good = small_cnn().SerializeToString()
    with pytest.raises(ModelError):
        load_model(good[: len(good) // 2])
    with pytest.raises(ModelError, match="cannot read model file"):
        load_model("/nonexistent/model.onnx")
    with pytest.raises(ModelError):
        load_model(12345)


def test_checker_failure_is_model_error():
    m = make_model([N("Relu", ["x"], ["y"])], {"x": (2, 3)}, {"y": (2, 3)})
    m.graph.node[0].input[0] = "undefined_tensor"
    with pytest.raises(ModelError):
        load_model(m)


def test_unsupported_op_names_op_and_node():
    m = make_model([N("Hardmax", ["x"], ["y"], name="hm1")], {"x": (2, 3)}, {"y": (2, 3)})
    with pytest.raises(UnsupportedOpError) as ei:
        load_model(m)
    assert ei.value.op == "Hardmax" and ei.value.node == "hm1"
    assert "Hardmax" in str(ei.value) and "hm1" in str(ei.value)


@pytest.mark.parametrize("node,inits,xshape,detail", [
    (N("Conv", ["x", "w"], ["y"]), {"w": f32(R, 2, 3, 2, 2, 2)}, (1, 3, 4, 4, 4), "3-D"),
    (N("LayerNormalization", ["x", "g"], ["y", "mean"]), {"g": f32(R, 4)}, (2, 4), "Mean"),
    (N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], training_mode=1),
     {k: f32(R, 2) ** 2 for k in "sbmv"}, (1, 2, 3), "(?i)training_mode"),
    (N("Reshape", ["x", "s"], ["y"], allowzero=1), {"s": np.array([0, 12], np.int64)}, (1, 12), "allowzero"),
    (N("Gelu", ["x"], ["y"], approximate="cubic"), {}, (2, 2), "approximate"),
])
def test_unsupported_attribute_values(node, inits, xshape, detail):
    outs = {o: None for o in node.output}
    try:
        m = make_model([node], {"x": xshape}, outs, inits, opset=20)
    except Exception:
        pytest.skip("onnx refuses to build this model")
    with pytest.raises((UnsupportedOpError, ModelError), match=detail):
        load_model(m, check=False)


def test_non_constant_weights_and_divisor_are_refused():
    m = make_model([N("Conv", ["x", "w"], ["y"])], {"x": (1, 1, 3, 3), "w": (1, 1, 2, 2)}, {"y": None})
    with pytest.raises(UnsupportedOpError, match="constant"):
        load_model(m)
    m = make_model([N("Div", ["x", "d"], ["y"])], {"x": (2,), "d": (2,)}, {"y": None})
    with pytest.raises(UnsupportedOpError, match="divisor"):
        load_model(m)


def test_wrong_input_shape_names_expected_and_got():
    g = load_model(small_cnn())
    with pytest.raises(ShapeError) as ei:
        run_float(g, np.zeros((2, 3, 9, 8), np.float32))
    msg = str(ei.value)
    assert "(N, 3, 8, 8)" in msg and "(2, 3, 9, 8)" in msg and "'x'" in msg
    with pytest.raises(ShapeError):
        run_fixed(g, np.zeros((3, 8, 8), np.float32), FX64)
    with pytest.raises(ShapeError, match="missing input"):
        run_float(g, {"other": np.zeros((1, 3, 8, 8))})


def test_public_bytes_roundtrip_without_weights():
    g = load_model(small_cnn())
    b = g.public_bytes()
    assert isinstance(b, bytes)
    d = json.loads(b)  # plain JSON, no pickle
    assert d["format"] == "secinfer-ir/1"
    assert b"0.1234" not in b  # no weight values
    p = Graph.from_public_bytes(b)
    assert [n.op for n in p.nodes] == [n.op for n in g.nodes]
    assert [n.attrs for n in p.nodes] == [n.attrs for n in g.nodes]
    assert p.shapes == g.shapes
    assert {k: v.shape for k, v in p.weight_info.items()} == {k: v.shape for k, v in g.weight_info.items()}
    assert not p.has_weights and g.has_weights
    assert p.stats()["params"] == g.stats()["params"]
    with pytest.raises(ModelError, match="no weight values"):
        run_float(p, np.zeros((1, 3, 8, 8)))
    with pytest.raises(ModelError):
        Graph.from_public_bytes(b"{not json")
    with pytest.raises(ModelError):
        Graph.from_public_bytes(json.dumps({"format": "secinfer-ir/1", "name": "x"}).encode())


def test_summary_counts_params_and_macs():
    g = load_model(small_cnn())
    st = g.stats()
    assert st["params"] == 4 * 27 + 4 + 640 + 10
    assert st["macs"] == 4 * 8 * 8 * 27 + 64 * 10
    s = g.summary()
    assert "Conv" in s and "Gemm" in s and "762 parameters" in s and f"{st['macs']:,} MACs" in s


def test_graph_validate_rejects_bad_graphs():
    g = load_model(small_cnn())
    g.nodes[0].op = "Bogus"
    with pytest.raises(ModelError, match="not a canonical op"):
        g.validate()
    g = load_model(small_cnn())
    g.nodes.reverse()
    with pytest.raises(ModelError, match="before it is defined"):
        g.validate()


def test_public_bytes_with_inconsistent_shapes_are_refused():
    g = load_model(small_cnn())
    d = json.loads(g.public_bytes())
    d["shapes"]["f"] = [None, 65]
    with pytest.raises(ModelError, match="inconsistent"):
        Graph.from_public_bytes(json.dumps(d).encode())
    d = json.loads(g.public_bytes())
    for n in d["nodes"]:
        if n["op"] == "Conv":
            n["attrs"]["strides"] = "xx"
    with pytest.raises(ModelError):
        Graph.from_public_bytes(json.dumps(d).encode())


def _mutate(model, rng):
    """One random structural or byte-level corruption of a valid model."""
    import onnx
    from onnx import numpy_helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    n = g.node[int(rng.integers(0, len(g.node)))]
    k = int(rng.integers(0, 6))
    if k == 0 and n.attribute:
        a = n.attribute[int(rng.integers(0, len(n.attribute)))]
        if a.ints:
            a.ints[int(rng.integers(0, len(a.ints)))] = int(rng.integers(-3, 6))
        elif a.type == onnx.AttributeProto.INT:
            a.i = int(rng.integers(-3, 6))
    elif k == 1 and len(n.input) > 1:
        i, j = rng.choice(len(n.input), 2, replace=False)
        n.input[int(i)], n.input[int(j)] = n.input[int(j)], n.input[int(i)]
    elif k == 2 and len(g.initializer):
        del g.initializer[int(rng.integers(0, len(g.initializer)))]
    elif k == 3 and len(g.initializer):
        t = g.initializer[int(rng.integers(0, len(g.initializer)))]
        arr = numpy_helper.to_array(t).reshape(-1)
        t.CopyFrom(numpy_helper.from_array(arr[: max(len(arr) - 1, 0)], t.name))
    elif k == 4:
        n.op_type = ["Relu", "Conv", "Gemm", "Softmax", "MaxPool", "Reshape"][int(rng.integers(0, 6))]
    else:
        b = bytearray(m.SerializeToString())
        b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
        return bytes(b)
    return m


def test_corrupted_models_give_typed_errors_only():
    from secinfer.errors import SecinferError

    rng = np.random.default_rng(123)
    base = small_cnn()
    outcomes = {"ok": 0, "typed": 0}
    for _ in range(150):
        m = _mutate(base, rng)
        try:
            g = load_model(m)
            x = rng.standard_normal(tuple(2 if d is None else d for d in g.inputs[0].shape))
            run_float(g, x)
            run_fixed(g, x, FX64, overflow="ignore")
            outcomes["ok"] += 1
        except SecinferError:
            outcomes["typed"] += 1
    assert outcomes["typed"] > 20 and outcomes["ok"] > 20


def test_corrupted_public_architecture_gives_typed_errors_only():
    import copy

    from secinfer.errors import SecinferError

    rng = np.random.default_rng(9)
    base = json.loads(load_model(small_cnn()).public_bytes())
    junk = [None, "x", -1, 0, 3, 2.5, [], [1], [0, -1], {"a": 1}, True, [[1, 2]], 10 ** 12]
    typed = 0
    for _ in range(300):
        d = copy.deepcopy(base)
        node = d
        while True:  # walk to a random container and replace one child
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                break
            k = keys[int(rng.integers(0, len(keys)))]
            child = node[k]
            if rng.random() < 0.35 or not isinstance(child, (dict, list)) or not child:
                node[k] = copy.deepcopy(junk[int(rng.integers(0, len(junk)))])
                break
            node = child
        try:
            g = Graph.from_public_bytes(json.dumps(d).encode())
            g.summary()
        except SecinferError:
            typed += 1
    assert typed > 100
