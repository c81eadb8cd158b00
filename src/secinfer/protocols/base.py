"""What a protocol is, for the runtime: roles, securities, and one function per party.

A protocol is a ``ProtocolSpec`` registered in ``secinfer.protocols.registry``. The runtime
(one OS process per party, or a LocalHub in tests) calls ``spec.run_party(role, ep, job)``
in every party with that party's ``Endpoint`` and ``PartyJob`` and collects the
``PartyResult``s. Protocol code never reads global state: everything it may use is in
the endpoint and the job.

Conventions every protocol follows (DESIGN.md):
* the model owner's weights reach only the model-owner role; the architecture is public
  and is sent in the ``setup`` phase with ``secinfer.ir`` public bytes when needed;
* only ``input_role`` gets ``output`` (a ring or float array); every other role returns
  ``output=None``;
* work is wrapped in ``with ep.phase("offline")`` / ``ep.phase("online")`` so metering
  and latency split by phase;
* every reveal is preceded by the protocol's check; a failed check calls
  ``raise ep.abort(check, suspect)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from secinfer.arith.fixed import FixedPointConfig
from secinfer.crypto.prg import PRG
from secinfer.errors import ProtocolError

SECURITIES = ("semi-honest", "malicious", "fair")


@dataclass
class PartyJob:
    """Everything one party needs for one inference session."""

    role: str
    security: str
    fixed: FixedPointConfig
    prg: PRG
    model: Any = None              # secinfer.ir Graph, only for the model-owner role
    input: np.ndarray | None = None  # float input batch, only for the input role
    options: dict = field(default_factory=dict)  # protocol-specific, JSON-serialisable


@dataclass
class PartyResult:
    output: np.ndarray | None = None      # decoded float output (input role only)
    output_ring: np.ndarray | None = None  # the same in the ring (input role only)
    info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    """One malicious-security check, declared as data on the protocol's spec.

    ``name`` is the string the protocol passes to ``Endpoint.require`` /
    ``ProtocolAbort.require`` (and that a failure's ``ProtocolAbort.check`` carries);
    ``what`` says in one line what it verifies; ``ref`` cites the paper step
    (e.g. "ASTRA Fig. 8"); ``securities`` are the levels that run it. The conformance
    suite needs, for each declared check, a test marked
    ``@pytest.mark.covers_check(protocol, name)`` that fails when this check alone is
    disabled (tests/conformance/README.md)."""

    name: str
    what: str
    ref: str = ""
    securities: tuple[str, ...] = ("malicious",)


@dataclass(frozen=True)
class ProtocolSpec:
    name: str
    description: str
    roles: tuple[str, ...]
    model_role: str
    input_role: str
    securities: tuple[str, ...]
    default_security: str
    run_party: Callable[[str, Any, PartyJob], PartyResult]
    # check_model(graph, security) raises ProtocolError/UnsupportedOpError when it cannot run it
    check_model: Callable[[Any, str], None]
    default_fixed: str = "fx64f13"
    insecure: bool = False
    paper: str = ""
    demo_rows: int = 0  # held-out rows `secinfer demo` runs (0 = all)
    baseline_for: str = ""  # set on in-repo baselines (e.g. "astra" on aby3): bench only, not demo
    checks: tuple[Check, ...] = ()  # every malicious-security check the protocol runs
    # oracle(graph, x, options) -> float outputs the protocol equals exactly, for protocols
    # whose reference is not the fixed-point executor (safhire: its quantized model)
    oracle: Callable[[Any, Any, dict], Any] | None = None
    # inspect(graph) -> extra lines for `secinfer inspect` (e.g. quantized accuracy)
    inspect: Callable[[Any], list] | None = None
    # option_warnings(options) -> warnings the CLI and the API print for these options
    # (e.g. an insecure analysis mode switched on)
    option_warnings: Callable[[dict], list] | None = None
    # What the input role learns for a model: reveals(graph, security, options) -> "scores"
    # (the model's own output) or "labels" (only the class, e.g. ASTRA's classification
    # reveal, or a secure comparison asked for with options). None: always "scores".
    reveals: Callable[[Any, str, dict], str] | None = None
    # value_limits(graph, cfg, options) -> {"input": max |x|, "values": max |node value|} when
    # the protocol encodes values at more fractional bits than the reference (a smaller
    # range), checked before launch by secinfer.ir.validate; None: the reference's range.
    value_limits: Callable[[Any, FixedPointConfig, dict], dict | None] | None = None
    # printed by the CLI and the Python API whenever the protocol runs (e.g. a cost model
    # whose outputs are not the reference's: probabilistic truncation)
    run_warning: str = ""
    # what the protocol trusts beyond its parties (a trusted dealer, trusted hardware, a
    # demo key): named by the CLI and the Python API at run time and in --json ("trust")
    trust: str = ""
    # Offline material made ahead of a client (serving, docs/runtime.md "Serving"):
    # ``prepare(role, ep, job) -> Prep`` runs the protocol's offline phase among the
    # model-side roles only (``ep`` connects every role but ``input_role``; ``job.input`` is
    # None, ``job.options["prep_rows"]`` the batch the material is for) and returns an opaque
    # ``Prep``; ``run_prepared(role, ep, job, prep)`` then runs one client session on it
    # (the client passes ``prep=None``). ``prep_refusal(security, options)`` says why a
    # configuration cannot be prepared ahead ("" when it can). None: not separable.
    # The protocol checks in-protocol that no sum of products after the first products wraps
    # (STAMP's devices, option ``range_guard``): a served query outside the model owner's range
    # certificate but inside its ``guarded`` regions then runs with the guard on instead of
    # being refused (secinfer.ir.range_cert, docs/runtime.md "Range certificate").
    range_guard: bool = False
    # The protocol adds a product's bias before truncating it (crisp's truncation gate takes
    # acc + b 2^f): the bias counts towards the sum of products' range (range certificate).
    bias_in_sum: bool = False
    prepare: Callable[[str, Any, PartyJob], "Prep"] | None = None
    run_prepared: Callable[[str, Any, PartyJob, Any], PartyResult] | None = None
    prep_refusal: Callable[[str, dict], str] | None = None


class Prep:
    """One party's offline material for one future session, made by ``ProtocolSpec.prepare``.

    Opaque to the runtime: it is stored, handed to exactly one ``run_prepared`` and then
    wiped (``wipe()`` drops every secret it references, so a second use fails loudly).
    ``rows``: the batch size it was made for (a client with another batch is not served
    from it)."""

    rows: int = 0

    def wipe(self) -> None:
        raise NotImplementedError


def by_role(protocol: str, entries: dict[str, Callable[[Any, PartyJob], PartyResult]]
            ) -> Callable[[str, Any, PartyJob], PartyResult]:
    """``run_party`` for a protocol with one entry function per role: calls
    ``entries[role](ep, job)``; a role it does not have is a ``ProtocolError``."""
    def run_party(role: str, ep, job: PartyJob) -> PartyResult:
        entry = entries.get(role)
        if entry is None:
            raise ProtocolError(f"{protocol} has no role {role!r}")
        return entry(ep, job)
    return run_party


def refuse_unpreparable(protocol: str, refusal: Callable[[str, dict], str], job) -> None:
    """A protocol's own guard at the top of ``prepare``: ``refusal(security, options)`` (its
    ``ProtocolSpec.prep_refusal``) says why this job's session cannot be made ahead."""
    why = refusal(job.security, job.options)
    if why:
        raise ProtocolError(f"{protocol} cannot prepare ahead: {why}")


def prep_rows(options: dict) -> int:
    """The batch size (rows) a prepared item is made for: ``options["prep_rows"]``, 1..65536."""
    r = options.get("prep_rows", 1)
    if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= 1 << 16:
        raise ProtocolError(f"option prep_rows must be an integer in 1..65536, got {r!r}")
    return r


def bool_option(options: dict, name: str, default: bool = True) -> bool:
    """``options[name]`` as an on/off switch (``default`` when absent): true or false, anything
    else a ``ProtocolError`` naming the option (the CLI's ``-o name=1`` is an integer: refused)."""
    v = options.get(name, default)
    if not isinstance(v, bool):
        raise ProtocolError(f"option {name} must be true or false, got {v!r}")
    return v
