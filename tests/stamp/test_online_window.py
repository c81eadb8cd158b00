"""The three parties of STAMP and Falcon+ enter the online phase before any of them does
online work (``rep3.graph.online_together``): the launcher's online latency runs from the
last party's entry, so work done before it would be left out of the measured window."""

import contextlib
import threading
import time

import numpy as np
import pytest

from secinfer.arith.fixed import FX32
from secinfer.bench.peers_suite import build_workload, workload_input
from secinfer.crypto.prg import PRG
from secinfer.ir.onnx_import import load_model
from secinfer.net.channel import Endpoint, run_local
from secinfer.protocols.base import PartyJob
from secinfer.protocols.registry import get

_LATE = 0.3   # p2 is descheduled this long just before it enters its online phase


@pytest.mark.parametrize("protocol,security", [("stamp", "semi-honest"), ("stamp", "malicious"),
                                               ("falcon", "semi-honest")])
def test_no_online_send_before_the_last_party_enters(monkeypatch, protocol, security):
    """p2 enters its online phase late (a test-side delay just before its entry). No party
    may send an online-metered message before that entry: with the "ready" exchanged
    before the entry (the former ``start_together``), p1 shared its input and p0 sent its
    first masked components while p2 had not entered. The "ready" itself stays offline."""
    orig_phase, orig_send = Endpoint.phase, Endpoint.send
    lock = threading.Lock()
    online_sends, late = [], []

    @contextlib.contextmanager
    def phase(self, name):
        if name == "online" and self.me == "p2" and not late:
            late.append(True)
            time.sleep(_LATE)
        with orig_phase(self, name) as e:
            yield e

    def send(self, peer, tag, *arrays):
        if self.current_phase == "online":
            with lock:
                online_sends.append((time.time(), self.me, tag))
        return orig_send(self, peer, tag, *arrays)

    monkeypatch.setattr(Endpoint, "phase", phase)
    monkeypatch.setattr(Endpoint, "send", send)
    meters = _run(protocol, security)
    assert late and online_sends
    entries = [m["phases"]["online"]["window"][0] for m in meters]
    first = min(online_sends)
    assert first[0] >= max(entries), (first, max(entries) - first[0])
    readies = [k for m in meters for k in m["by_tag"] if k.endswith("offline/ready") and "|sent|" in k]
    assert len(readies) == 6 and all(k.startswith("offline|") for k in readies), readies


def _run(protocol, security):
    """One in-process run (three threads) of W3, batch 1; the three parties' meter summaries."""
    spec = get(protocol)
    g = load_model(build_workload("W3"))
    x = workload_input("W3", 1)

    def party(k, role):
        def f(ep):
            job = PartyJob(role=role, security=security, fixed=FX32, prg=PRG.for_tests(30 + k),
                           model=g if role == spec.model_role else None,
                           input=x if role == spec.input_role else None, options={})
            return spec.run_party(role, ep, job)
        return f
    res = run_local({r: party(k, r) for k, r in enumerate(spec.roles)}, timeout=120)
    for v in res.values():
        if isinstance(v, Exception):
            raise v
    assert np.asarray(res[spec.input_role].output).size > 0
    return [res[r].info["meter"] for r in spec.roles]
