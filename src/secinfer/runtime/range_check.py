"""The input party's range check against the model owner's certificate, shared by serving
(``serve_client.ServeClient.check_range``) and ``secinfer party`` (``party_exchange``).

No party of a multi-party session holds both the model and the query, so the exact
pre-launch check of ``secinfer run`` (``secinfer.ir.validate.check_run``) cannot run. The
model owner instead publishes a range certificate (``secinfer.ir.range_cert.certify``: the
same function and options as ``secinfer serve``, with the protocol's ``value_limits``,
``bias_in_sum`` and ``range_guard``), and the input party checks its query against it
locally (``check_against``) before it shares anything.

In ``secinfer party`` this is one runtime step after the mesh connects and before the
protocol's first message (``party_exchange``), over the same authenticated endpoint:

    model owner -> input party:   __range_cert__     the certificate (JSON)
    input party -> every peer:    __range_verdict__  "run" | "guarded" | "refused"

"run": inside the certificate, or outside with ``--allow-out-of-range`` (the peers cannot
tell which: as in serving, an accepted query looks like any other). "guarded": outside the
certificate but inside its guarded regions (STAMP): every party
switches the protocol's ``range_guard`` option on for this session. "refused": the input
party raises ``FixedPointRangeError`` (naming sample, feature, value and bound: locally
only, the verdict carries no value of the query) and every other party raises
``QueryRefusedError`` at once. The two frames are not protocol traffic: they are removed
from the endpoint's meter afterwards (a protocol's metered cost is unchanged).

A session started by the local launcher skips the step (``secinfer run`` already ran the
exact check on model and query together, which is tighter than the certificate).
"""

from __future__ import annotations

import json
import warnings

import numpy as np

from secinfer.errors import ConfigError, FixedPointRangeError, ProtocolError, QueryRefusedError

CERT_TAG = "__range_cert__"
VERDICT_TAG = "__range_verdict__"
VERDICTS = ("run", "guarded", "refused")      # what the peers hear
_MAX_CERT_BYTES = 1 << 22


class RangeWarning(UserWarning):
    """A query outside the model owner's range certificate was sent anyway
    (``allow_out_of_range``): the answer may be wrong."""


def owner_certificate(spec, model, cfg, options: dict | None) -> dict:
    """The model owner's public certificate for ``model`` under ``spec`` (as ``secinfer serve``
    computes it at start)."""
    from secinfer.ir.range_cert import certify

    opts = dict(options or {})
    limits = spec.value_limits(model, cfg, opts) if spec.value_limits else None
    return certify(model, cfg, limits, guard=spec.range_guard, bias_in_sum=spec.bias_in_sum).to_json()


def check_against(cert, x, allow_out_of_range: bool = False, *, refused_where: str = "before any session was opened",
                  override: str = "allow_out_of_range=True / `secinfer query --allow-out-of-range`",
                  stacklevel: int = 3) -> str:
    """Check query ``x`` against ``cert`` (``RangeCertificate``): "certified"; "guarded"
    (outside, but inside the regions in which the protocol's in-protocol range guard covers
    the rest); "overridden" (``allow_out_of_range``: a ``RangeWarning``); else
    FixedPointRangeError naming sample, feature, value and bound. A NaN or infinite value is
    refused always."""
    x = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        bad = tuple(int(i) for i in np.argwhere(~np.isfinite(x))[0])
        raise FixedPointRangeError(f"the query holds NaN or infinity (first at index {bad}); refused")
    v = cert.violation(x)
    if v is None:
        return "certified"
    if cert.guarded is not None and cert.violation(x, guarded=True) is None:
        return "guarded"
    msg = cert.describe_violation(v)
    if cert.guarded is not None:
        gv = cert.violation(x, guarded=True)
        msg += f"; it is also outside the regions the protocol's range guard covers (|x| <= {gv['bound']:.6g})"
    if not allow_out_of_range:
        raise FixedPointRangeError(f"{msg}; refused {refused_where} ({override} sends it anyway, and the answer "
                                   f"may then be WRONG)")
    warnings.warn(f"sending a query outside the range certificate: the answer may be WRONG: {msg}",
                  RangeWarning, stacklevel=stacklevel)
    return "overridden"


