"""Run the three certified roles in-process (LocalHub) with small test parameters."""

from __future__ import annotations

import numpy as np

from secinfer.arith.fixed import FX64
from secinfer.crypto.prg import PRG
from secinfer.net.channel import run_local
from secinfer.protocols.base import PartyJob
from secinfer.protocols.certified.protocol import SPEC

TEST_OPTS = {"allow_insecure": True, "reps": 3}


def run_certified(x, usecase="sum", options=None, wrap=None, seed=1, session_id=b"\x00" * 16):
    """``wrap``: {role: fn(endpoint) -> endpoint} (a corrupt party's proxy, test-side)."""
    from secinfer.protocols.certified import usecases

    opts = dict(TEST_OPTS, usecase=usecase, he_params=usecases.get(usecase).test_params)
    opts.update(options or {})

    def mk(role):
        job = PartyJob(role=role, security="malicious", fixed=FX64, prg=PRG.for_tests(seed, role),
                       input=np.asarray(x) if role == "data_source" else None, options=opts)

        def go(ep):
            if wrap and role in wrap:
                ep = wrap[role](ep)
            return SPEC.run_party(role, ep, job)
        return go

    return run_local({r: mk(r) for r in SPEC.roles}, timeout=300, session_id=session_id)


class Proxy:
    """Endpoint proxy of a corrupt party: ``on_send(tag, arrays) -> arrays`` rewrites what
    it sends, ``on_recv(tag, arrays) -> arrays`` what it receives."""

    def __init__(self, ep, on_send=None, on_recv=None):
        self._ep, self._on_send, self._on_recv = ep, on_send, on_recv

    def send(self, peer, tag, *arrays):
        arrays = list(arrays)
        if self._on_send is not None:
            arrays = self._on_send(tag, arrays)
        return self._ep.send(peer, tag, *arrays)

    def recv(self, peer, tag, *specs, **kw):
        arrays = self._ep.recv(peer, tag, *specs, **kw)
        if self._on_recv is not None:
            arrays = self._on_recv(tag, list(arrays))
        return arrays

    def __getattr__(self, name):
        return getattr(self._ep, name)


def aborted(res, role, check):
    """True iff ``role`` aborted on ``check`` (its own check, not a peer's announcement)."""
    from secinfer.errors import PeerAbortedError, ProtocolAbort

    r = res[role]
    return isinstance(r, ProtocolAbort) and not isinstance(r, PeerAbortedError) and r.check == check


def no_output(res):
    """No role produced a result (every one raised)."""
    return all(isinstance(r, BaseException) for r in res.values())
