"""The online window (``runtime.launcher``: from the last party's entry into the online
phase to the last exit) holds all of CRISP's online work: the client enters the online
phase only after the server has, even when the server is slow to get there."""

from __future__ import annotations

import contextlib
import os
import sys
import time

import numpy as np
import pytest

from secinfer.arith.fixed import FX64
from secinfer.crypto.prg import PRG
from secinfer.ir import bundled
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model
from secinfer.net.channel import run_local
from secinfer.protocols.base import PartyJob
from secinfer.protocols.crisp.protocol import SPEC

sys.path.insert(0, os.path.dirname(__file__))

LATE = 0.2   # seconds the server lingers before entering its online phase


class LateEntry:
    """The server's endpoint, entering the online phase LATE seconds after it is done
    with the offline phase (as a server descheduled there would)."""

    def __init__(self, ep) -> None:
        self._ep = ep

    @contextlib.contextmanager
    def phase(self, name):
        if name == "online":
            time.sleep(LATE)
        with self._ep.phase(name):
            yield self

    def __getattr__(self, name):
        return getattr(self._ep, name)


@pytest.mark.parametrize("security", ["malicious", "semi-honest"])
def test_client_enters_the_online_phase_after_the_server(security):
    g = load_model(bundled.bundled_path("digits-mlp"))
    x = bundled.bundled_testset("digits-mlp")[0][:2]
    meters = {}

    def mk(role):
        job = PartyJob(role=role, security=security, fixed=FX64, prg=PRG.for_tests(4, role),
                       model=g if role == "server" else None, input=x if role == "client" else None,
                       options={"linear": "plain-insecure"})

        def fn(ep):
            meters[role] = ep.meter
            return SPEC.run_party(role, LateEntry(ep) if role == "server" else ep, job)
        return fn

    res = run_local({r: mk(r) for r in SPEC.roles}, timeout=300)
    for role, r in res.items():
        assert not isinstance(r, BaseException), (role, r)
    np.testing.assert_array_equal(res["client"].output_ring, run_fixed(g, x, FX64))
    server, client = meters["server"].windows["online"], meters["client"].windows["online"]
    assert client[0] >= server[0], f"the client entered {server[0] - client[0]:.3f} s before the server"
    # the server's word is an offline message (sent from inside its online phase)
    assert meters["server"].messages("offline", "sent", tag_prefix="crisp/go") == 1
    assert meters["server"].messages("online", "sent", tag_prefix="crisp/go") == 0
    assert meters["client"].messages("offline", "recv", tag_prefix="crisp/go") == 1
