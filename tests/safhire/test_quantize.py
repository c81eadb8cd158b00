"""Post-training quantization [SAFHIRE Sec. 3, 4.5] and the integer oracle."""

from __future__ import annotations

import numpy as np
import pytest

from secinfer.errors import ConfigError, UnsupportedOpError
from secinfer.ir import quantize as Q
from secinfer.ir.float_exec import run_float, run_float_all
from tests.safhire.qhelpers import digits, gap_resnet, quantized, tiny_resnet

# held-out accuracy floor per precision (float: digits-cnn 98.2 %, digits-mlp 97.8 %)
FLOOR = {8: 0.80, 12: 0.96, 16: 0.97}


@pytest.mark.parametrize("name", ["digits-cnn", "digits-mlp"])
@pytest.mark.parametrize("b", [8, 12, 16])
def test_accuracy_close_to_float_on_bundled_digits(name, b):
    g, x, y = digits(name)
    _, qm = quantized(name, b)
    half = len(x) // 2
    rep = Q.accuracy_report(g, qm, x[half:], y[half:])
    assert rep["float_accuracy"] > 0.97
    assert rep["quantized_accuracy"] >= FLOOR[b], rep
    if b == 16:
        assert rep["agreement"] >= 0.98, rep
    assert qm.calib["wrapped_accumulators"] == 0


def test_rounds_of_digits_cnn_are_conv_then_pool_and_fc():
    _, qm = quantized("digits-cnn", 12)
    assert [rd.sources for rd in qm.rounds] == [[0], [1]]
    assert qm.rounds[0].m == 512 and qm.rounds[0].relu and qm.rounds[0].k == 1
    assert qm.rounds[1].m == 10 and not qm.softmax
    assert all(rd.eta >= 1 for rd in qm.rounds)
    for rd in qm.rounds:          # weights within the public weight width
        for w in rd.weights:
            assert np.abs(w.data).max() <= (1 << (qm.weight_bits - 1)) - 1


