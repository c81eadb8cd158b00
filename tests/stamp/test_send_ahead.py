"""Semi-honest STAMP, components sent ahead (issue #23 item 4; option ``stamp_send_ahead``,
``StampOps.ahead``): the masked 3-out-of-3 components that depend on offline data only -- p1's
and p2's parts of a first-layer product (``input_offline``) and of a product of a held result
(``_plan_held``) -- are computed by a second dry run with the prefetched seeds and sent before
the online phase. The same values, sent earlier: outputs equal the oracle bit for bit, the
messages keep their tags and sizes (metered offline now), and W4 leaves p2 nothing to do online."""

import numpy as np
import pytest

from secinfer.arith.fixed import FX32
from secinfer.bench.peers_suite import build_workload, workload_input
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model

from test_stamp_models import run_model

ROLES = ("p0", "p1", "p2")


def _online(res, key):
    return [res[r].info["meter"]["phases"]["online"][key] for r in ROLES]


def _by_tag(res, phase: str) -> dict:
    """(sender, receiver, tag) -> payload bytes sent in ``phase``."""
    out = {}
    for r in ROLES:
        for k, v in res[r].info["meter"]["by_tag"].items():
            ph, way, peer, tag = k.split("|", 3)
            if ph == phase and way == "sent":
                out[(r, peer, tag)] = out.get((r, peer, tag), 0) + v[0]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("workload,batch", [("W3", 1), ("W4", 1), ("W3", 4)])
def test_sent_ahead_exact_same_messages_earlier(workload, batch):
    """Outputs equal the oracle and the run without the option; every stamp/x' and stamp/out'
    message p1 or p2 sent online without the option is sent before the online phase with it,
    with the same tag and size (a message the online phase still sends is unchanged), the
    online rounds are unchanged and nothing else moves."""
    g = load_model(build_workload(workload))
    x = workload_input(workload, batch)
    ref = run_fixed(g.with_batch(batch), x, FX32)
    new = run_model(g, x, "semi-honest")
    old = run_model(g, x, "semi-honest", options={"stamp_send_ahead": False})
    assert np.array_equal(new["p1"].output_ring, ref)
    assert np.array_equal(old["p1"].output_ring, ref)
    assert _online(new, "rounds") == _online(old, "rounds")
    on_new, on_old = _by_tag(new, "online"), _by_tag(old, "online")
    off_new, off_old = _by_tag(new, "offline"), _by_tag(old, "offline")
    moved = {k: v - on_new.get(k, 0) for k, v in on_old.items() if v != on_new.get(k, 0)}
    assert moved and sum(moved.values()) > 0, "nothing was sent ahead"
    assert all(k[0] in ("p1", "p2") and k[2] in ("stamp/x'", "stamp/out'") for k in moved)
    assert set(on_new) <= set(on_old)       # nothing new online; what stays is unchanged or less
    for k, v in moved.items():              # what moved is offline now, the same size
        assert v > 0 and off_new.get(k, 0) - off_old.get(k, 0) == v
    assert {k for k in off_new if off_new[k] != off_old.get(k, 0)} == set(moved)
    # every mask expanded before the query was taken online, the evaluator's own output
    # component included (its zero-share seeds served ahead, ``StampOps.evaluator_seeds``)
    assert [new[r].info["expanded_unused"] for r in ROLES] == [0, 0, 0]
    if batch == 1:   # p1 sends only its input online, p2 nothing; p0 its output component
        assert [sorted(t for (s, _, t) in on_new if s == r) for r in ROLES] == [["stamp/out'"], ["rss/input"], []]
        assert new["p2"].info["bus"]["online_transactions"] == 0


def test_window_and_option_off_keep_the_old_messages():
    """With the option off (or without the prefetched seeds it needs) p1 and p2 send their
    first-layer components online as before; both exact."""
    g = load_model(build_workload("W4"))
    x = workload_input("W4", 1)
    ref = run_fixed(g, x, FX32)
    for opts in ({"stamp_send_ahead": False}, {"stamp_prefetch": False}):
        res = run_model(g, x, "semi-honest", options=opts)
        assert np.array_equal(res["p1"].output_ring, ref)
        on = _by_tag(res, "online")
        assert on[("p2", "p0", "stamp/x'")] == 4 * 16 * 24 * 24 + 4 * 16
        assert ("p2", "p0", "stamp/x'") not in _by_tag(res, "offline")


@pytest.mark.parametrize("workload,batch", [("W3", 1), ("W4", 1), ("W3", 4)])
def test_online_frames_declared_offline(workload, batch, monkeypatch):
    """Every frame the online phase sends or receives was declared in the offline phase
    (``Endpoint.expect_send``/``expect_recv``, frame templates: ``StampOps.declare_online``,
    ``InputPlan.declare``) with its peer, tag, dtype and shape, and nothing else was, at
    every party; and the "ready" frames of ``online_together`` (sent inside the online window,
    metered offline; ``rep3.graph.expect_ready``), two out and two in at each party."""
    from secinfer.net.channel import LocalEndpoint

    declared, online = set(), set()
    send, recv = LocalEndpoint.send, LocalEndpoint.recv

    def expect(way):
        def f(self, peer, tag, dtype, shape):
            assert self.current_phase != "online"
            declared.add((self.me, way, peer, tag, np.dtype(dtype), tuple(shape)))
        return f

    def rec_send(self, peer, tag, *arrays):
        if self.current_phase == "online":
            online.update((self.me, "sent", peer, tag, a.dtype, a.shape) for a in arrays)
        return send(self, peer, tag, *arrays)

    def rec_recv(self, peer, tag, *specs, timeout=None):
        got = recv(self, peer, tag, *specs, timeout=timeout)
        if self.current_phase == "online":
            online.update((self.me, "recv", peer, tag, a.dtype, a.shape) for a in got)
        return got

    monkeypatch.setattr(LocalEndpoint, "expect_send", expect("sent"), raising=False)
    monkeypatch.setattr(LocalEndpoint, "expect_recv", expect("recv"), raising=False)
    monkeypatch.setattr(LocalEndpoint, "send", rec_send)
    monkeypatch.setattr(LocalEndpoint, "recv", rec_recv)
    g = load_model(build_workload(workload))
    x = workload_input(workload, batch)
    res = run_model(g, x, "semi-honest")
    assert np.array_equal(res["p1"].output_ring, run_fixed(g.with_batch(batch), x, FX32))
    assert online, "no online frames seen"
    ready = {d for d in declared if d[3] == "offline/ready"}   # (sent inside the window, metered offline)
    assert len(ready) == 12
    assert online == declared - ready
