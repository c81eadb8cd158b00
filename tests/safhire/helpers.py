"""Run SAFHIRE's two parties in one process (LocalHub threads) on small insecure rings."""

from __future__ import annotations

import numpy as np

from secinfer.arith.fixed import get_config
from secinfer.crypto.prg import PRG
from secinfer.net.channel import run_local
from secinfer.protocols.base import PartyJob
from secinfer.protocols.safhire.protocol import SPEC

TEST_PARAMS = "ckks-n10-insecure"


def options(**kw) -> dict:
    o = {"he_params": TEST_PARAMS, "allow_insecure_he": True}
    o.update(kw)
    return o


def run(graph, x, opts: dict, client_ep=None, server_seed: int = 7, client_seed: int = 8):
    """{role: PartyResult or exception}; ``client_ep`` wraps the client's endpoint (attacks)."""
    cfg = get_config(SPEC.default_fixed)
    sjob = PartyJob("server", "semi-honest", cfg, PRG.for_tests(server_seed), model=graph,
                    options=dict(opts))
    cjob = PartyJob("client", "semi-honest", cfg, PRG.for_tests(client_seed), input=np.asarray(x),
                    options=dict(opts))
    wrap = client_ep or (lambda ep: ep)
    return run_local({"server": lambda ep: SPEC.run_party("server", ep, sjob),
                      "client": lambda ep: SPEC.run_party("client", wrap(ep), cjob)}, timeout=300)


def server_seed(seed: int = 7) -> bytes:
    """The session seed the server draws from PRG.for_tests(seed) (to unshuffle in tests)."""
    return PRG.for_tests(seed).derive("safhire/session-seed").seed()
