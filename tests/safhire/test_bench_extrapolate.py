"""The bench's per-layer extrapolation (bench/safhire_suite.extrapolate): per-round counts
read from the graph, and unit costs fitted to measured rounds."""

from __future__ import annotations

import pytest

from secinfer.bench import safhire_suite as S
from secinfer.cli.resolve import model_path
from secinfer.ir.onnx_import import load_model


def test_round_costs_of_resnet20():
    rc = S._round_costs(load_model(model_path("zoo:resnet20")))
    assert len(rc) == 21
    assert rc[0]["macs"] == 3 * 16 * 9 * 32 * 32 and rc[0]["outputs"] == 16 * 32 * 32
    assert rc[0]["inputs"] == 3 * 32 * 32
    # a residual round reads the block's input too; the head is a GAP round (4096 -> 64,
    # issue 18) and then the Gemm (640) on its 64 requantized averages
    assert rc[2]["sources"] == [1, 2] and rc[2]["inputs"] == 2 * 16 * 32 * 32
    assert rc[-2]["macs"] == 64 * 8 * 8 and rc[-2]["outputs"] == 64
    assert rc[-1]["macs"] == 64 * 10 and rc[-1]["outputs"] == 10 and rc[-1]["inputs"] == 64
    assert sum(r["outputs"] for r in rc) == 188490          # the packed values the bench reports


def test_extrapolation_recovers_a_linear_cost_model():
    """Rounds measured under CPU = 2e-6 MACs + 3e-5 outputs (linear), 1e-4 per packed value:
    the fit finds the units and predicts another network's rounds exactly."""
    rc = S._round_costs(load_model(model_path("zoo:resnet20")))
    per_round = [{"round": r["round"], "cpu_s": {"linear": 2e-6 * r["macs"] + 3e-5 * r["outputs"],
                                                  "pack": 1e-4 * r["outputs"], "extract": 1e-5 * r["inputs"],
                                                  "shuffle": 0.0, "unshuffle": 0.0}} for r in rc[:4]]
    row = {"model": "zoo:resnet20", "b": 12, "gamma": 2, "bytes_down": 1000.0 * 105,
           "bytes_up": 5000.0 + 4 * 1000.0 * 142, "bytes_up_keys": 5000.0, "client_cpu_s": 1.0}
    ex = S.extrapolate("zoo:resnet20", row, 2048, 2, per_round=per_round)
    assert ex["EXTRAPOLATED"] is True
    assert ex["unit_cpu_s"]["linear_per_mac"] == pytest.approx(2e-6)
    assert ex["unit_cpu_s"]["linear_per_output"] == pytest.approx(3e-5)
    for got, r in zip(ex["per_round"], rc):
        assert got["linear_s"] == pytest.approx(2e-6 * r["macs"] + 3e-5 * r["outputs"])
        assert got["pack_s"] == pytest.approx(1e-4 * r["outputs"])
    assert ex["output_buffer_GB"] == pytest.approx(16384 * 2052 * 8 / 1e9)
