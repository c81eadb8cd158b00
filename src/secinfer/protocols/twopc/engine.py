"""The interface of a two-party protocol's linear engine, which the step loop drives for
every ``lin`` step (``plan.LinearStep``): it carries the client's side of the step to the
server (HE engines: ciphertexts under the client's key), lets the server apply its
``plan.LinearWeights`` and carries the result back. The operands of ``client`` /
``server`` are the protocol's (CRISP: shares and MAC shares). Life cycle:

    setup_client / setup_server      once, setup phase (keys, key proofs)
    prepare_client / prepare_server  offline, input-independent work for every lin step;
                                     returns info for the result
    client / server                  online, once per lin step, in plan order
    release                          always (``finally``): frees native handles

Received messages are validated before use (typed errors); a malicious-security check is
an ``ep.require(ok, name, suspect)`` declared in the protocol's ``ProtocolSpec.checks``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class LinearEngine(Protocol):
    name: str           # as selected by the protocol's option (e.g. "ckks")
    insecure: bool      # True only for test stand-ins; results then say so
    missing: str        # what the engine does not (yet) prove or hide: "" when complete
    timing: dict        # seconds by activity, copied into the result info

    def setup_client(self, ep, prg) -> None: ...

    def setup_server(self, ep, prg) -> None: ...

    def prepare_client(self, steps: list) -> dict: ...

    def prepare_server(self, steps: list, weights: dict, prg) -> dict: ...

    def client(self, ep, idx: int, step, *operands) -> Any: ...

    def server(self, ep, idx: int, step, weights, *operands) -> Any: ...

    def release(self) -> None: ...
