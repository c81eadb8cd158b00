"""Fault injection for real party processes, from the test side.

``wrap(name)`` returns a copy of protocol ``name``'s spec, registered under
``fault-<name>``, whose ``run_party`` hands one role an endpoint proxy when the job's
options carry ``{"fault": {"role": ..., "kind": ..., "at_send": n}}``; the option is
removed before the real protocol sees its options. The proxy acts on that role's n-th
send (counting from 0; only sends in ``phase`` if the fault names one):

* ``die``: the process SIGKILLs itself (a crash, no goodbye);
* ``tamper``: it adds 1 to the first element of the message's first array (a malicious
  party deviating; an honest party's check must catch it).

The launcher imports a ``fault_<name>`` module of this folder in every party process
(``run_local(..., protocol_module="conformance.fault_astra")``); the protocol's own code
is unchanged.
"""

from __future__ import annotations

import dataclasses
import os
import signal

import numpy as np

from secinfer.protocols import registry


class FaultyEndpoint:
    def __init__(self, ep, fault: dict) -> None:
        self._ep, self._fault, self._sends = ep, fault, 0

    def send(self, peer, tag, *arrays):
        if self._fault.get("phase") not in (None, self._ep.current_phase):
            return self._ep.send(peer, tag, *arrays)
        n, self._sends = self._sends, self._sends + 1
        if n == int(self._fault.get("at_send", 0)):
            kind = self._fault["kind"]
            if kind == "die":
                os.kill(os.getpid(), signal.SIGKILL)
            elif kind == "tamper":
                a = np.array(arrays[0], copy=True)
                a.reshape(-1)[0] += a.dtype.type(1)
                arrays = (a, *arrays[1:])
            else:
                raise ValueError(f"unknown fault {kind!r}")
        return self._ep.send(peer, tag, *arrays)

    def send_to_all(self, tag, *arrays):
        for p in self._ep.peers:
            self.send(p, tag, *arrays)

    def __getattr__(self, name):
        return getattr(self._ep, name)


def wrap(name: str):
    spec = registry.get(name)

    def run_party(role, ep, job):
        opts = dict(job.options)
        fault = opts.pop("fault", None)
        job = dataclasses.replace(job, options=opts)
        if fault and fault["role"] == role:
            ep = FaultyEndpoint(ep, fault)
        return spec.run_party(role, ep, job)

    return dataclasses.replace(spec, name=f"fault-{name}", run_party=run_party)
