"""certified as three OS processes over the authenticated socket transport, psi as ONNX."""

import numpy as np
import pytest

from secinfer.protocols.certified import usecases
from secinfer.protocols.certified.graphs import cli_model_path, usecase_of
from secinfer.ir.onnx_import import load_model


def test_weighted_sum_over_sockets(tmp_path):
    from secinfer.runtime.launcher import run_local

    rng = np.random.default_rng(5)
    x = rng.integers(0, 3, 30).astype(float)
    w = np.round(rng.uniform(0, 1, 30), 3)
    opts = {"weights": w.tolist()}
    path = cli_model_path("weighted-sum", x, opts, str(tmp_path))
    res = run_local(protocol="certified", security="malicious", model_path=path, input_array=x,
                    options={"he_params": "ckks-n10-insecure", "allow_insecure": True, "reps": 3},
                    timeout=300)
    assert abs(float(res.output[0]) - float(np.dot(w, x))) <= 1e-3 * float(np.dot(w, x))
    assert res.bytes_by_phase["online"] > 0


@pytest.mark.parametrize("name", ["sum", "weighted-sum", "distance"])
def test_onnx_forms_compute_psi_and_are_recognised(name, tmp_path):
    import onnxruntime as ort

    rng = np.random.default_rng(6)
    x = np.cumsum(rng.uniform(-1, 1, 12)).astype(np.float32)
    opts = {"weights": rng.uniform(0, 1, 12).tolist(), "step_bound": 3.0}
    path = cli_model_path(name, x, opts, str(tmp_path))
    got = ort.InferenceSession(path).run(None, {"x": x.reshape(1, -1)})[0].item()
    uc, weights, coeffs = usecase_of(load_model(path))
    assert uc == name
    desc = usecases.describe(name, x.size, weights, None, coeffs)
    u = usecases.get(name)
    want = usecases.reference(desc, x * u.unit) / u.unit
    assert abs(got - want) <= 1e-4 * max(1.0, abs(want))
