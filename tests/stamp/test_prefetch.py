"""Semi-honest STAMP's work before the query (issue #23 item 4): the LTEE serves the online
phase's seed requests ahead of time (``ltee_device.cmd_prefetch``) under its counter
discipline, the first layer's input-independent half is computed offline
(``input_offline``), and the parties start the online phase together. Outputs unchanged."""

from types import SimpleNamespace

import numpy as np
import pytest

from secinfer.arith.fixed import FX32
from secinfer.arith.ring import Ring
from secinfer.errors import ProtocolAbort
from secinfer.bench.peers_suite import build_workload, workload_input
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model
from secinfer.protocols.rep3 import kernels
from secinfer.protocols.rep3.stacked import stack_weight, stacked_product
from secinfer.protocols.stamp.input_offline import InputPlan, _split, half_product
from secinfer.protocols.stamp.ltee import LteeRefused
from secinfer.sharing import replicated as rss
from secinfer.sharing.replicated import Pair

from stamp_harness import run3
from test_stamp_models import run_model


def _mask(op, n_op, ctr, sub, j, n):
    return np.array([op, n_op, ctr, sub, j, 0, n, 0], dtype=np.int64)


def _zshare(op, n_op, ctr, sub, t, n):
    return np.array([op, n_op, ctr, sub, t, 0, n], dtype=np.int64)


def test_prefetch_reserves_future_operations_under_the_counter_discipline():
    """Requests served ahead equal those served when the operation runs (p0 ahead, p2 at
    the time: both hold component 0); every replay, an operation not ahead, a counter below
    the device's or a reservation's, and an operation overlapping a reserved range are
    refused; an operation that runs after its reservation is served its other requests."""
    def body(i, eng, ops):
        link = ops.link
        if i == 2:   # the same GenMask(0) of operation 2, asked when it runs
            link.call("mask", _mask(1, 90, 0, 0, 0, 10))
            (seed,) = link.call("mask", _mask(2, 90, 90, 0, 0, 10))
            return seed.tobytes()
        if i != 0:
            return None
        link.call("mask", _mask(1, 90, 0, 0, 0, 10))            # operation 1 runs
        (a,), (b,) = link.call_many([("mask", _mask(2, 90, 90, 0, 0, 10), "mask"),
                                     ("mask", _mask(4, 90, 180, 1, 0, 10), "mask")], ahead=True)
        errs = []
        for reqs in ([("mask", _mask(2, 90, 90, 0, 0, 10), "mask")],     # replayed ahead
                     [("mask", _mask(1, 90, 0, 1, 0, 10), "mask")],      # not ahead: op 1 runs
                     [("mask", _mask(5, 90, 200, 0, 0, 10), "mask")],    # below op 4's range
                     [("mask", _mask(4, 90, 170, 2, 0, 10), "mask")],    # differs from its reservation
                     [("mask", _mask(3, 90, 270, 0, 0, 10), "mask")]):   # older than reserved op 4
            with pytest.raises(LteeRefused) as ei:
                link.call_many(reqs, ahead=True)
            errs.append(ei.value.code)
        for meta in (_mask(2, 90, 90, 0, 0, 10),     # served ahead already: replay when it runs
                     _mask(2, 90, 60, 1, 0, 10)):    # counter differs from the reservation
            with pytest.raises(LteeRefused) as ei:
                link.call("mask", meta)
            errs.append(ei.value.code)
        (z,) = link.call("zshare", _zshare(2, 90, 90, 0, 2, 10))   # op 2 runs: its other request
        with pytest.raises(LteeRefused) as ei:        # op 3, not reserved, overlapping op 4's range
            link.call("mask", _mask(3, 90, 100, 0, 0, 10))
        errs.append(ei.value.code)
        (c,) = link.call("mask", _mask(4, 90, 180, 0, 0, 10))   # op 4 runs: slot 0 was not reserved
        with pytest.raises(LteeRefused) as ei:
            link.call("mask", _mask(4, 90, 180, 1, 0, 10))      # slot 1 was: served ahead
        errs.append(ei.value.code)
        return a.tobytes(), b.tobytes(), c.tobytes(), errs
    res, _ = run3(body)
    assert not isinstance(res[0], BaseException), res[0]
    a, b, c, errs = res[0]
    assert a == res[2]                 # ahead or at the time: the same seed
    assert len({a, b, c}) == 3
    assert errs == ["stale-counter"] * 9


@pytest.mark.covers_check("stamp", "ltee-stale-counter")
def test_a_request_served_ahead_and_again_aborts_its_host():
    """A host that asks for a request it was served ahead of time, when its operation runs
    (a replay), is refused and aborts."""
    def body(i, eng, ops):
        if i != 0:
            return None
        meta = _mask(1, 90, 0, 0, 0, 10)
        ops._dev_many([("mask", meta, "mask")], ahead=True)
        ops._dev("mask", meta, kind="mask")
        return "served twice"
    res, _ = run3(body)
    assert isinstance(res[0], ProtocolAbort) and res[0].check == "ltee-stale-counter"


