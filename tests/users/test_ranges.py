"""No silent wrong answers: models, weights and queries the fixed-point reference cannot
compute exactly, or a protocol's own encoding cannot hold, are refused before any party
starts, with the node and the fix named (issue #21 item 2, issue #22 item 3)."""

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import secinfer
from secinfer.api import prepare
from secinfer.cli.main import main
from secinfer.errors import FixedPointRangeError, ModelError
from secinfer.ir import bundled


def _no_launch(monkeypatch):
    import secinfer.runtime.launcher as launcher

    def boom(*a, **k):
        raise AssertionError("a party process was started")
    monkeypatch.setattr(launcher, "run_local", boom)


def _with_weight(tmp_path, value, name="diabetes-linreg", weight="W"):
    m = onnx.load(str(bundled.bundled_path(name)))
    init = next(t for t in m.graph.initializer if t.name == weight)
    w = numpy_helper.to_array(init).copy()
    w.reshape(-1)[0] = value
    init.CopyFrom(numpy_helper.from_array(w, init.name))
    path = tmp_path / f"{name}-{value}.onnx"
    onnx.save(m, str(path))
    return str(path)


def test_stamp_diabetes_is_refused_before_launch_naming_node_and_fix(monkeypatch, capsys):
    _no_launch(monkeypatch)
    with pytest.raises(FixedPointRangeError) as ei:
        prepare("bundled:diabetes-linreg", protocol="stamp")
    msg = str(ei.value)
    assert "'gemm'" in msg and "--fixed fx64" in msg and "Z_2^64" in msg
    assert main(["run", "-p", "stamp", "-m", "bundled:diabetes-linreg"]) == 2
    assert "overflows the fixed-point ring of fx32f13" in capsys.readouterr().err


def test_inspect_uses_the_same_analysis_as_demo():
    rep = secinfer.inspect("bundled:diabetes-linreg")
    rows = {(p["protocol"], p["security"]): p for p in rep.protocols}
    assert not rows[("stamp", "semi-honest")]["ok"] and "gemm" in rows[("stamp", "semi-honest")]["reason"]
    assert rows[("astra", "semi-honest")]["ok"] and rows[("reference", "semi-honest")]["ok"]
    from secinfer.arith.fixed import FX32
    from secinfer.cli.demo import overflow_nodes
    from secinfer.ir.onnx_import import load_model

    x, _ = bundled.bundled_testset("diabetes-linreg")
    assert overflow_nodes(load_model(bundled.bundled_path("diabetes-linreg")), x, FX32) == ["gemm"]
    assert rep.bounds["fx32f13"]["risks"] and not rep.bounds["fx64f13"]["risks"]
    assert "fx64f13" in rep.describe() and "Derived bounds" in rep.describe()


def test_out_of_range_queries_are_refused_where_the_protocol_would_wrap(monkeypatch):
    _no_launch(monkeypatch)
    x, _ = bundled.bundled_testset("diabetes-linreg")
    q = x[:1].copy()
    q[0, 0] = 1000.0
    for proto in ("astra", "aby3"):   # z @ W held at f_x + f_w = 50 bits: |y| < 8192
        with pytest.raises(FixedPointRangeError, match="refused rather than wrapped"):
            prepare("bundled:diabetes-linreg", q, protocol=proto)
    prep = prepare("bundled:diabetes-linreg", q, protocol="reference")   # fits the reference's ring
    assert any("outside the model's calibrated range" in n for n in prep.notes)
    prep.model.cleanup()
    xc, _ = bundled.bundled_testset("cancer-logreg")
    q = xc[:1].copy()
    q[0, 3] = 1e7
    with pytest.raises(FixedPointRangeError):
        prepare("bundled:cancer-logreg", q, protocol="astra")
    prep = prepare("bundled:cancer-logreg", q, protocol="astra", allow_out_of_range=True)
    assert any(n.startswith("WARNING: running although the answer will be wrong") for n in prep.notes)
    prep.model.cleanup()


