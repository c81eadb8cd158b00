"""Issue-2 gate: the float reference equals onnxruntime on EVERY zoo and bundled model
(max abs error <= 1e-5, relative to the output's magnitude for the large networks), and
the fixed-point reference stays within its derived bound on the bundled models and
reproduces their recorded accuracy."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from secinfer.arith.fixed import FX64
from secinfer.crypto.prg import PRG
from secinfer.ir import bundled, zoo
from secinfer.ir.fixed_exec import derived_error_bound, run_fixed
from secinfer.ir.float_exec import run_float
from secinfer.ir.onnx_import import load_model


def _ort(model_bytes: bytes, x: np.ndarray) -> np.ndarray:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return sess.run(None, {name: x.astype(np.float32)})[0]


def _uniform(shape, seed):
    u = PRG.for_tests(seed).uint64(tuple(shape)).astype(np.float64) / 2.0 ** 64
    return (2 * u - 1).astype(np.float32)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(zoo.ZOO))
def test_zoo_float_reference_matches_onnxruntime(name):
    model = zoo.build(name, seed=3, batch=1)
    graph = load_model(model)
    shape = tuple(1 if d is None else d for d in graph.inputs[0].shape)
    x = _uniform(shape, 11)
    ours = run_float(graph, x)
    ref = _ort(model.SerializeToString(), x)
    assert ours.shape == ref.shape
    # onnxruntime computes in float32, we in float64: compare at float32 resolution of the
    # output's magnitude (an absolute 1e-5 for outputs of order 1)
    tol = 1e-5 * max(1.0, float(np.max(np.abs(ref))))
    assert float(np.max(np.abs(ours - ref))) <= tol


@pytest.mark.parametrize("name", bundled.bundled_names())
def test_bundled_float_matches_onnxruntime_and_fixed_is_within_bound(name):
    path = bundled.bundled_path(name)
    graph = load_model(str(path))
    X, y = bundled.bundled_testset(name)
    ours = run_float(graph, X)
    ref = _ort(path.read_bytes(), X)
    assert float(np.max(np.abs(ours - ref))) <= 1e-5 * max(1.0, float(np.max(np.abs(ref))))
    fixed = FX64.decode(run_fixed(graph, X, FX64))
    bound = derived_error_bound(graph, FX64, x=X)["bound"]
    assert float(np.max(np.abs(fixed - ours))) <= bound
    recorded = bundled.bundled_info(name)["metrics"]
    metric = bundled.bundled_info(name)["metric"]
    got = bundled.score(name, y, bundled.predict_from_output(name, fixed.reshape(len(X), -1)))[metric]
    assert got == pytest.approx(recorded["fixed"]["fx64f13"][metric], abs=1e-5)
