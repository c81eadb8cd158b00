"""Three in-process parties with real (emulated) LTEE processes, and fault injection."""

from __future__ import annotations

import numpy as np

from secinfer.arith.fixed import FX32
from secinfer.crypto.prg import PRG
from secinfer.errors import ProtocolAbort
from secinfer.net.channel import run_local
from adversary import Corrupt, flip, match
from secinfer.protocols.rep3.engine import Engine
from secinfer.protocols.stamp.ltee import LteeLink, initialize
from secinfer.protocols.stamp.nonlinear import StampOps

NAMES = ("p0", "p1", "p2")


class TamperLink:
    """LTEE link proxy that alters the payload its host passes to the device (``eval``)."""

    def __init__(self, link, cmd: str = "eval") -> None:
        self._link, self._cmd = link, cmd
        self.tampered = 0

    def call(self, cmd, *arrays, kind=None):
        if cmd == self._cmd:
            arrays = list(arrays)
            a = arrays[2].copy()
            a[0] += a.dtype.type(1)
            arrays[2] = a
            self.tampered += 1
        return self._link.call(cmd, *arrays, kind=kind)

    def __getattr__(self, name):
        return getattr(self._link, name)


def run3(body, malicious=False, adversary=None, send_tag=None, device_tamper=False, options=None):
    """Run ``body(i, eng, ops) -> value`` in three parties; returns {i: value or exception}
    plus {i: (meter, bus meter)}. ``adversary`` alters the first element of every message
    it sends with ``send_tag`` (tests/adversary.py) or, ``device_tamper``, the payload its
    host passes to its LTEE; either must have happened (else AssertionError)."""
    meters = {}
    adv = Corrupt(NAMES[adversary]).on_send(match(prefix=send_tag, suffix=send_tag), flip) \
        if adversary is not None and send_tag else None
    links = []

    def party(i):
        def f(ep):
            if adv is not None:
                ep = adv.wrap(NAMES[i], ep)
            link = LteeLink(NAMES[i])
            try:
                opts = (options or {}).get(i, {})
                with ep.phase("setup"):
                    initialize(ep, NAMES, i, link, opts, 32, 13, malicious=malicious)
                    eng = Engine(ep, NAMES, i, FX32, malicious, PRG.for_tests(10 + i))
                    eng.setup_keys()
                dev = TamperLink(link) if (adversary == i and device_tamper) else link
                if dev is not link:
                    links.append(dev)
                ops = StampOps(eng, dev)
                with ep.phase("online"):
                    out = body(i, eng, ops)
                meters[i] = (ep.meter, link.meter)
                return out
            finally:
                link.close()
        return f

    res = run_local({n: party(i) for i, n in enumerate(NAMES)}, timeout=120)
    assert adv is None or adv.fired, f"party {adversary} never sent a {send_tag!r} message to alter"
    assert not device_tamper or adversary is None or any(d.tampered for d in links), "no device call was altered"
    return {i: res[n] for i, n in enumerate(NAMES)}, meters


def dealer_pairs(x: np.ndarray, seed: int = 5):
    """Replicated shares of ring array x (test dealer)."""
    from secinfer.sharing import replicated as rss
    prg = PRG.for_tests(seed)
    return rss.share(FX32.ring, x, lambda shp: prg.ring(shp, 32))


def assert_aborted(res, honest=(0, 1, 2)):
    for i in honest:
        assert isinstance(res[i], ProtocolAbort), f"party {i} did not abort: {res[i]!r}"


def run_recorded(graph, x, options, security="semi-honest", seed=30):
    """The whole STAMP protocol on three in-process parties (``spec.run_party``), each one's
    sends recorded in order (``RecordingEndpoint``): (results by role, sends by role). The
    parties' PRGs are ``PRG.for_tests(seed + k)``, so two runs with one seed draw alike."""
    from secinfer.protocols.base import PartyJob
    from secinfer.protocols.registry import get
    from recording_ep import RecordingEndpoint

    spec = get("stamp")
    sent = {r: [] for r in NAMES}

    def party(role, k):
        def f(ep):
            job = PartyJob(role=role, security=security, fixed=FX32, prg=PRG.for_tests(seed + k),
                           model=graph if role == spec.model_role else None,
                           input=x if role == spec.input_role else None, options=dict(options))
            return spec.run_party(role, RecordingEndpoint(ep, sent[role]), job)
        return f
    res = run_local({r: party(r, k) for k, r in enumerate(NAMES)}, timeout=300)
    for v in res.values():
        if isinstance(v, Exception):
            raise v
    return res, sent
