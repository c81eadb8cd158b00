"""CRISP end to end on the bundled digits models: outputs equal the fixed-point oracle."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from secinfer.arith.fixed import FX32, FX64
from secinfer.ir import bundled, zoo
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model

sys.path.insert(0, os.path.dirname(__file__))
from crisp_helpers import run_crisp  # noqa: E402

ROWS = 3


def _model(name):
    return load_model(bundled.bundled_path(name))


@pytest.mark.parametrize("name", ["digits-mlp", "digits-cnn"])
@pytest.mark.parametrize("security", ["malicious", "semi-honest"])
def test_digits_equal_oracle(name, security):
    g = _model(name)
    X, _ = bundled.bundled_testset(name)
    x = X[10:10 + ROWS]
    res = run_crisp(g, x, security)
    for role, r in res.items():
        assert not isinstance(r, BaseException), (role, r)
    out = res["client"].output_ring
    ref = run_fixed(g, x, FX64)
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(bundled.predict_from_output(name, res["client"].output),
                                  bundled.predict_from_output(name, FX64.decode(ref)))
    assert res["server"].output is None and res["dealer"].output is None
    info = res["client"].info
    assert info["share_ring_bits"] == (104 if security == "malicious" else 64)


def test_fx32_ring_lifted_to_72_bits():
    g = _model("digits-mlp")
    X, _ = bundled.bundled_testset("digits-mlp")
    res = run_crisp(g, X[:2], "malicious", cfg=FX32)
    assert res["client"].info["share_ring_bits"] == 72
    np.testing.assert_array_equal(res["client"].output_ring, run_fixed(g, X[:2], FX32, overflow="ignore"))


@pytest.mark.slow
def test_maxpool_tree_network_c():
    g = load_model(zoo.build("network-c", seed=3))
    x = np.linspace(-1, 1, 784).reshape(1, 1, 28, 28)
    res = run_crisp(g, x, "malicious")
    assert not isinstance(res["client"], BaseException), res
    np.testing.assert_array_equal(res["client"].output_ring, run_fixed(g, x, FX64))


def test_larger_statistical_parameter_runs():
    """s = 45 (k = 109) brings the cheating bound (s+2) 2^-(s+1) below 2^-40 (docs)."""
    g = _model("digits-mlp")
    X, _ = bundled.bundled_testset("digits-mlp")
    res = run_crisp(g, X[:2], "malicious", extra={"stat_bits": 45})
    assert res["client"].info["share_ring_bits"] == 109
    np.testing.assert_array_equal(res["client"].output_ring, run_fixed(g, X[:2], FX64))


def test_unsupported_models_are_refused_with_a_typed_error():
    from secinfer.errors import UnsupportedOpError
    from secinfer.protocols.crisp.protocol import SPEC

    for name in bundled.bundled_names():
        g = _model(name)
        try:
            SPEC.check_model(g, "malicious")
        except UnsupportedOpError as e:
            assert e.op and e.node
