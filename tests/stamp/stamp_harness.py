"""Three in-process parties with real (emulated) LTEE processes, and fault injection."""

from __future__ import annotations

import numpy as np

from secinfer.arith.fixed import FX32
from secinfer.crypto.prg import PRG
from secinfer.errors import ProtocolAbort
from secinfer.net.channel import run_local
from secinfer.protocols.stamp.engine import Engine
from secinfer.protocols.stamp.ltee import LteeLink, initialize
from secinfer.protocols.stamp.nonlinear import StampOps

NAMES = ("p0", "p1", "p2")


class TamperEP:
    """Endpoint proxy that adds 1 to the first element of every message with ``tag``."""

    def __init__(self, ep, tag: str) -> None:
        self._ep, self._tag = ep, tag
        self.tampered = 0

    def send(self, peer, tag, *arrays):
        if tag == self._tag:
            arrays = list(arrays)
            a = arrays[0].copy()
            a.reshape(-1)[0] += a.dtype.type(1)
            arrays[0] = a
            self.tampered += 1
        return self._ep.send(peer, tag, *arrays)

    def __getattr__(self, name):
        return getattr(self._ep, name)


class TamperLink:
    """LTEE link proxy that alters the payload its host passes to the device (``eval``)."""

    def __init__(self, link, cmd: str = "eval") -> None:
        self._link, self._cmd = link, cmd

    def call(self, cmd, *arrays, kind=None):
        if cmd == self._cmd:
            arrays = list(arrays)
            a = arrays[2].copy()
            a[0] += a.dtype.type(1)
            arrays[2] = a
        return self._link.call(cmd, *arrays, kind=kind)

    def __getattr__(self, name):
        return getattr(self._link, name)


def run3(body, malicious=False, adversary=None, send_tag=None, device_tamper=False, options=None):
    """Run ``body(i, eng, ops) -> value`` in three parties; returns {i: value or exception}
    plus {i: (meter, bus meter)}."""
    meters = {}

    def party(i):
        def f(ep):
            if adversary == i and send_tag:
                ep = TamperEP(ep, send_tag)
            link = LteeLink(NAMES[i])
            try:
                opts = (options or {}).get(i, {})
                with ep.phase("setup"):
                    initialize(ep, NAMES, i, link, opts, 32, 13, malicious=malicious)
                    eng = Engine(ep, NAMES, i, FX32, malicious, PRG.for_tests(10 + i))
                    eng.setup_keys()
                dev = TamperLink(link) if (adversary == i and device_tamper) else link
                ops = StampOps(eng, dev)
                with ep.phase("online"):
                    out = body(i, eng, ops)
                meters[i] = (ep.meter, link.meter)
                return out
            finally:
                link.close()
        return f

    res = run_local({n: party(i) for i, n in enumerate(NAMES)}, timeout=120)
    return {i: res[n] for i, n in enumerate(NAMES)}, meters


def dealer_pairs(x: np.ndarray, seed: int = 5):
    """Replicated shares of ring array x (test dealer)."""
    from secinfer.sharing import replicated as rss
    prg = PRG.for_tests(seed)
    return rss.share(FX32.ring, x, lambda shp: prg.ring(shp, 32))


def assert_aborted(res, honest=(0, 1, 2)):
    for i in honest:
        assert isinstance(res[i], ProtocolAbort), f"party {i} did not abort: {res[i]!r}"
