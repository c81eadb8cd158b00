"""The protocol-level offline hook (``ProtocolSpec.prepare`` / ``run_prepared``), in-process:
astra's servers and model owner run the offline phase with no client, then one client
session runs on that material; the material is used once; a server that hands the client
a wrong query mask is caught (check "prep-mask")."""

from __future__ import annotations

import numpy as np
import pytest

from adversary import Corrupt, flip, match
from secinfer.arith.fixed import FX64
from secinfer.crypto.prg import PRG
from secinfer.errors import ProtocolAbort, ProtocolError
from secinfer.ir.bundled import bundled_path
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model
from secinfer.net.channel import run_local
from secinfer.protocols.astra.protocol import SPEC
from secinfer.protocols.base import PartyJob

MODEL_SIDE = ("p0", "p1", "p2", "model_owner")


def _job(role, security, model, x, options, seed):
    return PartyJob(role, security, FX64, PRG.for_tests(seed * 10 + SPEC.roles.index(role)),
                    model=model if role == "model_owner" else None, input=x if role == "client" else None,
                    options=dict(options or {}))


def prepare_all(model, security, options=None, seed=0):
    res = run_local({r: (lambda r: lambda ep: SPEC.prepare(r, ep, _job(r, security, model, None, options, seed)))(r)
                     for r in MODEL_SIDE}, recv_timeout=20)
    for r, v in res.items():
        if isinstance(v, BaseException):
            raise v
    return res


def run_on(preps, model, x, security, options=None, seed=1, adversary=None):
    def party(role):
        def f(ep):
            if adversary is not None:
                ep = adversary.wrap(role, ep)
            return SPEC.run_prepared(role, ep, _job(role, security, model, x, options, seed), preps.get(role))
        return f
    return run_local({r: party(r) for r in SPEC.roles}, recv_timeout=20)


def _model(name):
    return load_model(str(bundled_path(name)))


@pytest.mark.parametrize("security", ["semi-honest", "malicious"])
@pytest.mark.parametrize("name,reveal", [("diabetes-linreg", "direct"), ("diabetes-linreg", "paper"),
                                         ("cancer-logreg", "direct")])
def test_prepared_session_matches_the_reference(security, name, reveal):
    model = _model(name)
    k = model.inputs[0].shape[-1] if hasattr(model.inputs[0], "shape") else None
    x = np.linspace(-0.5, 0.5, k or 10).reshape(1, -1) * (0.1 if name.startswith("diabetes") else 1.0)
    opts = {"reveal": reveal}
    preps = prepare_all(model, security, opts)
    res = run_on(preps, model, x, security, opts)
    for r, v in res.items():
        assert not isinstance(v, BaseException), (r, v)
    assert all(res[r].info.get("prepared") for r in ("p0", "p1", "p2"))
    want = FX64.decode(run_fixed(model, x, FX64))
    out = res["client"].output
    if name.endswith("logreg"):   # a class label: the one the unprepared run gives
        plain = run_local({r: (lambda r: lambda ep: SPEC.run_party(r, ep, _job(r, security, model, x, opts, 5)))(r)
                           for r in SPEC.roles}, recv_timeout=20)
        assert np.array_equal(out, plain["client"].output), (out, plain["client"].output)
    else:
        assert np.allclose(out, want, rtol=1e-3, atol=1e-2), (out, want)
    # used once: every prepared item is wiped, and a second session on it fails at once
    assert all(p.state is None and p.hdr is None for p in preps.values())
    again = run_on(preps, model, x, security, opts)
    assert isinstance(again["p0"], ProtocolError)


def test_two_prepared_items_differ_and_a_batch_mismatch_is_refused():
    model = _model("diabetes-linreg")
    a, b = prepare_all(model, "semi-honest", seed=0), prepare_all(model, "semi-honest", seed=3)
    la, lb = a["p0"].state["X"].l1, b["p0"].state["X"].l1
    assert not np.array_equal(la, lb)                 # fresh query masks per item
    assert not np.array_equal(a["p1"].state["W"].m, b["p1"].state["W"].m)   # fresh model shares
    res = run_on(a, model, np.zeros((2, 10)), "semi-honest")   # made for 1 row, asked for 2
    assert isinstance(res["p0"], ProtocolError) and "batch size 2" in str(res["p0"])


def test_fair_and_repeated_queries_are_not_prepared():
    assert "fair" in SPEC.prep_refusal("fair", {})
    assert SPEC.prep_refusal("malicious", {"queries": 3})
    assert SPEC.prep_refusal("malicious", {}) == ""
    with pytest.raises(ProtocolError):
        prepare_all(_model("diabetes-linreg"), "fair")


@pytest.mark.covers_check("astra", "prep-mask")
@pytest.mark.parametrize("party,index", [("p0", 0), ("p0", 1), ("p1", 0), ("p2", 0)])
def test_a_wrong_prepared_query_mask_aborts(party, index):
    """A corrupt server hands the client a wrong lambda_x component (P0) or a wrong hash of
    it (P1, P2): the client aborts before it sends its query, nobody gets output."""
    model = _model("diabetes-linreg")
    preps = prepare_all(model, "malicious")
    adv = Corrupt(party).on_send(match(prefix="astra/prep/lam", peer="client"), flip, index)
    res = run_on(preps, model, np.full((1, 10), 0.01), "malicious", adversary=adv)
    assert adv.fired
    assert isinstance(res["client"], ProtocolAbort) and res["client"].check == "prep-mask", res["client"]
    for r in ("p0", "p1", "p2", "model_owner"):
        if r != party:
            assert isinstance(res[r], ProtocolAbort), (r, res[r])


def _reachable(root, limit=200000):
    import gc
    import types

    seen, todo, out = {id(root)}, [root], []
    while todo and len(seen) < limit:
        o = todo.pop()
        out.append(o)
        for r in gc.get_referents(o):
            if id(r) not in seen and not isinstance(r, (type, types.ModuleType, types.FunctionType)):
                seen.add(id(r))
                todo.append(r)
    return out


def test_a_prepared_item_keeps_nothing_of_its_prep_session():
    """A stored item holds its material only: not the prep session's endpoint (whose
    transport may hold an error with a traceback of that session's frames), job or PRG."""
    from secinfer.net.channel import Endpoint

    preps = prepare_all(_model("diabetes-linreg"), "malicious")
    for role, item in preps.items():
        kinds = {type(o).__name__ for o in _reachable(item) if isinstance(o, (Endpoint, PartyJob))}
        assert not kinds, (role, kinds)
