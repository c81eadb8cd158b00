"""What a linear engine of a two-party protocol provides: the interface the protocol's
step loop drives for every ``lin`` step of the plan (``twopc.plan.LinearStep``).

An engine carries the client's side of one linear step to the server (for HE engines:
ciphertexts under the client's key), lets the server apply its weights, and carries the
result back. What flows in and out (shares with MACs in CRISP, plaintext activations
encrypted by the client in an HE-hybrid protocol) is the protocol's: ``client`` and
``server`` take and return the protocol's operands. The life cycle is fixed:

    setup_client / setup_server      once per session, setup phase (keys, key proofs)
    prepare_client / prepare_server  offline phase, input-independent work for every
                                     ``lin`` step of the plan (masks, encoded weights,
                                     proof commitments); returns info for the result
    client / server                  online, once per ``lin`` step, in plan order
    release                          always (``finally``): frees native handles

Every message an engine receives is validated before use (typed errors); a
malicious-security check inside an engine is an ``ep.require(ok, name, suspect)`` whose
name the protocol declares in its ``ProtocolSpec.checks``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class LinearEngine(Protocol):
    name: str           # as selected by the protocol's option (e.g. "ckks")
    insecure: bool      # True only for test stand-ins; results then say so
    missing: str        # what the engine does not (yet) prove/hide: "" when complete
    timing: dict        # seconds by activity, copied into the result info

    def setup_client(self, ep, prg) -> None: ...

    def setup_server(self, ep, prg) -> None: ...

    def prepare_client(self, steps: list) -> dict: ...

    def prepare_server(self, steps: list, weights: dict, prg) -> dict: ...

    def client(self, ep, idx: int, step, *operands) -> Any: ...

    def server(self, ep, idx: int, step, weights, *operands) -> Any: ...

    def release(self) -> None: ...
