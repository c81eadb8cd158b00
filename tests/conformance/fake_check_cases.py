"""Adversarial tests of the test-only ``fake-mac`` protocol (fake_check_protocol.py).

Not collected by default (the name does not start with ``test_``): test_mutation_run.py
runs this file alone with ``--mutation-run``. ``test_covering`` asserts the abort and must
fail when ``fake-tag`` is disabled; ``test_not_covering`` runs the same attack but asserts
nothing about the abort, so the mutation run must report it as passing with the check off.
"""

from __future__ import annotations

import numpy as np
import pytest

from secinfer.errors import ProtocolAbort
from secinfer.net.channel import run_local
from secinfer.protocols import registry
from secinfer.protocols.base import PartyJob

registry.register_module("fake-mac", "conformance.fake_check_protocol")
SPEC = registry.get("fake-mac")


class Tamper:
    """Endpoint proxy of a corrupt sender: adds 1 to the value, keeps the tag."""

    def __init__(self, ep) -> None:
        self._ep = ep

    def send(self, peer, tag, x, t):
        return self._ep.send(peer, tag, x + np.uint64(1), t)

    def __getattr__(self, name):
        return getattr(self._ep, name)


def _run(corrupt: bool):
    def party(role):
        def body(ep):
            job = PartyJob(role=role, security="malicious", fixed=None, prg=None, options={"x": [5, 7]})
            return SPEC.run_party(role, Tamper(ep) if corrupt and role == "sender" else ep, job)
        return body
    return run_local({r: party(r) for r in SPEC.roles}, recv_timeout=5)


def test_honest_run_does_not_abort():
    res = _run(corrupt=False)
    assert np.array_equal(res["receiver"].output_ring, [5, 7])


@pytest.mark.covers_check("fake-mac", "fake-tag")
def test_covering():
    res = _run(corrupt=True)
    assert isinstance(res["receiver"], ProtocolAbort) and res["receiver"].check == "fake-tag"


@pytest.mark.covers_check("fake-mac", "fake-tag")
def test_not_covering():
    res = _run(corrupt=True)
    assert set(res) == {"sender", "receiver"}


@pytest.mark.covers_check("fake-mac", "no-such-check")
def test_names_an_undeclared_check():
    res = _run(corrupt=True)
    assert isinstance(res["receiver"], ProtocolAbort)
