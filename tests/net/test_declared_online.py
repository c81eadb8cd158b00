"""Issue #23: at one query every online tag of astra's semi-honest direct path is sent
exactly once, so frame templates built by a first frame never served its online phase.
The protocol declares its online messages in the offline phase (``Endpoint.expect_send`` /
``expect_recv``); this holds the declarations to the frames actually sent and received
online (peer, tag, dtype, shape), at every party, for a regression and a classifier."""

import numpy as np
import pytest
from sklearn.linear_model import LinearRegression, LogisticRegression

from secinfer.arith.fixed import FX64
from secinfer.crypto.prg import PRG
from secinfer.net.channel import LocalEndpoint, run_local
from secinfer.protocols.astra.protocol import SPEC
from secinfer.protocols.base import PartyJob

pytestmark = [pytest.mark.timeout(60)]


def _run(model, x, monkeypatch):
    declared, online = set(), set()
    send, recv = LocalEndpoint.send, LocalEndpoint.recv

    def expect_send(self, peer, tag, dtype, shape):
        assert self.current_phase != "online"
        declared.add((self.me, "sent", peer, tag, np.dtype(dtype), tuple(shape)))

    def expect_recv(self, peer, tag, dtype, shape):
        assert self.current_phase != "online"
        declared.add((self.me, "recv", peer, tag, np.dtype(dtype), tuple(shape)))

    def rec_send(self, peer, tag, *arrays):
        if self.current_phase == "online":
            for a in arrays:
                online.add((self.me, "sent", peer, tag, a.dtype, a.shape))
        return send(self, peer, tag, *arrays)

    def rec_recv(self, peer, tag, *specs, timeout=None):
        got = recv(self, peer, tag, *specs, timeout=timeout)
        if self.current_phase == "online":
            for a in got:
                online.add((self.me, "recv", peer, tag, a.dtype, a.shape))
        return got

    monkeypatch.setattr(LocalEndpoint, "expect_send", expect_send, raising=False)
    monkeypatch.setattr(LocalEndpoint, "expect_recv", expect_recv, raising=False)
    monkeypatch.setattr(LocalEndpoint, "send", rec_send)
    monkeypatch.setattr(LocalEndpoint, "recv", rec_recv)

    def party(role):
        def f(ep):
            job = PartyJob(role, "semi-honest", FX64, PRG.for_tests(SPEC.roles.index(role)),
                           model=model if role == "model_owner" else None,
                           input=x if role == "client" else None, options={})
            return SPEC.run_party(role, ep, job)
        return f

    res = run_local({r: party(r) for r in SPEC.roles}, recv_timeout=20)
    for v in res.values():
        if isinstance(v, BaseException):
            raise v
    return declared, online


@pytest.mark.parametrize("cls", [False, True], ids=["regression", "classifier"])
def test_every_online_frame_was_declared_offline(cls, monkeypatch):
    rng = np.random.default_rng(5)
    x = rng.normal(0, 1, (40, 6))
    if cls:
        model = LogisticRegression().fit(x, (x[:, 0] + x[:, 1] > 0).astype(int))
    else:
        model = LinearRegression().fit(x, x @ np.arange(1.0, 7.0) + 0.5)
    declared, online = _run(model, x[:3], monkeypatch)
    assert online, "no online frames seen"
    assert online == declared
