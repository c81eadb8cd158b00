"""The peers suite's workloads are the models issue #23 names, and run where they should."""

import os
import threading

import numpy as np
import onnxruntime as ort
import pytest

from secinfer.bench import peers_suite as ps
from secinfer.ir.float_exec import run_float
from secinfer.ir.onnx_import import load_model


@pytest.mark.parametrize("wl,in_shape,out_shape", [("W1", (3, 784), (3, 1)), ("W2", (3, 784), (3, 1)),
                                                    ("W3", (3, 784), (3, 10)), ("W4", (3, 1, 28, 28), (3, 10))])
def test_workload_models_match_onnxruntime(wl, in_shape, out_shape):
    model = ps.build_workload(wl)
    x = ps.workload_input(wl, 3)
    assert x.shape == in_shape
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"input": x.astype(np.float32)})[0]
    got = run_float(load_model(model), x)
    assert got.shape == out_shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert ps.build_workload(wl).SerializeToString() == model.SerializeToString()  # fixed seed


def test_runnable_says_why_not():
    graph = load_model(ps.build_workload("W3"))
    assert ps._runnable("stamp", "W3", graph) is None
    assert "Relu" in ps._runnable("astra", "W3", graph)        # ASTRA runs linear models only
    assert "sign" in ps._runnable("stamp", "W2", load_model(ps.build_workload("W2")))
    assert ps._runnable("astra", "W2", load_model(ps.build_workload("W2"))) is None


def test_every_target_row_is_in_the_full_plan():
    rows, reps = ps._plan(quick=False)
    assert reps == 5 and set(ps.TARGETS) <= set(rows)


def test_malicious_rows_run_crisp_at_w3_with_the_issue_bound():
    assert ps._runnable("crisp", "W3", load_model(ps.build_workload("W3")), "malicious") is None
    assert ps.MALICIOUS_TARGETS[("crisp", "W3", 128)][0] == 5.0
    out = ps.run(plan=[("W3", 1)], protocols=["crisp"], reps=1)
    rows = {r["security"]: r for r in out["rows"]}
    assert set(rows) == {"semi-honest", "malicious"}
    for r in rows.values():
        assert r["online_ms"] > 0 and r["bytes_online"] > 0
        assert r["max_abs_err_vs_reference"] is not None and r["max_abs_err_vs_reference"] < 0.05
    assert rows["malicious"]["command_s"] is None and rows["semi-honest"]["command_s"] > 0
    assert rows["malicious"]["bytes_online"] > rows["semi-honest"]["bytes_online"]   # MACs and proofs
    assert out["malicious_targets"] == {"crisp/W3/128": {"online_s": 5.0, "bytes": None}}
    assert set(out["plots"][0]["series"]) == {"crisp", "crisp (malicious)"}


def test_w2_reference_is_the_class_of_the_decision_value():
    """W2's protocols reveal the class (the sign of w.x + b): the reference it is compared
    with is the fixed-point decision value's class, not the sigmoid's value."""
    from secinfer.arith.fixed import get_config
    from secinfer.ir.fixed_exec import run_fixed_decoded

    cfg = get_config("fx64f13")
    x = ps.workload_input("W2", 32)
    x = np.concatenate([x, -x])          # (the workload's own queries are all of class 1)
    graph = load_model(ps.build_workload("W2"))
    ref = ps.reference("W2", graph, x, cfg)
    z = run_fixed_decoded(load_model(ps.build_workload("W2", sign_head=False)), x, cfg)
    assert set(np.unique(ref)) <= {0.0, 1.0} and 0 < ref.sum() < ref.size   # both classes occur
    np.testing.assert_array_equal(ref, (z > 0).astype(float))
    sig = run_fixed_decoded(graph, x, cfg)
    np.testing.assert_array_equal(ref, (sig > 0.5).astype(float))             # the same classes here
    assert ps._max_err(ref, sig) > 0.05                                     # unlike with like: not 0
    np.testing.assert_array_equal(ps.reference("W1", load_model(ps.build_workload("W1")), x, cfg),
                                  run_fixed_decoded(load_model(ps.build_workload("W1")), x, cfg))


def test_w2_rows_agree_with_the_reference_class():
    out = ps.run(plan=[("W2", 1)], protocols=["astra", "aby3"], reps=1)
    rows = {r["protocol"]: r for r in out["rows"]}
    assert set(rows) == {"astra", "aby3"}
    for r in rows.values():
        assert r["max_abs_err_vs_reference"] == 0.0, r
        # the window to the client's output ends no later than the one to the last exit
        assert 0 < r["online_to_output_ms"] <= r["online_ms"] + 1e-9
        assert r["online_to_output_ms_min"] <= r["online_to_output_ms"] <= r["online_to_output_ms_max"]
        assert r["to_output_vs_target"] == pytest.approx(r["online_to_output_ms"] / r["target_online_ms"])
        assert r["to_output_vs_target"] <= r["online_vs_target"] + 1e-9
        # batch 1 of a small model runs on the record layer `secinfer run` picks for it
        assert r["record_layer"] == ["python (small run)"] or "SECINFER_TCP_NATIVE" in os.environ, r
    # the run's "still running" ticker ended with it (it printed into later tests' output before)
    for t in threading.enumerate():
        if t.name == "bench-peers-progress":
            t.join(5)
            assert not t.is_alive()


def test_to_output_ends_at_the_input_roles_exit():
    m = {"client": {"phases": {"online": {"window": [10.0, 10.004]}}},
         "p0": {"phases": {"online": {"window": [9.99, 10.05]}}},
         "p1": {"phases": {"online": {"window": [10.001, 10.003]}}},
         "model_owner": {"phases": {"online": {"window": None}}}}
    assert abs(ps._to_output(m, "client") - 0.003) < 1e-9   # from p1's (last) entry to the client's exit
    assert ps._to_output({"client": {"phases": {"online": {"window": None}}}}, "client") is None