def test_oracle_is_integer_arithmetic_written_out():
    """Round by round, the oracle equals a hand computation: W v + bias wrapped to b bits,
    ReLU, floor(y / eta) clipped."""
    _, qm = quantized("digits-cnn", 8)
    g, x, _ = digits("digits-cnn")
    v = qm.quantize_input(x[:3])
    for v0 in v:
        tr: list = []
        out = qm.run_int(v0, tr)
        r0, r1 = qm.rounds
        y0 = r0.weights[0].toarray() @ v0 + r0.bias
        y0 = ((y0 + 128) % 256) - 128
        assert np.array_equal(tr[0], y0)
        v1 = np.clip(np.maximum(y0, 0) // r0.eta, r0.lo, r0.hi)
        y1 = ((r1.weights[0].toarray() @ v1 + r1.bias + 128) % 256) - 128
        assert np.array_equal(out, y1)


def test_accumulators_wrap_mod_2_to_the_b():
    _, qm = quantized("digits-mlp", 8)
    big = np.full(qm.width(0), qm.in_hi, dtype=np.int64)
    tr: list = []
    qm.run_int(big, tr)
    for y in tr:
        assert y.min() >= -128 and y.max() <= 127


def test_tiny_resnet_max_pool_and_residuals():
    g = Q.batch_free(tiny_resnet())
    _, qm = quantized("tiny-resnet", 16)
    srcs = [rd.sources for rd in qm.rounds]
    assert srcs[0] == [0] and any(len(s) == 2 for s in srcs)        # a residual round
    assert qm.rounds[0].k == 4 and qm.rounds[0].n_out == qm.rounds[0].n_next * 4
    x = Q.calibration_inputs(g, None, 16)
    f = run_float(g, x)
    q = qm.run(x)
    # 16-bit accumulators: logits within a few percent of the float range
    assert np.max(np.abs(f - q)) <= 0.08 * np.max(np.abs(f)), np.max(np.abs(f - q))


def test_max_pool_windows_in_layout_match_float_pooling():
    g = Q.batch_free(tiny_resnet())
    _, qm = quantized("tiny-resnet", 16)
    rd = qm.rounds[0]
    x = Q.calibration_inputs(g, None, 2)
    env = run_float_all(g, x, intermediates=True)
    conv_out = next(v for k, v in env.items() if v.shape[1:] == (4, 8, 8))
    pooled = next(v for k, v in env.items() if v.shape[1:] == (4, 4, 4))
    lay = rd.layout(conv_out[0].reshape(-1)).reshape(-1, rd.k).max(axis=1)
    assert np.allclose(np.maximum(lay, 0), np.maximum(pooled[0].reshape(-1), 0))


def test_refusals():
    g, x, _ = digits("digits-cnn")
    with pytest.raises(ConfigError):
        Q.quantize(g, 10, x[:10])
    from secinfer.ir.onnx_import import load_model
    from secinfer.ir import bundled
    lg = load_model(str(bundled.bundled_path("cancer-logreg")))     # ends with Sigmoid
    with pytest.raises(UnsupportedOpError):
        Q.split_rounds(lg)


def test_regressor_report_gives_an_error_metric_not_an_argmax():
    """Issue #21: a one-output regressor's argmax always agrees; inspect shows its error."""
    from secinfer.ir import bundled
    from secinfer.ir.onnx_import import load_model
    from secinfer.protocols.safhire.report import inspect_lines

    g = load_model(str(bundled.bundled_path("diabetes-linreg")))
    x, y = bundled.bundled_testset("diabetes-linreg")
    qm = Q.quantize(Q.batch_free(g), 8, x[:64])
    rep = Q.accuracy_report(g, qm, x[64:], y[64:], task="regression")
    assert rep["task"] == "regression" and "agreement" not in rep
    f = run_float(Q.batch_free(g), x[64:]).reshape(-1)
    q = qm.run(x[64:]).reshape(-1)
    assert rep["rmse"] == pytest.approx(float(np.sqrt(np.mean((q - f) ** 2))))
    assert 0 < rep["rel_rmse"] < 1 and rep["quantized_rmse"] > 0
    lines = inspect_lines(g)
    assert not any("argmax" in ln for ln in lines), lines
    assert sum("error vs float: RMSE" in ln for ln in lines) == 3, lines


def test_colored_probing_gives_the_same_integer_model_as_probing_every_column(monkeypatch):
    """The few-probe construction of a round's map (local footprints) is exact: the
    quantized model equals the one built by probing every input value."""
    from secinfer.ir import zoo
    from secinfer.ir.onnx_import import load_model

    net = zoo._Net("resnet-16px", 0, {})
    x_shape, out, out_shape = zoo._resnet(net, 1, [1, 1], [4, 8], "cifar", 16, 3, fold_bn=False)
    g = Q.batch_free(load_model(net.finish(x_shape, out, out_shape).SerializeToString()))
    cal = Q.calibration_inputs(g, None, 16)
    monkeypatch.setattr(Q, "_structured_map", lambda *a, **k: None)   # the probing paths only
    used = []
    orig = Q._colored_map

    def spy(*a, **k):
        m = orig(*a, **k)
        used.append(m is not None)
        return m
    monkeypatch.setattr(Q, "_colored_map", spy)
    fast = Q.quantize(g, 12, cal)
    assert any(used), "no round took the few-probe path"
    monkeypatch.setattr(Q, "_colored_map", lambda *a, **k: None)
    slow = Q.quantize(g, 12, cal)
    assert len(fast.rounds) == len(slow.rounds)
    for a, b in zip(fast.rounds, slow.rounds):
        assert a.eta == b.eta and np.array_equal(a.bias, b.bias)
        for wa, wb in zip(a.weights, b.weights):
            assert (wa != wb).nnz == 0


def _unwrapped_accumulators(qm, x):
    """Written out: each calibration input through the oracle's rounds, keeping every
    round's accumulator before the wrap mod 2^b (the client steps read the wrapped ones)."""
    out = []
    for v0 in qm.quantize_input(x):
        vs, accs = [v0.astype(np.int64)], []
        for r, rd in enumerate(qm.rounds):
            acc = rd.bias.astype(np.int64) + sum(w @ vs[s] for s, w in zip(rd.sources, rd.weights))
            accs.append(acc)
            y = Q.wrap(acc, qm.b)
            vs.append(Q.client_step(rd.layout(y), rd.relu, rd.k, rd.eta, rd.lo, rd.hi))
        out.append(accs)
    return out


def test_scales_fitted_on_the_quantized_prefix_leave_no_calibration_input_wrapped():
    """Issue 18: a round's s_acc fitted to the float model's activations lets the quantized
    model's drifted accumulators wrap on a calibration input (a silent wrong answer); fitted
    on the quantized prefix's own accumulators, none wraps, and the report says both."""
    from secinfer.ir.quantize_store import load_quantized, save_quantized
    from secinfer.protocols.safhire.report import acc_use_lines
    import io

    g = Q.batch_free(gap_resnet(16))
    cal = Q.calibration_inputs(g, None, 32)
    old = Q.quantize(g, 8, cal, headroom=0.95, measured=False)
    new = Q.quantize(g, 8, cal, headroom=0.95)
    lim = 1 << 7
    for qm in (old, new):
        accs = _unwrapped_accumulators(qm, cal)
        use = [max(float(np.max(np.abs(a[r]))) for a in accs) / lim for r in range(len(qm.rounds))]
        wrapped = [sum(int(np.sum(np.abs(a[r] + 0.5) > lim)) for a in accs) for r in range(len(qm.rounds))]
        inputs = sum(any(np.any(Q.wrap(x, 8) != x) for x in a) for a in accs)
        assert qm.calib["max_acc_use"] == pytest.approx(use, abs=1e-4)
        assert qm.calib["wrapped_accumulators"] == sum(wrapped)
        assert qm.calib["wrapped_inputs"] == inputs
    assert old.calib["wrapped_accumulators"] > 0 and max(old.calib["max_acc_use"]) > 1
    assert new.calib["wrapped_accumulators"] == 0 and max(new.calib["max_acc_use"]) <= 0.95
    assert new.calib["raised_scales"] and new.calib["scale_from"] == "quantized"
    # a wrapped input's logits differ from its unwrapped ones: the wrong answer the report flags
    bad = [a for a in _unwrapped_accumulators(old, cal) if np.any(Q.wrap(a[-1], 8) != a[-1])
           or any(np.any(Q.wrap(x, 8) != x) for x in a)]
    assert bad
    assert any("WARNING" in ln and "wrapped" in ln for ln in acc_use_lines(old))
    assert not any("WARNING" in ln for ln in acc_use_lines(new))
    assert "max 0." in acc_use_lines(new)[0]
    buf = io.BytesIO()                            # the facts survive the qcache
    save_quantized(new, buf)
    buf.seek(0)
    assert load_quantized(buf).calib["max_acc_use"] == new.calib["max_acc_use"]
