"""run_float against onnxruntime on hand-built graphs, one or more per supported op."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

from helpers import f32, make_model, ort_run
from secinfer.ir.float_exec import run_float, run_float_all
from secinfer.ir.onnx_import import load_model

R = np.random.default_rng(7)
N = h.make_node


def _cases():
    c = {}
    x4 = ("x", (2, 3, 9, 9))
    c["conv_pads_stride_bias"] = ([N("Conv", ["x", "w", "b"], ["y"], pads=[1, 2, 0, 1], strides=[2, 1])],
                                  x4, {"w": f32(R, 4, 3, 3, 2), "b": f32(R, 4)})
    c["conv_dilated_grouped"] = ([N("Conv", ["x", "w"], ["y"], group=3, dilations=[2, 2], pads=[2, 2, 2, 2])],
                                 ("x", (2, 6, 8, 8)), {"w": f32(R, 6, 2, 3, 3)})
    c["conv_depthwise_same"] = ([N("Conv", ["x", "w"], ["y"], group=3, auto_pad="SAME_UPPER", strides=[2, 2])],
                                x4, {"w": f32(R, 3, 1, 3, 3)})
    c["conv_same_lower"] = ([N("Conv", ["x", "w"], ["y"], auto_pad="SAME_LOWER", kernel_shape=[4, 4])],
                            x4, {"w": f32(R, 2, 3, 4, 4)})
    c["conv1d"] = ([N("Conv", ["x", "w", "b"], ["y"], pads=[1, 2], strides=[2])],
                   ("x", (2, 3, 17)), {"w": f32(R, 5, 3, 4), "b": f32(R, 5)})
    c["gemm_all_attrs"] = ([N("Gemm", ["x", "w", "c"], ["y"], transA=1, transB=1, alpha=0.5, beta=2.0)],
                           ("x", (6, 4)), {"w": f32(R, 5, 6), "c": f32(R, 1, 5)})
    c["gemm_matrix_bias"] = ([N("Gemm", ["x", "w", "c"], ["y"])], ("x", (4, 6)),
                             {"w": f32(R, 6, 3), "c": f32(R, 4, 3)})
    c["gemm_scalar_bias"] = ([N("Gemm", ["x", "w", "c"], ["y"], beta=0.5)], ("x", (4, 6)),
                             {"w": f32(R, 6, 3), "c": f32(R)})
    c["matmul_const_3d_plus_bias"] = ([N("MatMul", ["x", "w"], ["t"]), N("Add", ["t", "b"], ["y"])],
                                      ("x", (2, 5, 8)), {"w": f32(R, 8, 4), "b": f32(R, 4)})
    c["matmul_batched_act"] = ([N("Transpose", ["x"], ["xt"], perm=[0, 2, 1]), N("MatMul", ["x", "xt"], ["y"])],
                               ("x", (2, 5, 4)), {})
    c["add_sub_mul_bcast"] = ([N("Add", ["x", "a"], ["t1"]), N("Sub", ["s", "t1"], ["t2"]),
                               N("Mul", ["t2", "x"], ["t3"]), N("Mul", ["t3", "m"], ["y"])],
                              ("x", (2, 3, 4)), {"a": f32(R, 3, 1), "s": f32(R, 4), "m": f32(R, 1)})
    c["div_const_neg"] = ([N("Div", ["x", "d"], ["t"]), N("Neg", ["t"], ["y"])], ("x", (3, 4)),
                          {"d": np.array([2.0, -4.0, 8.0, 0.5], np.float32)})
    c["relu_sigmoid_tanh"] = ([N("Relu", ["x"], ["a"]), N("Sigmoid", ["x"], ["b"]), N("Tanh", ["a"], ["t"]),
                               N("Add", ["b", "t"], ["y"])], ("x", (3, 7)), {})
    c["erf_exp_sqrt"] = ([N("Erf", ["x"], ["a"]), N("Exp", ["a"], ["b"]), N("Sqrt", ["b"], ["y"])],
                         ("x", (3, 7)), {})
    c["maxpool_pads_ceil"] = ([N("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                 pads=[1, 1, 1, 1], ceil_mode=1)], x4, {})
    c["maxpool_dilated"] = ([N("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2])], x4, {})
    c["maxpool1d"] = ([N("MaxPool", ["x"], ["y"], kernel_shape=[3], strides=[2])], ("x", (2, 3, 11)), {})
    c["avgpool_exclude_pad"] = ([N("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                   pads=[1, 1, 1, 1])], x4, {})
    c["avgpool_include_pad"] = ([N("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                   pads=[1, 1, 1, 1], count_include_pad=1)], x4, {})
    c["avgpool_ceil"] = ([N("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)],
                         x4, {})
    c["global_pools"] = ([N("GlobalAveragePool", ["x"], ["a"]), N("GlobalMaxPool", ["x"], ["b"]),
                          N("Add", ["a", "b"], ["y"])], x4, {})
    bn = {"s": R.uniform(0.5, 2, 3).astype(np.float32), "bb": f32(R, 3), "m": f32(R, 3),
          "v": R.uniform(0.5, 2, 3).astype(np.float32)}
    c["batchnorm_standalone"] = ([N("BatchNormalization", ["x", "s", "bb", "m", "v"], ["y"], epsilon=1e-3)],
                                 x4, bn)
    c["conv_bn_folded"] = ([N("Conv", ["x", "w"], ["c"]), N("BatchNormalization", ["c", "s", "bb", "m", "v"], ["y"])],
                           x4, {"w": f32(R, 3, 3, 3, 3), **bn})
    c["gemm_bn_folded"] = ([N("Gemm", ["x", "w", "b"], ["c"]),
                            N("BatchNormalization", ["c", "s", "bb", "m", "v"], ["y"])],
                           ("x", (4, 5)), {"w": f32(R, 5, 3), "b": f32(R, 3), **bn})
    c["flatten_reshape_transpose"] = ([N("Flatten", ["x"], ["f"], axis=2), N("Reshape", ["f", "sh"], ["r"]),
                                       N("Transpose", ["r"], ["y"], perm=[2, 0, 1])],
                                      x4, {"sh": np.array([0, -1, 27], np.int64)})
    c["softmax_axes"] = ([N("Softmax", ["x"], ["a"], axis=1), N("Softmax", ["x"], ["b"]),
                          N("Add", ["a", "b"], ["y"])], ("x", (2, 3, 4)), {})
    c["layernorm"] = ([N("LayerNormalization", ["x", "g", "be"], ["y"], epsilon=1e-5)],
                      ("x", (2, 5, 8)), {"g": f32(R, 8), "be": f32(R, 8)})
    c["layernorm_axis1"] = ([N("LayerNormalization", ["x", "g"], ["y"], axis=1)],
                            ("x", (2, 3, 4)), {"g": f32(R, 3, 4)})
    c["concat_const_identity"] = ([N("Identity", ["x"], ["i"]), N("Concat", ["i", "k"], ["y"], axis=1)],
                                  ("x", (2, 3)), {"k": f32(R, 2, 2)})
    c["split_slice_squeeze"] = ([N("Split", ["x", "sp"], ["a", "b"], axis=1),
                                 N("Slice", ["b", "st", "en", "ax", "stp"], ["s"]),
                                 N("Unsqueeze", ["s", "ua"], ["u"]), N("Squeeze", ["u", "ua"], ["q"]),
                                 N("Add", ["q", "a"], ["y"])],
                                ("x", (2, 6, 5)),
                                {"sp": np.array([2, 4], np.int64), "st": np.array([3, -1], np.int64),
                                 "en": np.array([0, -100], np.int64), "ax": np.array([1, 2], np.int64),
                                 "stp": np.array([-2, -1], np.int64), "ua": np.array([0], np.int64)})
    c["gather_negative"] = ([N("Gather", ["x", "idx"], ["y"], axis=1)], ("x", (2, 5, 3)),
                            {"idx": np.array([[0, -1], [2, 2]], np.int64)})
    c["gelu"] = ([N("Gelu", ["x"], ["a"]), N("Gelu", ["x"], ["b"], approximate="tanh"),
                  N("Sub", ["a", "b"], ["y"])], ("x", (3, 6)), {})
    return c


CASES = _cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_float_matches_onnxruntime(case):
    nodes, (xname, xshape), inits = CASES[case]
    opset = 20 if case == "gelu" else 17
    model = make_model(nodes, {xname: xshape}, {"y": None}, inits, opset=opset)
    x = f32(R, *xshape)
    g = load_model(model)
    got = run_float(g, x)
    if case == "gelu":  # onnxruntime 1.31 has Gelu-20; compare with the formula if it lacks it
        try:
            ref = ort_run(model, {xname: x})[0]
        except Exception:
            pytest.skip("onnxruntime without Gelu-20")
    else:
        ref = ort_run(model, {xname: x})[0]
    assert got.shape == ref.shape
    assert np.max(np.abs(got - ref)) <= 1e-5 * max(1.0, float(np.max(np.abs(ref))))


def test_bn_and_bias_are_folded():
    g = load_model(make_model(*_as_model_args("conv_bn_folded")))
    assert [n.op for n in g.nodes] == ["Conv"] and len(g.nodes[0].inputs) == 3
    g = load_model(make_model(*_as_model_args("matmul_const_3d_plus_bias")))
    assert [n.op for n in g.nodes] == ["Gemm"] and len(g.nodes[0].inputs) == 3
    g = load_model(make_model(*_as_model_args("gemm_all_attrs")))
    # transA becomes an explicit Transpose; W is stored (K, N) with alpha folded in
    assert [n.op for n in g.nodes] == ["Transpose", "Gemm"]
    assert g.initializers[g.nodes[1].inputs[1]].shape == (6, 5)
    g = load_model(make_model(*_as_model_args("concat_const_identity")))
    assert "Identity" not in [n.op for n in g.nodes]


def _as_model_args(case):
    nodes, (xname, xshape), inits = CASES[case]
    return nodes, {xname: xshape}, {"y": None}, inits


def test_symbolic_batch_and_with_batch():
    nodes = [N("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), N("Relu", ["c"], ["r"]),
             N("Flatten", ["r"], ["f"]), N("Gemm", ["f", "w2"], ["y"], transB=1)]
    inits = {"w": f32(R, 2, 3, 3, 3), "w2": f32(R, 4, 2 * 5 * 5)}
    model = make_model(nodes, {"x": ("N", 3, 5, 5)}, {"y": ("N", 4)}, inits)
    g = load_model(model)
    assert g.inputs[0].shape == (None, 3, 5, 5) and g.shapes["y"] == (None, 4)
    for n in (1, 3):
        x = f32(R, n, 3, 5, 5)
        assert np.allclose(run_float(g, x), ort_run(model, {"x": x})[0], atol=1e-5)
    g3 = g.with_batch(3)
    assert g3.inputs[0].shape == (3, 3, 5, 5) and g3.shapes["f"] == (3, 50)
    assert load_model(model, batch=2).inputs[0].shape == (2, 3, 5, 5)


def test_intermediates_and_multiple_outputs():
    nodes = [N("Relu", ["x"], ["a"]), N("Sigmoid", ["a"], ["b"])]
    model = make_model(nodes, {"x": (2, 3)}, {"a": (2, 3), "b": (2, 3)})
    g = load_model(model)
    x = f32(R, 2, 3)
    outs = run_float_all(g, {"x": x})
    assert set(outs) == {"a", "b"}
    allt = run_float_all(g, x, intermediates=True)
    assert set(allt) >= {"x", "a", "b"}
    ref = ort_run(model, {"x": x})
    assert np.allclose(outs["a"], ref[0]) and np.allclose(outs["b"], ref[1], atol=1e-6)


def _flatten_via_shape(multiply: bool):
    nodes = [N("Relu", ["x"], ["r"]), N("Shape", ["r"], ["s"]),
             N("Gather", ["s", "zero"], ["n"], axis=0)]
    if multiply:
        nodes.append(N("Mul", ["n", "two"], ["n2"]))
    nodes += [N("Unsqueeze", ["n2" if multiply else "n", "ax0"], ["nu"]),
              N("Concat", ["nu", "minus1"], ["spec"], axis=0), N("Reshape", ["r", "spec"], ["f"]),
              N("Gemm", ["f", "w"], ["y"])]
    inits = {"zero": np.array(0, np.int64), "two": np.array(2, np.int64),
             "ax0": np.array([0], np.int64), "minus1": np.array([-1], np.int64),
             "w": f32(R, 12 if not multiply else 6, 3)}
    return make_model(nodes, {"x": ("N", 3, 4)}, {"y": None}, inits)


def test_dynamic_batch_through_shape_pattern():
    # the Shape -> Gather -> Unsqueeze -> Concat -> Reshape flatten of PyTorch exports
    model = _flatten_via_shape(multiply=False)
    g = load_model(model)
    reshape = next(n for n in g.nodes if n.op == "Reshape")
    assert reshape.attrs["shape"] == (0, -1) and g.shapes["y"] == (None, 3)
    for n in (1, 4):
        x = f32(R, n, 3, 4)
        assert np.allclose(run_float(g, x), ort_run(model, {"x": x})[0], atol=1e-5)


def test_arithmetic_on_dynamic_batch_is_refused():
    from secinfer.errors import UnsupportedOpError

    model = _flatten_via_shape(multiply=True)
    with pytest.raises(UnsupportedOpError, match="dynamic batch"):
        load_model(model)
    g = load_model(model, batch=2)  # fine with a fixed batch
    x = f32(R, 2, 3, 4)
    assert np.allclose(run_float(g, x), ort_run(model, {"x": x})[0], atol=1e-5)


@pytest.mark.parametrize("variant", ["input_alias", "two_aliases", "output_also_aliased", "dropout"])
def test_identity_and_dropout_outputs(variant):
    if variant == "input_alias":
        nodes, outs = [N("Identity", ["x"], ["y"])], {"y": (2, 3)}
    elif variant == "two_aliases":
        nodes = [N("Relu", ["x"], ["t"]), N("Identity", ["t"], ["y"]), N("Identity", ["t"], ["z"])]
        outs = {"y": (2, 3), "z": (2, 3)}
    elif variant == "output_also_aliased":
        nodes = [N("Relu", ["x"], ["y"]), N("Identity", ["y"], ["z"]), N("Neg", ["z"], ["w"])]
        outs = {"y": (2, 3), "z": (2, 3), "w": (2, 3)}
    else:
        nodes = [N("Relu", ["x"], ["t"]), N("Dropout", ["t"], ["y"])]
        outs = {"y": (2, 3)}
    model = make_model(nodes, {"x": (2, 3)}, outs)
    g = load_model(model)
    g.validate()
    x = f32(R, 2, 3)
    got = run_float_all(g, {"x": x})
    ref = ort_run(model, {"x": x})
    assert list(got) == list(outs)
    for name, r in zip(outs, ref):
        assert np.allclose(got[name], r)


EXTRA = {
    "pad_into_conv": ([N("Pad", ["x", "p"], ["xp"]), N("Conv", ["xp", "w"], ["y"], pads=[0, 1, 0, 0])],
                      (2, 3, 6, 6), {"p": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64),
                                     "w": f32(R, 2, 3, 3, 3)}, ["Conv"]),
    "pad_into_conv1d": ([N("Pad", ["x", "p", "v"], ["xp"]), N("Conv", ["xp", "w"], ["y"])],
                        (2, 3, 7), {"p": np.array([0, 0, 2, 0, 0, 1], np.int64),
                                    "v": np.array(0.0, np.float32), "w": f32(R, 2, 3, 3)}, ["Conv"]),
    "clip_min0": ([N("Clip", ["x", "lo"], ["y"])], (3, 4), {"lo": np.array(0.0, np.float32)}, ["Relu"]),
    "pow2_sqrt": ([N("Relu", ["x"], ["r"]), N("Pow", ["r", "two"], ["q"]), N("Pow", ["q", "half"], ["y"])],
                  (3, 4), {"two": np.array(2.0, np.float32), "half": np.array(0.5, np.float32)},
                  ["Relu", "Mul", "Sqrt"]),
    "reducemean_spatial": ([N("ReduceMean", ["x", "ax"], ["y"], keepdims=0)], (2, 3, 4, 5),
                           {"ax": np.array([2, 3], np.int64)}, ["GlobalAveragePool", "Flatten"]),
    "reducemean_keep": ([N("ReduceMean", ["x", "ax"], ["y"])], (2, 3, 4, 5),
                        {"ax": np.array([-1, -2], np.int64)}, ["GlobalAveragePool"]),
}


@pytest.mark.parametrize("case", sorted(EXTRA))
def test_rewritten_ops_match_onnxruntime(case):
    nodes, shape, inits, ops = EXTRA[case]
    model = make_model(nodes, {"x": shape}, {"y": None}, inits, opset=18)
    g = load_model(model)
    assert [n.op for n in g.nodes] == ops
    x = f32(R, *shape)
    ref = ort_run(model, {"x": x})[0]
    assert np.max(np.abs(run_float(g, x) - ref)) <= 1e-5 * max(1.0, float(np.max(np.abs(ref))))


@pytest.mark.parametrize("nodes,inits", [
    ([N("Pad", ["x", "p"], ["y"])], {"p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)}),
    ([N("Pad", ["x", "p"], ["xp"]), N("Relu", ["xp"], ["y"])], {"p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)}),
    ([N("Pad", ["x", "p"], ["xp"], mode="reflect"), N("Conv", ["xp", "w"], ["y"])],
     {"p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "w": f32(R, 1, 3, 3, 3)}),
    ([N("Pad", ["x", "p", "v"], ["xp"]), N("Conv", ["xp", "w"], ["y"])],
     {"p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "v": np.array(1.0, np.float32),
      "w": f32(R, 1, 3, 3, 3)}),
    ([N("Clip", ["x", "lo", "hi"], ["y"])], {"lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)}),
    ([N("Pow", ["x", "e"], ["y"])], {"e": np.array(3.0, np.float32)}),
    ([N("ReduceMean", ["x", "ax"], ["y"])], {"ax": np.array([1], np.int64)}),
])
def test_rewrites_refuse_what_they_cannot_express(nodes, inits):
    from secinfer.errors import UnsupportedOpError

    model = make_model(nodes, {"x": (1, 3, 5, 5)}, {"y": None}, inits, opset=18)
    with pytest.raises(UnsupportedOpError):
        load_model(model)
