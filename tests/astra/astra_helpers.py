"""Shared helpers for the ASTRA tests (3-server engine runs and 5-role protocol runs)."""

from __future__ import annotations

import numpy as np

from secinfer.arith.fixed import FX64
from secinfer.crypto.prg import PRG
from secinfer.net.channel import run_local
from secinfer.protocols.astra.engine import AstraEngine
from secinfer.protocols.rep3.keys import setup_keys
from secinfer.protocols.astra.protocol import SPEC
from secinfer.protocols.base import PartyJob

SERVERS = ("p0", "p1", "p2")
HASH_TAGS = ("/hm", "/hl1", "/hl2", "/hmstar", "astra/zero", "astra/coin", "astra/verify", "astra/keyh")


def run_servers(security, body, bits=64, seed=0, **eng_kw):
    """Run ``body(eng) -> result`` on the three servers; returns ({role: result}, {role: meter})."""
    def party(role):
        def f(ep):
            with ep.phase("setup"):
                keys = setup_keys(ep, role, PRG.for_tests(seed * 10 + SERVERS.index(role)), security != "semi-honest")
            eng = AstraEngine(ep, role, keys, security, bits, prg=PRG.for_tests(seed * 10 + 5 + SERVERS.index(role)),
                              **eng_kw)
            return body(eng), ep.meter
        return f
    res = run_local({r: party(r) for r in SERVERS}, recv_timeout=20)
    for r, v in res.items():
        if isinstance(v, BaseException):
            raise v
    return {r: v[0] for r, v in res.items()}, {r: v[1] for r, v in res.items()}


def traffic(meters, phase, hashes=False, prefix="astra/"):
    """Payload bits sent by all servers in ``phase`` (ring elements, or only hash messages)."""
    tot = 0
    for m in meters.values():
        for (ph, d, _p, tag), c in m.counters.items():
            if ph != phase or d != "sent" or not tag.startswith(prefix):
                continue
            is_hash = any(h in tag for h in HASH_TAGS)
            if is_hash == hashes:
                tot += c.payload
    return 8 * tot


def rounds(meters, phase):
    return max(m.rounds(phase) for m in meters.values())


def run_protocol(model, x, security, options=None, seed=0, timeout=20, adversary=None):
    """All five roles in-process; ``adversary`` (tests/adversary.py ``Corrupt``) wraps the
    corrupt party's endpoint."""
    def party(role):
        def f(ep):
            if adversary is not None:
                ep = adversary.wrap(role, ep)
            job = PartyJob(role, security, FX64, PRG.for_tests(seed * 10 + SPEC.roles.index(role)),
                           model=model if role == "model_owner" else None,
                           input=x if role == "client" else None, options=dict(options or {}))
            return SPEC.run_party(role, ep, job), ep.meter
        return f
    res = run_local({r: party(r) for r in SPEC.roles}, recv_timeout=timeout)
    return {r: (v if isinstance(v, BaseException) else v[0]) for r, v in res.items()}, \
        {r: v[1] for r, v in res.items() if not isinstance(v, BaseException)}


def reveal(eng, share, label="t"):
    return eng.open_all(share, label)


def rand_input(eng, shape, label):
    """A random [[x]] with no communication (Pi_rand) and its value at every server after opening."""
    from secinfer.protocols.astra.triples import rand_shares
    n = int(np.prod(shape))
    s = rand_shares(eng, n, label)
    return s.map(lambda a: a.reshape(shape))
