"""The CLI contract: JSON output of `run`, one-line errors, refusals."""

import json

import numpy as np
import pytest

from cli_helpers import run_cli
from secinfer.arith.fixed import FX64
from secinfer.ir import bundled
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model


@pytest.mark.slow
def test_run_json_contract_and_oracle_agreement(digits_input, tmp_path):
    path, X = digits_input
    out = tmp_path / "y.npy"
    rc, so, se = run_cli("run", "--protocol", "reference", "--model", "bundled:digits-mlp",
                         "--input", str(path), "--output", str(out), "--json")
    assert rc == 0, se
    res = json.loads(so)
    for key in ("output", "latency_s", "bytes", "rounds"):
        assert key in res
    assert set(res["latency_s"]) >= {"offline", "online"}
    assert "INSECURE" in se
    graph = load_model(str(bundled.bundled_path("digits-mlp")))
    ref = FX64.decode(run_fixed(graph, X, FX64))
    assert np.array_equal(np.asarray(res["output"]), ref)
    assert np.array_equal(np.load(out), ref)
    # metered payload = what was actually sent: 7x64 uint64 input + 7x10 uint64 output
    # + shape/batch/oshape announcements
    sent = res["bytes"]
    assert sent["client"]["payload"] == 7 * 64 * 8 + 8
    assert sent["server"]["payload"] == 7 * 10 * 8 + 2 * 8 + 2 * 8


@pytest.mark.parametrize("args,needle", [
    (["run", "--protocol", "nope", "--model", "bundled:digits-mlp", "--input", "X"], "unknown protocol"),
    (["run", "--protocol", "reference", "--model", "/does/not/exist.onnx", "--input", "X"], "does not exist"),
    (["run", "--protocol", "reference", "--model", "bundled:digits-mlp", "--input", "X",
      "--params", "ckks-insecure-test"], "insecure"),
    (["run", "--protocol", "reference", "--security", "malicious", "--model", "bundled:digits-mlp",
      "--input", "X"], "offers semi-honest"),
    (["inspect", "zoo:not-a-net"], "no zoo network"),
])
def test_errors_are_one_line_and_non_zero(args, needle, digits_input):
    path, _ = digits_input
    args = [str(path) if a == "X" else a for a in args]
    rc, so, se = run_cli(*args)
    assert rc != 0
    lines = [ln for ln in se.strip().splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and needle in lines[0], se
    assert "Traceback" not in se


@pytest.mark.slow
def test_wrong_input_shape_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((3, 65)))
    rc, _, se = run_cli("run", "--protocol", "reference", "--model", "bundled:digits-mlp", "--input", str(bad))
    assert rc != 0 and "shape" in se and "Traceback" not in se


def test_malformed_model_is_a_clear_error(tmp_path, digits_input):
    path, _ = digits_input
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x08\x07not an onnx model at all")
    rc, _, se = run_cli("run", "--protocol", "reference", "--model", str(junk), "--input", str(path))
    assert rc != 0 and se.strip().splitlines()[-1].startswith("error:") and "Traceback" not in se


@pytest.mark.slow
def test_models_and_inspect_list_what_exists():
    rc, so, _ = run_cli("models")
    assert rc == 0 and "reference" in so and "secureml-a" in so and "digits-mlp" in so
    rc, so, _ = run_cli("inspect", "bundled:digits-cnn")
    assert rc == 0 and "Conv" in so and "reference" in so


def test_keygen_writes_keys(tmp_path):
    rc, so, se = run_cli("keygen", "--out", str(tmp_path / "k"), "alice", "bob")
    assert rc == 0, se
    files = sorted(p.name for p in (tmp_path / "k").iterdir())
    assert any("alice" in f for f in files) and any("bob" in f for f in files)


@pytest.mark.slow
def test_demo_json_reports_oracle_agreement_for_reference():
    rc, so, se = run_cli("demo", "--protocol", "reference", "--rows", "20", "--json", timeout=300)
    assert rc == 0, se
    rows = json.loads(so)["results"]
    assert {r["model"] for r in rows} == set(bundled.bundled_names())
    for r in rows:
        assert r["bit_exact"] and r["prediction_agreement"] == 1.0 and r["rows"] == 20
        assert r["bytes_total"] > 0 and r["rounds_online"] == 2


@pytest.mark.slow
@pytest.mark.parametrize("protocol,model", [("reference", "digits-mlp"), ("stamp", "digits-mlp"),
                                            ("astra", "cancer-logreg")])
def test_one_sample_without_batch_axis_is_a_batch_of_one(protocol, model, tmp_path):
    X, _ = bundled.bundled_testset(model)
    one = tmp_path / "one.npy"
    np.save(one, X[3])
    rc, so, se = run_cli("run", "--protocol", protocol, "--model", f"bundled:{model}", "--input", str(one), "--json",
                         timeout=180)
    assert rc == 0, se
    out = np.asarray(json.loads(so)["output"])
    assert out.shape[0] == 1
