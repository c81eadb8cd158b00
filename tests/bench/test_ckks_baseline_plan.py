"""The CKKS baseline's layouts, layer-kind counts and extrapolation arithmetic (no
encryption: the encrypted engine is tested in tests/he/test_bootstrap.py)."""

import numpy as np
import pytest

from secinfer.bench.ckks_baseline import (
    Layout, conv_coo, conv_kinds, extrapolate_bootstrap, extrapolate_network, layout_for,
)
from secinfer.errors import ConfigError


@pytest.mark.parametrize("shape,span", [((16, 32, 32), 16384), ((32, 16, 16), 8192), ((64, 8, 8), 4096)])
def test_multiplexed_layouts_are_injective_and_compact(shape, span):
    s = layout_for(shape, 32).slots()
    assert len(np.unique(s)) == len(s) == int(np.prod(shape))
    assert s.min() == 0 and s.max() == span - 1          # gaps filled by channels: no holes


def test_layout_refuses_a_tensor_off_the_grid():
    with pytest.raises(ConfigError):
        layout_for((4, 12, 12), 32)


def test_conv_coo_between_layouts_is_the_convolution():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 4, 3, 3))
    lin, lout = Layout(4, 8, 8, 8), Layout(8, 4, 4, 8)
    x = rng.standard_normal((4, 8, 8))
    rows, cols, vals = conv_coo(w, 2, 1, lin, lout)
    slots = np.zeros(256)
    slots[lin.slots()] = x.reshape(-1)
    y = np.zeros(8 * 16)
    np.add.at(y, rows, vals * slots[cols])
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1)))
    ref = np.zeros((8, 4, 4))
    for co in range(8):
        for oy in range(4):
            for ox in range(4):
                ref[co, oy, ox] = np.sum(w[co] * xp[:, 2 * oy:2 * oy + 3, 2 * ox:2 * ox + 3])
    assert np.allclose(y, ref.reshape(-1))


def test_resnet20_kinds_and_extrapolation():
    from secinfer.ir import zoo
    from secinfer.ir.onnx_import import load_model

    g = load_model(zoo.build("resnet20", seed=0, fold_bn=True).SerializeToString())
    kinds, relus = conv_kinds(g)
    assert relus == 19 and sum(k["count"] for k in kinds.values()) == 21
    assert kinds["16->16 k3 s1 32x32"]["count"] == 6 and kinds["64->64 k3 s1 8x8"]["count"] == 5
    boot = extrapolate_bootstrap({"params": "p", "log_n": 13, "bootstrap_s": 2.0, "bootstrap_cpu_s": 1.0,
                                  "key_bytes": 10})
    assert boot["extrapolated"] and boot["time_factor"] == pytest.approx(2 ** 3 * 16 / 13)
    meas = {t: {"count": k["count"], "wall_s": 1.0, "cpu_s": 0.5} for t, k in kinds.items()}
    meas["relu_poly"] = {"count": relus, "wall_s": 2.0, "cpu_s": 1.0}
    tot = extrapolate_network(meas, boot)
    assert tot["extrapolated"] and tot["bootstraps"] == 19
    assert tot["wall_s"] == pytest.approx(21 * 1.0 + 19 * 2.0 + 19 * boot["bootstrap_s"])
    assert tot["cpu_s"] == pytest.approx(21 * 0.5 + 19 * 1.0 + 19 * boot["bootstrap_cpu_s"])
