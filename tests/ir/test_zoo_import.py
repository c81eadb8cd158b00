"""The importer and both executors on the zoo's small builders (regression for the ops
the zoo emits, including the Transformer's attention block)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import ort_run
from secinfer.arith.fixed import FX64
from secinfer.ir.error_bound import layerwise_errors
from secinfer.ir.fixed_exec import derived_error_bound, run_fixed
from secinfer.ir.float_exec import run_float
from secinfer.ir.onnx_import import load_model

zoo = pytest.importorskip("secinfer.ir.zoo")

SMALL = ["secureml-a", "network-b", "network-c", "lenet", "muse-a", "stamp-transformer"]


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in SMALL if n in zoo.ZOO])
def test_zoo_model_float_and_fixed(name):
    model = zoo.build(name, seed=1, batch=2)
    g = load_model(model)
    shape = tuple(2 if d is None else d for d in g.inputs[0].shape)
    x = np.random.default_rng(2).uniform(-1, 1, shape).astype(np.float32)
    y = run_float(g, x)
    ref = ort_run(model, {g.inputs[0].name: x})[0]
    assert np.max(np.abs(y - ref)) <= 1e-5 * max(1.0, float(np.max(np.abs(ref))))
    yq = FX64.decode(run_fixed(g, x, FX64, overflow="raise"))
    err = float(np.max(np.abs(yq - y)))
    assert err <= derived_error_bound(g, FX64, x=x)["bound"]
    for row in layerwise_errors(g, x, FX64):
        assert row["err"] <= row["bound"], row
    # the architecture crosses the wire without weights and comes back identical
    p = type(g).from_public_bytes(g.public_bytes())
    assert p.shapes == g.shapes and [n.op for n in p.nodes] == [n.op for n in g.nodes]
