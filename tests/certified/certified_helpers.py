"""Run the three certified roles in-process (LocalHub) with small test parameters."""

from __future__ import annotations

import numpy as np

from secinfer.arith.fixed import FX64
from secinfer.crypto.prg import PRG
from secinfer.net.channel import run_local
from secinfer.protocols.base import PartyJob
from secinfer.protocols.certified.protocol import SPEC

TEST_OPTS = {"allow_insecure": True, "reps": 3}


def run_certified(x, usecase="sum", options=None, wrap=None, seed=1):
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

    return run_local({r: mk(r) for r in SPEC.roles}, timeout=300)


class SendProxy:
    """Endpoint proxy: ``edit(tag, arrays) -> arrays`` rewrites what this party sends."""

    def __init__(self, ep, edit):
        self._ep, self._edit = ep, edit

    def send(self, peer, tag, *arrays):
        return self._ep.send(peer, tag, *self._edit(tag, list(arrays)))

    def __getattr__(self, name):
        return getattr(self._ep, name)
