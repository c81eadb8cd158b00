"""A tiny test-only protocol with one malicious-security check, for the mutation plugin's
self-test (test_mutation_run.py). Registered as ``fake-mac`` only by fake_check_cases.py.

The sender sends x and t = k * x (mod 2^64) for a key k both parties hold; the receiver
requires t == k * x (check ``fake-tag``) before it outputs x.
"""

from __future__ import annotations

import numpy as np

from secinfer.net.channel import ArraySpec
from secinfer.protocols.base import Check, PartyResult, ProtocolSpec

ROLES = ("sender", "receiver")
KEY = np.uint64(0x9E3779B97F4A7C15)
WORDS = ArraySpec(np.uint64, (None,))


def run_party(role: str, ep, job) -> PartyResult:
    with ep.phase("online"):
        if role == "sender":
            x = np.asarray(job.options["x"], dtype=np.uint64)
            ep.send("receiver", "fake/x", x, x * KEY)
            return PartyResult()
        x, t = ep.recv("sender", "fake/x", WORDS, WORDS)
        ep.require(np.array_equal(t, x * KEY), "fake-tag", "sender", "tag does not match")
        return PartyResult(output=x.astype(np.float64), output_ring=x)


def check_model(graph, security: str) -> None:
    return None


SPEC = ProtocolSpec(
    name="fake-mac", description="test-only: one tagged message", roles=ROLES, model_role="sender",
    input_role="receiver", securities=("malicious",), default_security="malicious", run_party=run_party,
    check_model=check_model, insecure=True, paper="none",
    checks=(Check("fake-tag", "the message's tag is k times its value", "none"),),
)
