"""ASTRA as real processes over authenticated sockets (the launcher), not only in-memory."""

import importlib.resources as ir

import numpy as np
import pytest

from secinfer.runtime.launcher import run_local


@pytest.mark.parametrize("security", ["malicious", "fair"])
def test_astra_processes_bundled_logreg(security):
    base = ir.files("secinfer.ir") / "bundled"
    d = np.load(base / "breast_cancer_test.npz")
    x = d["X"][:12]
    res = run_local("astra", security, str(base / "cancer-logreg.onnx"), x, timeout=120)
    from secinfer.ir.float_exec import run_float
    from secinfer.ir.onnx_import import load_model
    ref = (run_float(load_model(str(base / "cancer-logreg.onnx")), x.astype(np.float32))[:, 0] > 0.5)
    assert np.array_equal(np.asarray(res.output)[:, 0], ref.astype(float))
    assert res.rounds["online"] >= 3 and res.bytes_by_phase["online"] > 0
