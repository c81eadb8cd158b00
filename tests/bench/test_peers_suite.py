"""The peers suite's workloads are the models issue #23 names, and run where they should."""

import numpy as np
import onnxruntime as ort
import pytest

from secinfer.bench import peers_suite as ps
from secinfer.ir.float_exec import run_float
from secinfer.ir.onnx_import import load_model


@pytest.mark.parametrize("wl,in_shape,out_shape", [("W1", (3, 784), (3, 1)), ("W2", (3, 784), (3, 1)),
                                                    ("W3", (3, 784), (3, 10)), ("W4", (3, 1, 28, 28), (3, 10))])
def test_workload_models_match_onnxruntime(wl, in_shape, out_shape):
    model = ps.build_workload(wl)
    x = ps.workload_input(wl, 3)
    assert x.shape == in_shape
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"input": x.astype(np.float32)})[0]
    got = run_float(load_model(model), x)
    assert got.shape == out_shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert ps.build_workload(wl).SerializeToString() == model.SerializeToString()  # fixed seed


def test_runnable_says_why_not():
    graph = load_model(ps.build_workload("W3"))
    assert ps._runnable("stamp", "W3", graph) is None
    assert "Relu" in ps._runnable("astra", "W3", graph)        # ASTRA runs linear models only
    assert "sign" in ps._runnable("stamp", "W2", load_model(ps.build_workload("W2")))
    assert ps._runnable("astra", "W2", load_model(ps.build_workload("W2"))) is None


def test_every_target_row_is_in_the_full_plan():
    rows, reps = ps._plan(quick=False)
    assert reps == 5 and set(ps.TARGETS) <= set(rows)
