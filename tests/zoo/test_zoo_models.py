"""The model zoo: every benchmark network is valid ONNX, runs in onnxruntime with its
declared shapes, is deterministic in its seed, and keeps activations in fixed-point range."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from secinfer.errors import ConfigError
from secinfer.ir import zoo

ALL = list(zoo.ZOO)
# Built and run in onnxruntime, but left out of the per-intermediate range sweep (time).
LARGE = {"vgg16", "resnet18", "resnet34", "resnet18-tiny", "resnet18-cifar"}
# The standard ONNX operators the zoo is allowed to use.
STANDARD_OPS = {"Conv", "Gemm", "MatMul", "Add", "Mul", "Relu", "MaxPool", "AveragePool",
                "GlobalAveragePool", "BatchNormalization", "Flatten", "Reshape",
                "Transpose", "Softmax", "LayerNormalization"}
FX32_PRODUCT_BOUND = 32.0   # 2^(32-1-2*13): a pre-truncation sum must stay below this


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _input(shape, seed: int = 0) -> np.ndarray:
    # Images in [0, 1); the transformer's embedded tokens are of the same order.
    return np.random.default_rng(seed).random(shape).astype(np.float32)


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_model_checks_and_runs(name):
    info = zoo.describe(name)
    model = zoo.build(name, seed=0, batch=1)
    onnx.checker.check_model(model)
    assert model.opset_import[0].version == zoo.OPSET
    ops = {n.op_type for n in model.graph.node}
    assert ops <= STANDARD_OPS, ops - STANDARD_OPS
    # declared shapes
    in_dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert tuple(in_dims) == info.input_shape
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    out_dims = [d.dim_value for d in inferred.graph.output[0].type.tensor_type.shape.dim]
    assert tuple(out_dims) == info.output_shape
    # parameter count = trainable initializer elements (BN running stats and public
    # constants such as shapes and positional tables are not parameters)
    buffers = ("bn_mean", "bn_var", "shape", "scale", "pos")
    counted = sum(int(np.prod(t.dims)) for t in model.graph.initializer
                  if not t.name.startswith(buffers))
    assert counted == info.params
    # onnxruntime runs it with the declared input shape and gives a finite output
    y = _session(model).run(None, {"input": _input(info.input_shape)})[0]
    assert y.shape == info.output_shape
    assert np.all(np.isfinite(y))
    assert np.std(y) > 1e-3          # not a degenerate constant


def test_published_parameter_counts():
    counts = {m.name: m.params for m in zoo.list_models()}
    assert counts["secureml-a"] == 784 * 128 + 128 + 128 * 128 + 128 + 128 * 10 + 10
    assert counts["resnet18"] == 11_689_512          # torchvision's ResNet-18
    assert counts["resnet34"] == 21_797_672          # torchvision's ResNet-34
    assert round(counts["resnet20"] / 1e6, 2) == 0.27  # [SAFHIRE 6]: 0.27M
    assert round(counts["resnet18-cifar"] / 1e6, 1) == 11.2  # [SAFHIRE 6]: 11.2M
    assert 33e6 < counts["vgg16"] < 34e6
    assert set(counts) == set(zoo.ZOO)


def test_architecture_details_follow_the_papers():
    ops = {name: [n.op_type for n in zoo.build(name).graph.node]
           for name in ("network-b", "network-c", "muse-a", "muse-b", "resnet20",
                        "stamp-transformer")}
    assert "MaxPool" not in ops["network-b"] and ops["network-b"].count("Conv") == 1
    assert ops["network-c"].count("MaxPool") == 2                    # MiniONN, max pool
    assert ops["muse-a"].count("AveragePool") == 2 and "MaxPool" not in ops["muse-a"]
    assert ops["muse-b"].count("Conv") == 7 and ops["muse-b"].count("Relu") == 7
    assert ops["resnet20"].count("Conv") == 19 + 2                  # 19 + 2 projections
    assert {"Softmax", "LayerNormalization", "MatMul"} <= set(ops["stamp-transformer"])
    resnet34 = zoo.build("resnet34")
    assert "MaxPool" not in {n.op_type for n in resnet34.graph.node}  # [SAFHIRE 6]


def test_same_seed_same_bytes_other_seed_other_weights():
    a = zoo.build("network-c", seed=7)
    b = zoo.build("network-c", seed=7)
    c = zoo.build("network-c", seed=8)
    assert a.SerializeToString() == b.SerializeToString()
    wa = numpy_helper.to_array(a.graph.initializer[0])
    wc = numpy_helper.to_array(c.graph.initializer[0])
    assert wa.shape == wc.shape and not np.array_equal(wa, wc)


@pytest.mark.parametrize("name", ["secureml-a", "muse-b", "stamp-transformer"])
def test_batch_rows_are_independent(name):
    single = zoo.describe(name).input_shape
    x = _input((3,) + single[1:], seed=3)
    y3 = _session(zoo.build(name, batch=3)).run(None, {"input": x})[0]
    s1 = _session(zoo.build(name, batch=1))
    for i in range(3):
        y1 = s1.run(None, {"input": x[i:i + 1]})[0]
        np.testing.assert_allclose(y3[i:i + 1], y1, rtol=1e-4, atol=1e-5)


def test_folded_batchnorm_computes_the_same_function():
    plain = zoo.build("resnet20", seed=1)
    folded = zoo.build("resnet20", seed=1, fold_bn=True)
    assert "BatchNormalization" not in {n.op_type for n in folded.graph.node}
    assert zoo.describe("resnet20", fold_bn=True).params < zoo.describe("resnet20").params
    x = _input((1, 3, 32, 32), seed=5)
    ya = _session(plain).run(None, {"input": x})[0]
    yb = _session(folded).run(None, {"input": x})[0]
    np.testing.assert_allclose(ya, yb, rtol=1e-4, atol=1e-4)


def test_resnet18_dataset_option():
    tiny = zoo.build("resnet18", dataset="tiny")
    dims = [d.dim_value for d in tiny.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 3, 64, 64]
    with pytest.raises(ConfigError):
        zoo.build("resnet18", dataset="mnist")


def test_unknown_names_and_options_are_refused():
    with pytest.raises(ConfigError):
        zoo.build("resnet-1000")
    with pytest.raises(ConfigError):
        zoo.build("lenet", colour="blue")
    with pytest.raises(ConfigError):
        zoo.build("lenet", batch=0)


@pytest.mark.parametrize("name", [n for n in ALL if n not in LARGE])
def test_activations_stay_in_fx32_product_range(name):
    """Every intermediate value (so every pre-truncation dot product) stays below the
    FX32 bound 2^(l-1-2f) = 32 on a [0,1) input: the He-scaled weights keep the random
    models usable by the 32-bit protocols."""
    model = zoo.build(name)
    names = [o for n in model.graph.node for o in n.output if o != "output"]
    for o in names:
        model.graph.output.append(helper.make_empty_tensor_value_info(o))
    outs = _session(model).run(None, {"input": _input(zoo.describe(name).input_shape, 11)})
    worst = max(float(np.abs(v).max()) for v in outs)
    assert worst < FX32_PRODUCT_BOUND / 2, worst
