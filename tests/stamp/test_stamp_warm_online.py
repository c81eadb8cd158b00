"""Semi-honest STAMP, option ``stamp_warm_online`` (``StampBackend.warm``, ``StampOps.warm``):
each party runs its online steps once on scratch inputs right before its "ready". It changes
nothing any party or device sees: with the option on and off (same host seeds) every party
sends the same messages in the same order (peer, tag and, where the run is deterministic,
bytes), the meters count the same bytes per phase, tag and direction, every LTEE is asked the
same (bus bytes per kind, transactions, device operation counts), every mask expanded ahead is
taken online, and the outputs equal the fixed-point oracle. The dry run happens only when on.
Also: the model owner's first-layer product with its ``SignedWeight`` (one float64 matrix)
equals the ring product, and the input's online component from the precomputed sum."""

import numpy as np
import pytest

from secinfer.arith.fixed import FX32
from secinfer.bench.peers_suite import build_workload, workload_input
from secinfer.errors import ProtocolError
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model
from secinfer.protocols.stamp import input_offline
from secinfer.protocols.stamp.input_offline import SignedWeight, half_product
from stamp_harness import run_recorded  # tests/stamp helper

ROLES = ("p0", "p1", "p2")


def _run(graph, x, options):
    return run_recorded(graph, x, options, seed=30)


def _bus(info):
    b = info["bus"]
    return (b["to_device"], b["from_device"], b["online_bytes"], b["online_transactions"],
            b["preprocessing_bytes"], sorted(map(tuple, b["by_kind"].items())),
            {k: v for k, v in info["device_ops"].items() if k != "emulation_busy_s"})   # (a time)


@pytest.mark.slow
@pytest.mark.parametrize("workload,batch", [("W3", 1), ("W4", 1), ("W3", 4)])
def test_warm_online_changes_nothing_seen(workload, batch):
    g = load_model(build_workload(workload))
    x = workload_input(workload, batch)
    ref = run_fixed(g.with_batch(batch), x, FX32)
    on, sent_on = _run(g, x, {})                               # the default: on
    off, sent_off = _run(g, x, {"stamp_warm_online": False})
    again, sent_again = _run(g, x, {})
    for res in (on, off, again):
        assert np.array_equal(res["p1"].output_ring, ref)
        assert [res[r].info["expanded_unused"] for r in ROLES] == [0, 0, 0]
    assert [on[r].info["warmed"] for r in ROLES] == [True] * 3
    assert [off[r].info["warmed"] for r in ROLES] == [False] * 3
    for r in ROLES:
        # the same messages, in order, to the same peers, of the same sizes
        assert [(p, t, tuple(len(b) for b in bs)) for p, t, bs in sent_on[r]] == \
               [(p, t, tuple(len(b) for b in bs)) for p, t, bs in sent_off[r]]
        # byte for byte wherever two runs with the option on agree (the LTEEs' own keys are
        # fresh per run, so a masked component differs between any two runs)
        for a, b, c in zip(sent_on[r], sent_again[r], sent_off[r]):
            if a == b:
                assert a == c, (r, a[:2])
        m_on, m_off = on[r].info["meter"], off[r].info["meter"]
        assert m_on["by_tag"] == m_off["by_tag"]
        assert m_on["phases"]["online"]["rounds"] == m_off["phases"]["online"]["rounds"]
        assert _bus(on[r].info) == _bus(off[r].info)
        assert {k: v for k, v in on[r].info.items() if k in ("device_calls", "products", "output_fused")} == \
               {k: v for k, v in off[r].info.items() if k in ("device_calls", "products", "output_fused")}
    # the input message is drawn from the host keys only: byte for byte in every run
    inp = [m for m in sent_on["p1"] if m[1] == "rss/input"]
    assert inp and inp == [m for m in sent_off["p1"] if m[1] == "rss/input"]


@pytest.mark.parametrize("mode", ["process", "inprocess"])
def test_warm_online_takes_nothing(monkeypatch, mode):
    """The dry run itself: no message, no device request while it runs; what it may only look
    at (seeds served ahead, masks expanded ahead, components received ahead) is all there
    after it, and taken by the online phase (``expanded_unused`` 0, output exact)."""
    from secinfer.protocols.stamp import nonlinear
    from secinfer.protocols.stamp.backend import StampBackend

    seen = {}
    real_warm = StampBackend.warm

    def warm(self, graph, env, scratch):
        ops = self.ops
        before = (dict(ops._ahead), dict(ops._expanded), dict(ops._got_ahead), set(ops._sent_ahead),
                  dict(self._z_ahead), dict(ops._got_sum), ops.op, ops.ctr, self._rot, dict(self.counts), set(self._held),
                  self.eng.ep.meter.summary()["by_tag"], ops.link.meter.total, ops.link.meter.transactions)
        calls = []
        orig_call, orig_many = ops.link.call, ops.link.call_many
        ops.link.call = lambda *a, **k: calls.append(a) or orig_call(*a, **k)
        ops.link.call_many = lambda *a, **k: calls.append(a) or orig_many(*a, **k)
        try:
            ok = real_warm(self, graph, env, scratch)
        finally:
            ops.link.call, ops.link.call_many = orig_call, orig_many
        after = (dict(ops._ahead), dict(ops._expanded), dict(ops._got_ahead), set(ops._sent_ahead),
                 dict(self._z_ahead), dict(ops._got_sum), ops.op, ops.ctr, self._rot, dict(self.counts), set(self._held),
                 self.eng.ep.meter.summary()["by_tag"], ops.link.meter.total, ops.link.meter.transactions)
        seen[self.eng.me] = (ok, calls, before[6:] == after[6:],
                             all(set(before[k]) == set(after[k]) for k in range(6)),
                             all(before[k][key] is after[k][key] for k in (0, 1, 2, 4, 5) for key in before[k]))
        return ok

    monkeypatch.setattr(StampBackend, "warm", warm)
    assert nonlinear.StampOps.warm   # (the ops-level driver the backend calls)
    g = load_model(build_workload("W3"))
    x = workload_input("W3", 1)
    res, _ = _run(g, x, {"stamp_ltee": mode})
    assert np.array_equal(res["p1"].output_ring, run_fixed(g, x, FX32))
    assert [res[r].info["ltee_mode"] for r in ROLES] == [mode] * 3
    assert sorted(seen) == [0, 1, 2]
    for me, (ok, calls, same_state, same_keys, same_values) in seen.items():
        assert ok and calls == [] and same_state and same_keys and same_values, me