def test_prefetch_policy_unchanged():
    """A request its host may not have is refused ahead of time as at the time."""
    def body(i, eng, ops):
        if i != 1:
            return None
        with pytest.raises(LteeRefused) as ei:    # party 1 does not hold component 0
            ops.link.call_many([("mask", _mask(1, 90, 0, 0, 0, 10), "mask")], ahead=True)
        return ei.value.code
    res, _ = run3(body)
    assert res[1] == "policy"


@pytest.mark.parametrize("kind", ["Gemm", "Conv"])
def test_first_layer_components_sum_to_the_product(kind):
    """The three parties' first-layer components (``InputPlan``: p0 f(x_0 + x_1, W), p1
    f(x_2, w_1), p2 f(x_2, w_2 + w_0), offline parts plus p0's online one) sum to f(X, W)
    exactly, as the usual components (``bilinear_local``) do (Z_2^32); the halves of a
    stacked weight give its stacked product."""
    ring = Ring(32)
    rng = np.random.default_rng(4)
    r = lambda *s: rng.integers(0, 2 ** 32, s, dtype=np.uint64)   # noqa: E731
    if kind == "Gemm":
        attrs, xs, ws = {}, (5, 40), (40, 7)
    else:
        attrs = {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "group": 1}
        xs, ws = (2, 2, 8, 8), (4, 2, 3, 3)
    x = [r(*xs) for _ in range(3)]
    w = [r(*ws) for _ in range(3)]
    big_x, big_w = ring.reduce(x[0] + x[1] + x[2]), ring.reduce(w[0] + w[1] + w[2])
    f = kernels.bilinear(kind, attrs, ring)
    want = ring.reduce(f(big_x, big_w))
    usual = [rss.bilinear_local(ring, f, Pair(x[p], x[(p + 1) % 3]), Pair(w[p], w[(p + 1) % 3])) for p in range(3)]
    assert np.array_equal(ring.reduce(usual[0] + usual[1] + usual[2]), want)
    comps = []
    for p in range(3):
        plan = InputPlan.__new__(InputPlan)
        plan.eng, plan.owner, plan.name, plan.shape = SimpleNamespace(ring=ring, me=p), 1, "x", xs
        plan.c_next, plan.c_all, plan.halves = x[2], x[0], {}
        sw = stack_weight(kind, attrs, ring, Pair(w[p], w[(p + 1) % 3]))
        plan.add_product("fc", sw, big_w if p == 0 else None)
        plan.x = Pair(x[p], x[(p + 1) % 3])
        comps.append(plan.product("fc", plan.x))
        assert plan.product("fc", Pair(x[p], x[(p + 1) % 3])) is None   # not the shared input
        k = xs[sw.axis]
        halves = ring.add(half_product(ring, sw.f, sw.axis, x[p], *_split(sw, k, True)),
                          half_product(ring, sw.f, sw.axis, x[(p + 1) % 3], *_split(sw, k, False)))
        assert np.array_equal(halves, stacked_product(ring, sw, plan.x))
    assert np.array_equal(ring.reduce(comps[0] + comps[1] + comps[2]), want)


def _online_tx(res):
    return {r: res[r].info["bus"]["online_transactions"] for r in ("p0", "p1", "p2")}


@pytest.mark.slow
@pytest.mark.parametrize("workload,batch", [("W3", 1), ("W3", 4), ("W4", 1)])
def test_work_before_the_query_keeps_outputs(workload, batch):
    """With the seed requests served ahead and the input-independent first layer offline,
    the online phase calls each LTEE only to evaluate (one transaction per evaluation, the
    output step's included); outputs equal the oracle and the run without either, with the
    same rounds and bytes."""
    g = load_model(build_workload(workload))
    x = workload_input(workload, batch)
    ref = run_fixed(g.with_batch(batch), x, FX32)
    # (the components sent ahead, ``test_send_ahead``, apart: they need the prefetched seeds)
    new = run_model(g, x, "semi-honest", options={"stamp_send_ahead": False})
    old = run_model(g, x, "semi-honest", options={"stamp_prefetch": False, "stamp_input_offline": False})
    assert np.array_equal(new["p1"].output_ring, ref)
    assert np.array_equal(old["p1"].output_ring, ref)
    ph = lambda res, k: [res[r].info["meter"]["phases"]["online"][k] for r in ("p0", "p1", "p2")]  # noqa: E731
    assert ph(new, "rounds") == ph(old, "rounds")
    assert ph(new, "sent_payload") == ph(old, "sent_payload")
    dev = {r: sum(new[r].info["bus"]["by_kind"].get(k, [0, 0, 0])[2] for k in ("eval", "output"))
           for r in ("p0", "p1", "p2")}
    tx_new, tx_old = _online_tx(new), _online_tx(old)
    assert sum(tx_new.values()) < sum(tx_old.values())
    assert tx_new == dev
