"""STAMP's range guard (docs/protocols/stamp.md, "Range guard"): the shadow check detects
exactly the sums that left the ring; an honest in-range query is bit-exact with the guard on
and does not trip; a query that wraps ends with FixedPointRangeError naming the layer at
every party that would otherwise wait, and no party has an output."""

from __future__ import annotations

import numpy as np
import pytest

from secinfer.arith.fixed import FX32
from secinfer.crypto.prg import PRG
from secinfer.errors import FixedPointRangeError
from secinfer.ir.bundled import bundled_path, bundled_testset
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model
from secinfer.ir.range_cert import certify, shadow_plan
from secinfer.net.channel import run_local
from secinfer.protocols.base import PartyJob
from secinfer.protocols.registry import get
from secinfer.protocols.rep3.kernels import shadow_check, shadow_make


def test_shadow_check_is_exact_about_wraps():
    """Random weights and activations; sums just inside and just outside the ring: the check
    passes exactly when the true (integer) sum fits, and shadow_make refuses activations
    whose shadow sum could wrap."""
    rng = np.random.default_rng(3)
    ring, s = FX32.ring, 8
    half = 1 << 31
    for trial in range(200):
        k = int(rng.integers(1, 40))
        w = rng.integers(-3000, 3000, size=(k, 5))
        a1 = int(np.max(np.sum(np.abs(w), axis=0)))
        scale = int(rng.choice([1, 100, 10_000, 1_000_000]))
        h = rng.integers(-scale, scale + 1, size=(1, k))
        hh = FX32.ring.to_signed(shadow_make(FX32, ring.reduce(h.astype(np.uint64)), s, a1))
        acc_true = h @ w
        acc = np.concatenate([acc_true, hh[1:] @ w])
        packed = ring.reduce(acc.astype(np.int64).astype(np.uint64))
        fits = bool(np.all(np.abs(acc_true) < half))
        if fits:
            assert np.array_equal(ring.to_signed(shadow_check(FX32, packed, s, (2 ** s - 1) * a1, "L")), acc_true)
        else:
            with pytest.raises(FixedPointRangeError, match="layer 'L' left the 32-bit ring"):
                shadow_check(FX32, packed, s, (2 ** s - 1) * a1, "L")
    big = ring.reduce(np.array([[1 << 30]], dtype=np.uint64))
    with pytest.raises(FixedPointRangeError, match="too large for the range guard"):
        shadow_make(FX32, big, s, 1 << 12)


def _run(graph, x, security, options):
    spec = get("stamp")

    def party(role, k):
        def f(ep):
            job = PartyJob(role=role, security=security, fixed=FX32, prg=PRG.for_tests(60 + k),
                           model=graph if role == spec.model_role else None,
                           input=x if role == spec.input_role else None, options=dict(options))
            return spec.run_party(role, ep, job)
        return f
    return run_local({r: party(r, k) for k, r in enumerate(spec.roles)}, timeout=300)


@pytest.mark.parametrize("name,security", [("digits-mlp", "semi-honest"), ("digits-cnn", "malicious")])
def test_honest_query_bit_exact_with_the_guard_and_a_wrapping_one_ends_typed(name, security):
    g = load_model(str(bundled_path(name)))
    x, _ = bundled_testset(name)
    x = x[:2]
    cert = certify(g, FX32, guard=True)
    assert cert.violation(x) is not None and cert.violation(x, guarded=True) is None   # needs the guard
    res = _run(g, x, security, {"range_guard": True})
    assert not any(isinstance(v, BaseException) for v in res.values()), res
    assert np.array_equal(res["p1"].output_ring, run_fixed(g.with_batch(len(x)), x, FX32))
    # every pixel 100: inside the first products' region (|x| <= 511), but a later sum wraps
    bad = np.full((1, 64), 100.0)
    assert cert.violation(bad, guarded=True) is None
    layer = "fc0" if name == "digits-mlp" else "output"
    res = _run(g, bad, security, {"range_guard": True})
    assert isinstance(res["p1"], FixedPointRangeError), res["p1"]
    assert f"layer '{layer}' left the 32-bit ring" in str(res["p1"])
    assert all(isinstance(v, BaseException) or v.output is None for v in res.values())
    # without the guard the same query returns the reference's wrapped (wrong) answer
    plain = _run(g, bad, security, {})
    assert np.array_equal(plain["p1"].output_ring, run_fixed(g.with_batch(1), bad, FX32, overflow="ignore"))


def test_plan_covers_the_digits_models_only_where_it_can():
    for name in ("digits-mlp", "digits-cnn", "cancer-logreg"):
        plan, why = shadow_plan(load_model(str(bundled_path(name))), FX32)
        assert plan is not None and plan["s"] == 8, (name, why)
        assert all(e < 1 << 31 for e in plan["check"].values())