def test_warm_online_option_values():
    g = load_model(build_workload("W3"))
    x = workload_input("W3", 1)
    with pytest.raises(ProtocolError, match="stamp_warm_online"):
        _run(g, x, {"stamp_warm_online": "yes"})
    # not with the components kept online (option stamp_send_ahead off): no dry run, exact
    res, _ = _run(g, x, {"stamp_send_ahead": False})
    assert [res[r].info["warmed"] for r in ROLES] == [False] * 3
    assert np.array_equal(res["p1"].output_ring, run_fixed(g, x, FX32))


def test_signed_weight_product_exact():
    """``SignedWeight``: the model owner's weight as one signed float64 matrix gives the ring
    product f(v, W) mod 2^32 bit for bit (random 32-bit v, weights of every size the bound
    admits, both signs); a weight past the bound gets None (the limbs are used)."""
    rng = np.random.default_rng(7)
    ring = FX32.ring
    for k, n, big in ((784, 128, 1 << 14), (128, 10, 1 << 20), (3, 5, (1 << 53) // (0xFFFF * 3) - 1)):
        ws = rng.integers(-big, big + 1, (k, n))
        ws[0, 0] = -big
        w = ring.reduce(ws.astype(np.int64).astype(np.uint64))
        sw = SignedWeight.of(w)
        assert sw is not None
        for rows in (1, 3):
            v = rng.integers(0, 1 << 32, (rows, k), dtype=np.uint64)
            v[0, :2] = (1 << 32) - 1
            want = ring.reduce(v @ w)             # numpy's uint64 product wraps mod 2^64: exact mod 2^32
            assert np.array_equal(sw(v), want)
            assert np.array_equal(half_product(ring, None, -1, v, w, sw), want)
            limbs = ((w & np.uint64(0xFFFF)).astype(np.float64), (w >> np.uint64(16)).astype(np.float64))
            assert np.array_equal(half_product(ring, None, -1, v, w, limbs), want)
    w = ring.reduce(np.full((784, 4), 1 << 30, np.uint64))
    assert SignedWeight.of(w) is None
    assert SignedWeight.of(np.zeros((2, 3, 4), np.uint64)) is None
    assert input_offline._EXACT == 1 << 53


def test_recorded_spec_facts_used_only_when_equal():
    """``StampOps._facts``: the plan dry run records each job's validated spec, sizes and (once
    asked) bytes by (operation, job); online the record is taken only for an equal spec -- any
    other is validated (a bad one refused) and measured again; malicious records nothing."""
    from types import SimpleNamespace

    from secinfer.protocols.stamp.ltee import spec_bytes
    from secinfer.protocols.stamp.nonlinear import StampOps

    ops = StampOps.__new__(StampOps)
    ops.op, ops.recording, ops._early_run, ops._spec_memo = 0, [], False, {}
    ops.eng = SimpleNamespace(malicious=False)
    spec = {"shape": [1, 4], "out_shape": [1, 4], "params": [], "steps": [{"op": "trunc"}]}
    f = ops._facts(spec, 0)
    assert f[2:] == [4, (1, 4), 4] and ops._spec_memo[(0, 0)] is f
    ops.recording = None                                   # online
    assert ops._facts(dict(spec), 0) is f
    b = ops._spec_of(spec, 0)
    assert bytes(b) == bytes(spec_bytes(spec)) and ops._spec_of(dict(spec), 0) is b
    with pytest.raises(ProtocolError):
        ops._facts(dict(spec, steps=[{"op": "node", "node": {"op": "NotADeviceOp"}}]), 0)
    other = ops._facts(dict(spec, shape=[1, 5], out_shape=[1, 5]), 0)
    assert other[2:] == [5, (1, 5), 5] and ops._spec_memo[(0, 0)] is f
    ops.eng.malicious, ops.recording, ops.op = True, [], 1
    ops._facts(spec, 0)
    assert (1, 0) not in ops._spec_memo
