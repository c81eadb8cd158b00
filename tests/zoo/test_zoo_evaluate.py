"""Float vs fixed-point accuracy: the figures recorded in metrics.json are reproduced by
the fixed-point oracle, and overflow is reported rather than hidden."""

from __future__ import annotations

import json

import numpy as np
import pytest

from secinfer.arith.fixed import FX32, FX64
from secinfer.ir import bundled, evaluate, zoo
from secinfer.ir.onnx_import import load_model

RECORDED = json.loads(bundled.METRICS_FILE.read_text())["models"]


@pytest.mark.parametrize("cfg", [FX64, FX32], ids=lambda c: c.name)
@pytest.mark.parametrize("name", bundled.bundled_names())
def test_fixed_point_figures_reproduce_metrics_json(name, cfg):
    report = evaluate.accuracy_report(name, cfg)
    recorded = RECORDED[name]["fixed"][cfg.name]
    for key, value in report["fixed"].items():
        assert value == pytest.approx(recorded[key], abs=1e-5), key
    assert report["overflow_nodes"] == recorded["overflow_nodes"]
    # the float executor agrees with onnxruntime's figure
    for key, value in report["float"].items():
        assert value == pytest.approx(RECORDED[name]["float"][key], abs=1e-5), key


@pytest.mark.parametrize("name", bundled.bundled_names())
def test_fx64_keeps_the_float_accuracy(name):
    report = evaluate.accuracy_report(name, FX64)
    assert report["overflow_nodes"] == []
    if "agreement" in report:
        assert report["agreement"] == 1.0
        assert report["fixed"]["accuracy"] == report["float"]["accuracy"]
    else:
        assert abs(report["fixed"]["r2"] - report["float"]["r2"]) < 1e-3
        assert report["max_abs_output_error"] < 0.5      # targets are 25..346


def test_fx32_regression_overflow_is_reported():
    """Diabetes targets (25..346) exceed what a product holds in Z_2^32 with f = 13
    (|sum| < 2^(32-1-26) = 32): the report must name the overflowing node."""
    report = evaluate.accuracy_report("diabetes-linreg", FX32)
    assert report["overflow_nodes"] == ["gemm"]
    assert report["fixed"]["r2"] < report["float"]["r2"] - 0.1


def test_fixed_point_entry_shape():
    entry = evaluate.fixed_point_entry("cancer-logreg")
    assert set(entry) == {"fx64f13", "fx32f13"}
    assert {"accuracy", "agreement_with_float", "overflow_nodes",
            "max_abs_output_error"} <= set(entry["fx32f13"])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["secureml-a", "network-b", "network-c", "muse-a",
                                  "resnet20", "stamp-transformer"])
def test_zoo_models_agree_in_fx32(name):
    r = evaluate.zoo_agreement(name, FX32, n=2)
    assert r["overflow_nodes"] == []
    assert r["argmax_agreement"] == 1.0
    assert r["max_abs_output_error"] < 0.05


# The ImageNet/VGG-sized models import too (seconds each); kept out to keep the area fast.
@pytest.mark.parametrize("name", [n for n in zoo.ZOO
                                  if zoo.describe(n).params < 5_000_000])
def test_zoo_model_imports(name):
    graph = load_model(zoo.build(name))
    info = zoo.describe(name)
    assert tuple(graph.shapes[graph.input_names[0]])[1:] == info.input_shape[1:]
    assert np.prod(info.output_shape) > 0
