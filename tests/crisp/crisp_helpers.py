"""Shared helpers for the CRISP tests: run the three roles in-process, and a corrupt
client whose deviations are injected from outside the protocol code: a proxy around its
endpoint that rewrites outgoing frames by tag, and patches of functions only the client
runs (applied for one run, undone afterwards)."""

from __future__ import annotations

import re

import numpy as np

from secinfer.arith.fixed import FX64
from secinfer.crypto.prg import PRG
from secinfer.net.channel import run_local
from secinfer.protocols.base import PartyJob
from secinfer.protocols.crisp.protocol import SPEC


class Adversary:
    """A corrupt client: frame rules (tag regex -> fn(list of arrays) -> arrays) and patches
    (owner, attribute, wrap(original) -> replacement). ``fired`` counts the deviations
    that happened; ``run_crisp`` fails a run in which none did (unless ``spy``)."""

    def __init__(self, spy: bool = False) -> None:
        self.rules: list = []
        self.patches: list = []
        self.fired = 0
        self.spy = spy
        self.sent: list = []      # every tag the client sent

    def on_send(self, tag_regex: str, fn, once: bool = False) -> "Adversary":
        self.rules.append([re.compile(tag_regex), fn, once])
        return self

    def patch(self, owner, name: str, wrap) -> "Adversary":
        self.patches.append((owner, name, wrap))
        return self

    def __add__(self, other: "Adversary") -> "Adversary":
        out = Adversary(self.spy and other.spy)
        out.rules, out.patches = self.rules + other.rules, self.patches + other.patches
        return out

    def rewrite(self, tag: str, arrays: list) -> list:
        self.sent.append(tag)
        for rule in self.rules:
            rx, fn, once = rule
            if rx.fullmatch(tag):
                new = fn([np.array(a, copy=True) for a in arrays])
                if new is not None:
                    arrays = list(new)
                    self.fired += 1
                    if once:
                        self.rules.remove(rule)
        return arrays


class TamperEndpoint:
    """The corrupt party's endpoint: every outgoing frame passes ``Adversary.rewrite``."""

    def __init__(self, ep, adversary: Adversary) -> None:
        self._ep, self._adv = ep, adversary

    def send(self, peer, tag, *arrays):
        return self._ep.send(peer, tag, *self._adv.rewrite(tag, list(arrays)))

    def __getattr__(self, name):
        return getattr(self._ep, name)


def run_crisp(graph, x, security="malicious", linear="plain-insecure", adversary=None, cfg=FX64,
              seed=1, extra=None):
    def mk(role):
        opts = {"linear": linear}
        if extra:
            opts.update(extra)
        job = PartyJob(role=role, security=security, fixed=cfg, prg=PRG.for_tests(seed, role),
                       model=graph if role == "server" else None,
                       input=x if role == "client" else None, options=opts)
        if role == "client" and adversary is not None:
            return lambda ep: SPEC.run_party(role, TamperEndpoint(ep, adversary), job)
        return lambda ep: SPEC.run_party(role, ep, job)

    undo = []
    try:
        for owner, name, wrap in (adversary.patches if adversary else []):
            orig = owner.__dict__[name]
            undo.append((owner, name, orig))
            setattr(owner, name, wrap(orig))
        res = run_local({r: mk(r) for r in SPEC.roles}, timeout=300)
    finally:
        for owner, name, orig in reversed(undo):
            setattr(owner, name, orig)
    if adversary is not None and not adversary.spy:
        assert adversary.fired, "the adversary never deviated: the test would prove nothing"
    return res


def bump(a: np.ndarray, index: int, delta: int) -> np.ndarray:
    """``a`` (a copy) with ``delta`` added to element ``index`` (its low limb for limb arrays)."""
    a = np.array(a, copy=True)
    flat = a.reshape(-1) if a.ndim == 1 else a.reshape(-1, a.shape[-1])
    if flat.ndim == 1:
        flat[index] = flat[index] + np.uint64(delta)
    else:
        flat[index, 0] = flat[index, 0] + np.uint64(delta)
    return a


# Deviation points of Claim 2 [CRISP V-B]:
#   open      Delta 1: the client's share entering a gate (step's gate rounds)
#   c3re/c3im Delta 4: the complex share sent to Pi_Lin (real / imaginary part)
#   c1/c2     Delta 2/3: Re / Im of the client's share in the t check of Pi_Lin
#   q         Delta 5: the client's share of the folded consistency check
_LIN_ARRAY = {"c3re": 0, "c3im": 1, "c1": 2, "c2": 3}


def add_at(point, step=None, delta=1, index=0) -> Adversary:
    """A client deviation: add ``delta`` to element ``index`` at ``point`` (of ``step``)."""
    adv = Adversary()
    st = r"\d+" if step is None else str(step)

    def at(k):
        def fn(arrays):
            arrays[k] = bump(arrays[k], index, delta)
            return arrays
        return fn

    if point == "q":
        return adv.on_send(r"crisp/q", at(0))
    if point in _LIN_ARRAY:
        # the plain engine sends the four arrays as they are
        adv.on_send(rf"crisp/lin/{st}", at(_LIN_ARRAY[point]))
        if point in ("c3re", "c3im"):
            # the HE engine encrypts them: change the share the client's engine encrypts
            from secinfer.protocols.crisp.ckks_engine import CKKSLinear

            def wrap(orig):
                def client(self, ep, idx, stp, v1, w1):
                    if step is None or idx == step:
                        adv.fired += 1
                        if point == "c3re":
                            v1 = bump(v1, index, delta)
                        else:
                            w1 = bump(w1, index, delta)
                    return orig(self, ep, idx, stp, v1, w1)
                return client
            adv.patch(CKKSLinear, "client", wrap)
        return adv
    if point == "open":
        from secinfer.crypto.fss.gates import FSSGate

        def wrap(orig):
            def open_masked(self, ep, peer, key, x_share, tag):
                if ep.me == "client" and re.fullmatch(rf"crisp/g/{st}/\d+", tag):
                    adv.fired += 1
                    x_share = bump(np.asarray(x_share, np.uint64).reshape(-1), index, delta)
                return orig(self, ep, peer, key, x_share, tag)
            return open_masked
        return adv.patch(FSSGate, "open_masked", wrap)
    raise ValueError(f"unknown deviation point {point!r}")


def replace_frame(tag_regex: str, fn, k: int = 0, once: bool = False) -> Adversary:
    """Replace array ``k`` of the client's frames with tag ``tag_regex`` by ``fn(array)``."""
    def rule(arrays):
        arrays[k] = fn(arrays[k])
        return arrays
    return Adversary().on_send(tag_regex, rule, once)


def lin_step(d: dict):
    """A plan's linear step from the JSON fields (tests that drive the engine directly)."""
    from secinfer.protocols.twopc.plan import LinearStep

    return LinearStep(op="lin", name=d.get("name", "lin"), node_op=d["node_op"], inp=d.get("in", "a"),
                      out=d.get("out", "b"), in_shape=tuple(d["in_shape"]), out_shape=tuple(d["out_shape"]),
                      attrs=d.get("attrs", {}), wbits=d["wbits"])