def _send_json(ep, peer: str, tag: str, obj) -> None:
    ep.send(peer, tag, np.frombuffer(json.dumps(obj, sort_keys=True).encode(), dtype=np.uint8))


def _recv_json(ep, peer: str, tag: str, what: str):
    from secinfer.spec import ArraySpec

    (arr,) = ep.recv(peer, tag, ArraySpec(np.uint8, (None,), max_elems=_MAX_CERT_BYTES))
    try:
        return json.loads(bytes(arr).decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise ConfigError(f"party {peer}'s {what} is not valid JSON ({e})") from None


def _unmeter(ep, depth0: int) -> None:
    """The exchange is the runtime's, not the protocol's: drop it from the meter."""
    for key in [k for k in ep.meter.counters if k[3] in (CERT_TAG, VERDICT_TAG)]:
        del ep.meter.counters[key]
    ep.meter.depth[ep.current_phase] = depth0


def party_exchange(ep, spec, role: str, ids: dict, *, x=None, cert: dict | None = None,
                   allow_out_of_range: bool = False) -> str:
    """The session-start range check of ``secinfer party`` (module docstring); every party
    calls it after connecting and before ``spec.run_party``. The model owner passes its
    ``cert`` (``owner_certificate``, computed before connecting), the input party its query
    ``x``; ``ids``: role -> party id (the cluster file's). Returns the verdict (the input
    party: "certified", "guarded" or "overridden"; the others: "run" or "guarded");
    "guarded" means: run with option ``range_guard`` on; "none": the protocol has no model-owner party
    (nothing to certify). Raises FixedPointRangeError (the input party, refusing) or
    QueryRefusedError (every other party, when the input party refused)."""
    from secinfer.ir.range_cert import RangeCertificate

    if spec.model_role not in spec.roles or spec.input_role not in spec.roles:
        return "none"
    depth0 = ep.meter.depth[ep.current_phase]
    owner, client = ids[spec.model_role], ids[spec.input_role]
    if role == spec.model_role:
        if cert is None:
            raise ConfigError("the model owner has no range certificate to send")
        _send_json(ep, client, CERT_TAG, cert)
    if role == spec.input_role:
        raw = _recv_json(ep, owner, CERT_TAG, "range certificate")
        certificate = RangeCertificate.from_json(raw)
        try:
            verdict = check_against(certificate, x, allow_out_of_range, stacklevel=4,
                                    refused_where="before anything was shared",
                                    override="`secinfer party --allow-out-of-range` on the input party")
        except FixedPointRangeError:
            for p in ep.peers:   # only "refused": no value of the query leaves this party
                _send_json(ep, p, VERDICT_TAG, {"verdict": "refused"})
            _unmeter(ep, depth0)
            raise
        if verdict == "guarded" and not spec.range_guard:
            raise ProtocolError(f"{spec.name} has no in-protocol range guard")
        told = "guarded" if verdict == "guarded" else "run"
        for p in ep.peers:
            _send_json(ep, p, VERDICT_TAG, {"verdict": told})
    else:
        msg = _recv_json(ep, client, VERDICT_TAG, "range verdict")
        verdict = msg.get("verdict") if isinstance(msg, dict) else None
        if verdict not in VERDICTS:
            raise ConfigError(f"party {client} sent an unknown range verdict {str(verdict)[:40]!r}")
        if verdict == "refused":
            _unmeter(ep, depth0)
            raise QueryRefusedError(
                f"the input party ({client}) refused its query as outside the model owner's range certificate "
                f"(the protocol could wrap and return a wrong answer); nothing was shared, the session ends here")
        if verdict == "guarded" and not spec.range_guard:
            raise ProtocolError(f"party {client} asked for a range guard; {spec.name} has none")
    _unmeter(ep, depth0)
    return verdict
