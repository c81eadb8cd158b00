"""STAMP with every party in its own OS process over the real (ZeroMQ CURVE) transport,
each party's LTEE emulation a further process behind it."""

import numpy as np
import pytest

from secinfer.arith.fixed import FX32
from secinfer.ir.bundled import bundled_path, bundled_testset
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model


@pytest.mark.slow
@pytest.mark.parametrize("security", ["semi-honest", "malicious"])
def test_stamp_over_sockets(security):
    from secinfer.runtime.launcher import run_local
    x, _ = bundled_testset("digits-mlp")
    x = x[:16]
    res = run_local("stamp", security, model_path=str(bundled_path("digits-mlp")), input_array=x,
                    fixed="fx32f13", timeout=240)
    g = load_model(bundled_path("digits-mlp"))
    assert np.array_equal(res.output_ring, run_fixed(g.with_batch(16), x, FX32))
    assert res.rounds["online"] >= 6
    info = res.parties["p1"]["info"]
    assert info["ltee"] == "emulation" and info["bus"]["online_bytes"] > 0
