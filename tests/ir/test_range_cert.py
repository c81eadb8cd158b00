"""The range certificate (secinfer.ir.range_cert) is sound: every point of its box and ball
runs through the bit-exact reference executor without leaving the ring (and within the
protocol's value limits); it is not empty; it round-trips as public JSON."""

from __future__ import annotations

import numpy as np
import pytest

from secinfer.arith.fixed import get_config
from secinfer.errors import ConfigError, FixedPointRangeError
from secinfer.ir.bundled import bundled_path
from secinfer.ir.onnx_import import load_model
from secinfer.ir.range_cert import RangeCertificate, certify, check_certified
from secinfer.ir.validate import limit_violation, overflow_nodes
from secinfer.protocols import registry

CASES = [("astra", "diabetes-linreg"), ("astra", "cancer-logreg"), ("stamp", "digits-mlp"),
         ("stamp", "digits-cnn"), ("stamp", "diabetes-linreg"), ("crisp", "digits-mlp")]


def _cert(protocol, name):
    spec = registry.get(protocol)
    cfg = get_config(spec.default_fixed)
    g = load_model(str(bundled_path(name)))
    lim = spec.value_limits(g, cfg, {}) if spec.value_limits else None
    return g, cfg, lim, certify(g, cfg, lim, bias_in_sum=spec.bias_in_sum)


@pytest.mark.parametrize("protocol,name", CASES)
def test_every_point_of_the_certificate_is_computed_without_overflow(protocol, name):
    g, cfg, lim, c = _cert(protocol, name)
    rng = np.random.default_rng(7)
    k = c.features
    box = np.asarray(c.box) * (1 - 1e-9)
    cen = np.zeros(k) if c.centre is None else np.asarray(c.centre)
    assert np.all(box > 0), c.note
    pts = [cen + box * rng.choice([-1.0, 1.0], size=k) for _ in range(40)]     # corners: the worst case
    pts += [cen + box * rng.uniform(-1, 1, size=k) for _ in range(10)]
    if c.ball is not None:
        for _ in range(40):
            v = rng.normal(size=k)
            pts.append(cen + v / np.linalg.norm(v) * c.ball * (1 - 1e-9))
    X = np.array(pts)
    assert c.violation(X) is None
    gb = g.with_batch(len(X)) if g.inputs[0].shape[0] is None else g
    assert overflow_nodes(gb, X, cfg) == []
    if lim and lim.get("values") is not None:
        assert limit_violation(gb, X, lim["values"]) is None
    if spec_of(protocol).bias_in_sum:    # crisp truncates acc + b 2^f: that sum fits too
        _check_bias_in_sum(g, X, cfg)
    # and the certificate is not vacuous: far outside it, this model does leave the ring
    far = cen + (X - cen) * 1e3
    assert overflow_nodes(gb, far, cfg) or (lim and limit_violation(gb, far, lim["values"]))


def spec_of(protocol):
    return registry.get(protocol)


def _check_bias_in_sum(g, X, cfg):
    from secinfer.ir.float_exec import run_float_all

    gb = g.with_batch(len(X)) if g.inputs[0].shape[0] is None else g
    vals = run_float_all(gb, X, intermediates=True)
    for n in gb.nodes:
        if n.op in ("Gemm", "Conv") and len(n.inputs) > 2:    # the float value is acc + b
            assert float(np.max(np.abs(vals[n.outputs[0]]))) < cfg.product_max_abs, n.name


def test_bundled_queries_covered_where_the_ring_allows():
    """Measured coverage of the bundled test sets (docs/runtime.md): astra's four linear models
    and crisp's fx64 digits models 100 %; stamp (Z_2^32, fx32f13) 0 % for the digits models."""
    from secinfer.ir.bundled import bundled_testset

    for protocol, name, want in (("astra", "cancer-logreg", 1.0), ("astra", "diabetes-linreg", 1.0),
                                 ("crisp", "digits-cnn", 1.0), ("stamp", "digits-mlp", 0.0)):
        *_, c = _cert(protocol, name)
        x, _ = bundled_testset(name)
        inside = np.mean([c.violation(x[i:i + 1]) is None for i in range(len(x))])
        assert inside == want, (protocol, name, inside)


def test_refusal_names_feature_value_and_bound_and_json_round_trip():
    *_, c = _cert("astra", "diabetes-linreg")
    c2 = RangeCertificate.from_json(c.to_json())
    assert c2 == c
    x = np.zeros((2, 10))
    x[1, 3] = 1e3
    with pytest.raises(FixedPointRangeError, match=r"sample 1, feature 3 = 1000 .*\|x - [-0-9.e]+\| <= [0-9.]+"):
        check_certified(c2, x)
    with pytest.raises(FixedPointRangeError):
        check_certified(c2, np.full((1, 10), np.nan))
    bad = c.to_json()
    bad["box"] = bad["box"][:3]
    with pytest.raises(ConfigError, match="malformed"):
        RangeCertificate.from_json(bad)
    with pytest.raises(ConfigError, match="features"):
        c.violation(np.zeros((1, 9)))
