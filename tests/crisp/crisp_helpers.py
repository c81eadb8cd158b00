"""Shared helpers for the CRISP tests: run the three roles in-process."""

from __future__ import annotations

import numpy as np

from secinfer.arith.fixed import FX64
from secinfer.crypto.prg import PRG
from secinfer.net.channel import run_local
from secinfer.protocols.base import PartyJob
from secinfer.protocols.crisp.protocol import SPEC


def run_crisp(graph, x, security="malicious", linear="plain-insecure", tamper=None, cfg=FX64,
              seed=1, extra=None):
    def mk(role):
        opts = {"linear": linear, "allow_insecure_linear": linear == "plain-insecure"}
        if extra:
            opts.update(extra)
        if role == "client" and tamper is not None:
            opts["test_tamper"] = tamper
        job = PartyJob(role=role, security=security, fixed=cfg, prg=PRG.for_tests(seed, role),
                       model=graph if role == "server" else None,
                       input=x if role == "client" else None, options=opts)
        return lambda ep: SPEC.run_party(role, ep, job)

    return run_local({r: mk(r) for r in SPEC.roles}, timeout=300)


def add_at(point, step=None, delta=1, index=0):
    """A client deviation: add ``delta`` to element ``index`` of the array at ``point``."""

    def tamper(p, idx, a):
        if p != point or (step is not None and idx != step):
            return a
        a = np.array(a, copy=True)
        flat = a.reshape(-1) if a.ndim == 1 else a.reshape(-1, a.shape[-1])
        if flat.ndim == 1:
            flat[index] = flat[index] + np.uint64(delta)
        else:
            flat[index, 0] = flat[index, 0] + np.uint64(delta)
        return a

    return tamper
