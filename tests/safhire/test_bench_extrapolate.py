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


def test_the_full_bench_sweeps_every_b_and_gamma_on_the_three_resnets(monkeypatch):
    """Tables 3-5 need every (b, gamma) of every network: the full bench asks for each, the
    best gamma first, and a failing run becomes a skipped row naming its error."""
    from secinfer.bench import safhire_suite as S

    seen = []

    def fake_measure(model, b, gamma, network, x, threads=1, qcache=None, **kw):
        seen.append((model, b, gamma))
        if (model, b, gamma) == ("zoo:resnet34", 16, 0):
            raise MemoryError("test: this one fails")
        return {"model": model, "b": b, "gamma": gamma, "e2e_s": 1.0, "setup_s": 0.0, "server_s": 1.0,
                "server_cpu_s": 1.0, "server_linear_s": 0.5, "client_s": 0.1, "model_s_at_1.25MBps": 2.0,
                "oracle_equal": True}

    monkeypatch.setattr(S, "_measure", fake_measure)
    from secinfer.bench import ckks_baseline

    monkeypatch.setattr(ckks_baseline, "baseline_rows", lambda *a, **k: {"server_measured": {
        "wall_s": 1.0, "cpu_s": 1.0, "extrapolated": False}})       # (the real one runs for hours)
    skipped = []
    rows, _ = S._resnet20_rows(S._gamma_order((0, 1, 2)), lambda m: None, skipped)
    large = S._large_rows(S._gamma_order((0, 1, 2)), lambda m: None, skipped)
    assert {(b, g) for m, b, g in seen if m == "zoo:resnet20"} == {(b, g) for b in (8, 12, 16) for g in (0, 1, 2)}
    for net in ("zoo:resnet18-tiny", "zoo:resnet34"):
        runs = [(b, g) for m, b, g in seen if m == net]
        assert set(runs) == {(b, g) for b in (8, 12, 16) for g in (0, 1, 2)} and runs[0] == (12, 2)
    assert len(rows) == 9 and len(large) == 17
    assert any(s.get("model") == "zoo:resnet34" and s.get("b") == 16 and s.get("gamma") == 0
               and "MemoryError" in s["why"] for s in skipped)
