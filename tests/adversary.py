"""Fault injection from the tests, for every protocol (never hooks in protocol code).

A corrupt party deviates in one of two ways, both applied from outside:

* ``Corrupt.endpoint(ep)``: an endpoint proxy that rewrites the frames this party sends
  (``on_send``) or receives (``on_recv``) by tag, can crash the party at a frame
  (``crash_at``), or keep its abort to itself (``silent``);
* ``Corrupt.patch(monkeypatch, cls, name, fn)``: a method of the engine replaced for the
  objects whose ``role`` is the corrupt party (parties run in-process as LocalHub threads,
  so a class patch must pick its instances).

Every rewrite counts in ``fired``; a test asserts ``fired`` so an attack that never
happened cannot pass for one that was caught.
"""

from __future__ import annotations

import numpy as np

from secinfer.errors import ProtocolAbort


class Crash(Exception):
    """The corrupt party stops (a crash at a chosen step)."""


def flip(a: np.ndarray) -> np.ndarray:
    """A wrong value: the first element + 1 (uint8: every bit of the first byte flipped, so
    packed bits and hashes change too)."""
    a = np.array(a, copy=True)
    flat = a.reshape(-1)
    if flat.size:
        flat[0] = flat[0] ^ np.uint8(0xFF) if a.dtype == np.uint8 else flat[0] + a.dtype.type(1)
    return a


def flip_at(i: int):
    """``flip`` of element ``i`` (flat index) instead of the first."""
    def f(a):
        a = np.array(a, copy=True)
        flat = a.reshape(-1)
        flat[i] = flat[i] ^ np.uint8(0xFF) if a.dtype == np.uint8 else flat[i] + a.dtype.type(1)
        return a
    return f


def flip_all(a: np.ndarray) -> np.ndarray:
    """Every element wrong (+1; uint8: every bit flipped, so packed bits change too)."""
    return a ^ np.uint8(0xFF) if a.dtype == np.uint8 else a + a.dtype.type(1)


def match(*, prefix: str = "", suffix: str = "", contains: str = "", peer: str | None = None):
    """A (peer, tag) predicate."""
    def m(p, tag):
        return tag.startswith(prefix) and tag.endswith(suffix) and contains in tag and (peer is None or p == peer)
    return m


class Corrupt:
    """One corrupt party of an in-process run and the deviations it makes."""

    def __init__(self, party: str) -> None:
        self.party = party
        self.fired = 0
        self.sends: list = []     # (predicate, how, index): rewrite an outgoing array
        self.recvs: list = []     # (predicate, how, index): rewrite an incoming array
        self.replace: list = []   # (predicate, arrays fn): replace an outgoing frame's arrays
        self.crashes: list = []   # (predicate, "send"|"recv"): crash at that frame
        self.silent = False

    # ---- declaring the deviation ----------------------------------------------------------
    def on_send(self, pred, how=flip, index: int = 0) -> "Corrupt":
        self.sends.append((pred, how, index))
        return self

    def on_recv(self, pred, how=flip, index: int = 0) -> "Corrupt":
        self.recvs.append((pred, how, index))
        return self

    def replace_send(self, pred, fn) -> "Corrupt":
        self.replace.append((pred, fn))
        return self

    def crash_at(self, pred, when: str = "send") -> "Corrupt":
        self.crashes.append((pred, when))
        return self

    def keep_abort_silent(self) -> "Corrupt":
        """The corrupt party does not announce its own abort (a corrupt P0 that signals
        selectively and then stops)."""
        self.silent = True
        return self

    def patch(self, monkeypatch, cls, name: str, fn) -> "Corrupt":
        """Replace ``cls.name`` by ``fn(orig, self, *args, **kw)`` on the corrupt party's
        objects (those with ``role == party``); other parties keep the original."""
        orig = getattr(cls, name)
        adv = self

        def wrapped(obj, *args, **kw):
            if getattr(obj, "role", None) == adv.party:
                adv.fired += 1
                return fn(orig, obj, *args, **kw)
            return orig(obj, *args, **kw)
        monkeypatch.setattr(cls, name, wrapped)
        return self

    # ---- applying it ----------------------------------------------------------------------
    def endpoint(self, ep):
        return _CorruptEP(ep, self)

    def wrap(self, role: str, ep):
        """The endpoint party ``role`` runs with: the proxy for the corrupt one."""
        return self.endpoint(ep) if role == self.party else ep


class _CorruptEP:
    def __init__(self, ep, adv: Corrupt) -> None:
        self._ep, self._adv = ep, adv

    def _crash(self, peer, tag, when):
        if any(w == when and p(peer, tag) for p, w in self._adv.crashes):
            self._adv.fired += 1
            raise Crash(f"{self._adv.party} stops at {tag}")

    def send(self, peer, tag, *arrays):
        self._crash(peer, tag, "send")
        arrays = list(arrays)
        for pred, fn in self._adv.replace:
            if pred(peer, tag):
                arrays = list(fn(arrays))
                self._adv.fired += 1
        for pred, how, i in self._adv.sends:
            if pred(peer, tag):
                arrays[i] = how(arrays[i])
                self._adv.fired += 1
        return self._ep.send(peer, tag, *arrays)

    def send_to_all(self, tag, *arrays):
        for p in self._ep.peers:
            self.send(p, tag, *arrays)

    def recv(self, peer, tag, *specs, timeout=None):
        self._crash(peer, tag, "recv")
        got = list(self._ep.recv(peer, tag, *specs, timeout=timeout))
        for pred, how, i in self._adv.recvs:
            if pred(peer, tag):
                got[i] = how(got[i])
                self._adv.fired += 1
        return got

    def recv_one(self, peer, tag, spec, timeout=None):
        return self.recv(peer, tag, spec, timeout=timeout)[0]

    def recv_each(self, requests, timeout=None):
        # one peer after the other through this proxy (the order does not matter to a test)
        for peer, (tag, *specs) in requests.items():
            yield peer, self.recv(peer, tag, *specs, timeout=timeout)

    def recv_first(self, requests, timeout=None):
        # the first peer named, through this proxy (the order does not matter to a test)
        peer, (tag, *specs) = next(iter(requests.items()))
        return peer, self.recv(peer, tag, *specs, timeout=timeout)

    def abort(self, check, suspect=None, detail=""):
        if self._adv.silent:
            return ProtocolAbort(check, suspect, detail)
        return self._ep.abort(check, suspect, detail)

    def require(self, ok, check, suspect=None, detail=""):
        if not ok:
            raise self.abort(check, suspect, detail)

    def __getattr__(self, name):
        return getattr(self._ep, name)

    def __setattr__(self, name, value):
        if name in ("_ep", "_adv"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._ep, name, value)