def test_reference_computes_the_out_of_range_query_exactly():
    x, _ = bundled.bundled_testset("diabetes-linreg")
    q = x[:1].copy()
    q[0, 0] = 1000.0
    res = secinfer.run("bundled:diabetes-linreg", q, protocol="reference", in_process=True, quiet=True)
    assert abs(float(res.output[0, 0]) - (-43020.14)) < 0.5


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused_by_inspect_and_run(tmp_path, monkeypatch, bad):
    _no_launch(monkeypatch)
    path = _with_weight(tmp_path, bad)
    rep = secinfer.inspect(path)
    assert rep.refusal and "NaN or infinity" in rep.refusal and not rep.runnable()
    for proto in ("astra", "aby3", "reference", "stamp"):
        with pytest.raises(ModelError, match="NaN or infinity"):
            prepare(path, np.zeros((1, 10)), protocol=proto)
    assert main(["inspect", path]) == 2


def test_huge_weights_are_refused_by_inspect_for_every_protocol(tmp_path):
    rep = secinfer.inspect(_with_weight(tmp_path, 1e12))
    assert rep.refusal is None and rep.protocols
    assert not rep.runnable()
    from secinfer.ir.onnx_import import load_model
    from secinfer.protocols import registry

    graph = load_model(_with_weight(tmp_path, 1e12))

    def structural(p):   # the protocol cannot run this graph at all, whatever its weights
        try:
            registry.get(p["protocol"]).check_model(graph, p["security"])
        except Exception:  # noqa: BLE001
            return True
        return False
    range_refusals = [p for p in rep.protocols if not structural(p)]
    assert {p["protocol"] for p in range_refusals} >= {"astra", "aby3", "reference", "stamp"}
    assert all("overflow" in p["reason"] or "outside" in p["reason"] or "beyond what" in p["reason"]
               for p in range_refusals), range_refusals


def test_non_finite_queries_are_refused(monkeypatch):
    _no_launch(monkeypatch)
    q = np.zeros((1, 10))
    q[0, 4] = np.nan
    with pytest.raises(FixedPointRangeError, match="NaN"):
        prepare("bundled:diabetes-linreg", q, protocol="reference")


def test_cost_model_baseline_says_so_whenever_it_runs(capsys):
    x, _ = bundled.bundled_testset("digits-mlp")
    res = secinfer.run("bundled:digits-mlp", x[:1], protocol="falcon", in_process=True)
    assert any("COST MODEL" in n for n in res.notes)
    assert "COST MODEL" in capsys.readouterr().err
    rep = secinfer.inspect("bundled:digits-mlp")
    assert any(p["protocol"] == "falcon" and p["warning"] for p in rep.protocols)


def test_party_command_refuses_non_finite_weights_before_connecting(tmp_path, capsys):
    path = _with_weight(tmp_path, float("nan"))
    code = main(["party", "--cluster", str(tmp_path / "missing.toml"), "--id", "model_owner", "-p", "astra",
                 "-m", path])
    assert code == 2 and "NaN or infinity" in capsys.readouterr().err


def test_inspect_applies_the_protocols_own_range_to_the_calibration_input(tmp_path):
    x, _ = bundled.bundled_testset("diabetes-linreg")
    q = x[:4].copy()
    q[0, 0] = 1000.0
    rep = secinfer.inspect("bundled:diabetes-linreg", calibration=q)
    rows = {(p["protocol"], p["security"]): p for p in rep.protocols}
    assert not rows[("astra", "semi-honest")]["ok"] and "beyond what astra holds" in rows[("astra", "semi-honest")]["reason"]
    assert rows[("reference", "semi-honest")]["ok"]


def test_allow_out_of_range_never_lets_nan_or_unencodable_weights_through(tmp_path, monkeypatch):
    _no_launch(monkeypatch)
    q = np.zeros((1, 10))
    q[0, 1] = np.inf
    with pytest.raises(FixedPointRangeError):
        prepare("bundled:diabetes-linreg", q, protocol="reference", allow_out_of_range=True)
    with pytest.raises(FixedPointRangeError, match="outside fx32f13's range"):
        prepare(_with_weight(tmp_path, 1e6), np.zeros((1, 10)), protocol="stamp", allow_out_of_range=True)
