"""CRISP folds the bias into the truncated sum: its ARS gate takes acc + b 2^f, and equals
the reference's trunc(acc) + b only while |acc + b 2^f| < 2^(n-1) (docs/protocols/crisp.md,
"Bias" and the Claim after it). The reference executor itself only needs |acc| inside the
ring, so a query with |acc| < product limit <= |acc + b 2^f| is computed exactly by the
reference and wrongly by crisp: the pre-launch check refuses it for crisp (issue #22 item 3)
and still accepts it for the protocols that add the bias after the truncation."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from secinfer.api import prepare
from secinfer.arith.fixed import FX32, FX64
from secinfer.errors import FixedPointRangeError
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model
from secinfer.ir.validate import check_run, overflow_nodes, range_report
from model_helpers import gemm_model

sys.path.insert(0, os.path.dirname(__file__))
from crisp_helpers import run_crisp  # noqa: E402


def _band(cfg):
    """A bias and an input with |acc| << product limit <= |acc + b|, both far inside the
    value range (the reference's own answer does not wrap)."""
    lim = cfg.product_max_abs
    return lim, np.array([[1.0]])       # w = 1: acc = x = 1; acc + b = lim + 1


def _semi_honest_differs(g, x, cfg) -> bool:
    res = run_crisp(g, x, "semi-honest", cfg=cfg)
    assert not isinstance(res["client"], BaseException), res
    return not np.array_equal(res["client"].output_ring, run_fixed(g, x, cfg, overflow="raise"))


def _malicious_blames_the_client(g, x, cfg) -> bool:
    res = run_crisp(g, x, "malicious", cfg=cfg)
    err = res["client"]
    return isinstance(err, BaseException) and "crisp-consistency" in str(err) and "client" in str(err)


@pytest.mark.parametrize("cfg", [FX32, FX64], ids=lambda c: c.name)
def test_crisp_would_differ_from_the_reference_in_the_band(tmp_path, cfg):
    """The gap itself, on a query the reference computes exactly: semi-honest crisp returns
    another answer (a silent wrong answer), malicious crisp aborts its MAC check and names
    the honest client as the cheat (the gate's u is mu (z mod 2^n), Lin's MAC mu z)."""
    b, x = _band(cfg)
    g = load_model(gemm_model(tmp_path / "m.onnx", 1.0, b)).with_batch(1)
    ref = run_fixed(g, x, cfg, overflow="raise")      # the reference computes it exactly
    assert cfg.decode(ref)[0, 0] == b + 1.0
    assert _semi_honest_differs(g, x, cfg)
    assert _malicious_blames_the_client(g, x, cfg)
    # just inside the band (acc + b < limit) crisp equals the reference bit for bit
    x_in = np.array([[-1.0]])
    assert not _semi_honest_differs(g, x_in, cfg)
    res = run_crisp(g, x_in, "malicious", cfg=cfg)
    np.testing.assert_array_equal(res["client"].output_ring, run_fixed(g, x_in, cfg, overflow="raise"))


@pytest.mark.parametrize("cfg", [FX32], ids=lambda c: c.name)
def test_crisp_is_exact_on_the_whole_signed_range_of_the_gate(tmp_path, cfg):
    """acc + b 2^f = -2^(n-1) (the gate's lowest signed input) is still exact, one step
    below it is not: the range the check enforces is [-2^(n-1), 2^(n-1))."""
    lim = cfg.product_max_abs
    g = load_model(gemm_model(tmp_path / "m.onnx", 1.0, -(lim - 1.0))).with_batch(1)
    x = np.array([[-1.0]])
    assert overflow_nodes(g, x, cfg, bias_in_sum=True) == []
    res = run_crisp(g, x, "malicious", cfg=cfg)
    np.testing.assert_array_equal(res["client"].output_ring, run_fixed(g, x, cfg, overflow="raise"))
    x = np.array([[-1.0 - cfg.resolution]])
    assert overflow_nodes(g, x, cfg, bias_in_sum=True) != []
    assert _semi_honest_differs(g, x, cfg)


def test_pre_launch_check_refuses_the_band_for_crisp_only(tmp_path):
    b, x = _band(FX64)       # crisp's default configuration, fx64f13
    path = gemm_model(tmp_path / "m.onnx", 1.0, b)
    with pytest.raises(FixedPointRangeError) as ei:
        prepare(path, x, protocol="crisp")
    msg = str(ei.value)
    assert "'big_bias'" in msg and "bias" in msg and "crisp" in msg
    # the reference (bias added after the truncation) computes it: still accepted
    prep = prepare(path, x, protocol="reference")
    prep.model.cleanup()
    # just inside: accepted for crisp too
    prep = prepare(path, -x, protocol="crisp")
    prep.model.cleanup()


@pytest.mark.parametrize("cfg", [FX32, FX64], ids=lambda c: c.name)
def test_exact_check_counts_the_bias_at_the_boundary(tmp_path, cfg):
    """The check is exact at the product scale: acc + b 2^f = 2^(n-1) - 2^f is accepted,
    2^(n-1) is refused; -2^(n-1) is accepted, -2^(n-1) - 2^f refused."""
    lim = cfg.product_max_abs
    step = cfg.resolution
    c = 1.0 if cfg.ring_bits == 32 else 2.0 ** 14      # lim - c is exact in the model's float32
    g = load_model(gemm_model(tmp_path / "m.onnx", 1.0, lim - c)).with_batch(1)
    assert overflow_nodes(g, np.array([[c - step]]), cfg, bias_in_sum=True) == []
    over = overflow_nodes(g, np.array([[c]]), cfg, bias_in_sum=True)
    assert [(o["node"], o["what"]) for o in over] == [("big_bias", "product with bias")]
    assert over[0]["bound"] == lim and over[0]["limit"] == lim
    assert overflow_nodes(g, np.array([[c]]), cfg) == []       # without the flag: unchanged
    gn = load_model(gemm_model(tmp_path / "n.onnx", 1.0, -(lim - c))).with_batch(1)
    assert overflow_nodes(gn, np.array([[-c]]), cfg, bias_in_sum=True) == []
    assert overflow_nodes(gn, np.array([[-c - step]]), cfg, bias_in_sum=True) != []
    with pytest.raises(FixedPointRangeError, match="bias"):
        check_run(g, np.array([[c]]), cfg, protocol="crisp", bias_in_sum=True)
    assert check_run(g, np.array([[c]]), cfg, protocol="reference") == []


def test_range_report_names_the_bias_risk_when_asked(tmp_path):
    b, x = _band(FX64)
    g = load_model(gemm_model(tmp_path / "m.onnx", 1.0, b)).with_batch(1)
    assert range_report(g, FX64, x=x)["risks"] == []
    risks = range_report(g, FX64, x=x, bias_in_sum=True)["risks"]
    assert [r["node"] for r in risks] == ["big_bias"]
    # the derived bounds over a box (interval arithmetic) count it too
    assert range_report(g, FX64, box=1.0)["risks"] == []
    risks = range_report(g, FX64, box=1.0, bias_in_sum=True)["risks"]
    assert [(r["node"], r["what"]) for r in risks] == [("big_bias", "product with bias")]


def test_cli_run_refuses_before_launch_and_inspect_says_no_for_crisp(tmp_path, monkeypatch, capsys):
    import secinfer
    import secinfer.runtime.launcher as launcher
    from secinfer.cli.main import main

    def boom(*a, **k):
        raise AssertionError("a party process was started")
    monkeypatch.setattr(launcher, "run_local", boom)
    b, x = _band(FX64)
    path = gemm_model(tmp_path / "m.onnx", 1.0, b)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", "-p", "crisp", "-m", path, "--input", str(tmp_path / "x.npy")]) == 2
    err = capsys.readouterr().err
    assert "'big_bias'" in err and "plus the bias" in err
    rep = secinfer.inspect(path, calibration=x)
    rows = {(p["protocol"], p["security"]): p for p in rep.protocols}
    for sec in ("semi-honest", "malicious"):
        assert not rows[("crisp", sec)]["ok"] and "'big_bias'" in rows[("crisp", sec)]["reason"]
    assert rows[("reference", "semi-honest")]["ok"]
    rep = secinfer.inspect(path, calibration=-x)        # inside: crisp can run it
    assert {(p["protocol"], p["security"]): p for p in rep.protocols}[("crisp", "malicious")]["ok"]
