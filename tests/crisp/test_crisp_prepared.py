"""CRISP's dealer output made ahead of the client (``ProtocolSpec.prepare`` / ``run_prepared``,
serving), in-process: the server and the dealer make it with no client; one client session
runs on it and equals the fixed-point oracle; the item is spent by that session and wiped
(a second session on it fails at once); two items share no mask, no MAC key and no key."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from secinfer.arith.fixed import FX64
from secinfer.crypto.prg import PRG
from secinfer.errors import PreprocessingReuseError, ProtocolError
from secinfer.ir import bundled
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model
from secinfer.net.channel import run_local
from secinfer.protocols.base import PartyJob
from secinfer.protocols.crisp.protocol import SPEC

sys.path.insert(0, os.path.dirname(__file__))

MODEL_SIDE = ("server", "dealer")
NAME = "digits-mlp"


def _job(role, security, graph, x, seed, rows=1):
    return PartyJob(role=role, security=security, fixed=FX64, prg=PRG.for_tests(seed, role),
                    model=graph if role == "server" else None, input=x if role == "client" else None,
                    options={"linear": "plain-insecure", "prep_rows": rows})


def prepare_both(graph, security, seed, rows=1):
    res = run_local({r: (lambda r: lambda ep: SPEC.prepare(r, ep, _job(r, security, graph, None, seed, rows)))(r)
                     for r in MODEL_SIDE}, timeout=120)
    for r, v in res.items():
        assert not isinstance(v, BaseException), (r, v)
    return res


def run_on(preps, graph, x, security, seed, record=None):
    def party(role):
        def f(ep):
            if record is not None and role == "client":
                real = ep.recv

                def recv(peer, tag, *specs, **kw):
                    got = real(peer, tag, *specs, **kw)
                    record.append((peer, tag, [np.array(a, copy=True) for a in got]))
                    return got
                ep.recv = recv
            return SPEC.run_prepared(role, ep, _job(role, security, graph, x, seed), preps.get(role))
        return f
    return run_local({r: party(r) for r in SPEC.roles}, timeout=120)


@pytest.mark.parametrize("security", ["malicious", "semi-honest"])
def test_prepared_session_equals_the_oracle_and_spends_the_item(security):
    g = load_model(bundled.bundled_path(NAME))
    X, _ = bundled.bundled_testset(NAME)
    x = X[3:4]
    preps = prepare_both(g, security, seed=1)
    server_store, held = preps["server"]._store, preps["dealer"]._held
    assert server_store.labels() and len(held) > 0   # made ahead, held by both
    res = run_on(preps, g, x, security, seed=2)
    for r, v in res.items():
        assert not isinstance(v, BaseException), (r, v)
    np.testing.assert_array_equal(res["client"].output_ring, run_fixed(g, x, FX64))
    assert res["dealer"].info.get("prepared")
    # spent: both parties' material is gone (the server's store consumed to the last item)
    assert all(p.used() for p in preps.values())
    assert server_store.labels() == [] and len(held) == 0
    again = run_on(preps, g, x, security, seed=3)
    assert isinstance(again["server"], ProtocolError) and isinstance(again["dealer"], ProtocolError)
    assert isinstance(again["client"], BaseException)


def test_a_held_client_half_is_sent_once():
    g = load_model(bundled.bundled_path(NAME))
    held = prepare_both(g, "malicious", seed=4)["dealer"].take_held()

    class Sink:
        def __init__(self):
            self.sent = []

        def send(self, peer, tag, *arrays):
            self.sent.append(tag)
    s = Sink()
    held.send(s)
    assert s.sent[0] == "crisp/in-mask" and len(s.sent) > 1 and len(held) == 0
    with pytest.raises(PreprocessingReuseError):
        held.send(Sink())


def test_two_items_share_no_mask_key_or_mac_key():
    """Same input, two sessions, each on its own item: every array the client receives
    outside the public set-up (its input mask, its MAC-key shares, its FSS keys, the
    server's masked messages) differs between them, and the server's MAC keys differ."""
    g = load_model(bundled.bundled_path(NAME))
    X, _ = bundled.bundled_testset(NAME)
    x = X[5:6]
    a, b = prepare_both(g, "malicious", seed=5), prepare_both(g, "malicious", seed=6)
    mu_a, mu_b = (p["server"]._store._base._items["mu"][1]["mu"] for p in (a, b))   # a look, not a take
    assert not np.array_equal(mu_a, mu_b)
    ra, rb = [], []
    out_a = run_on(a, g, x, "malicious", seed=7, record=ra)
    out_b = run_on(b, g, x, "malicious", seed=7, record=rb)   # even with the same session seed
    for res in (out_a, out_b):
        for r, v in res.items():
            assert not isinstance(v, BaseException), (r, v)
    assert np.array_equal(out_a["client"].output_ring, out_b["client"].output_ring)
    assert [t for _, t, _ in ra] == [t for _, t, _ in rb]
    compared, tags = 0, set()
    for (peer, tag, ua), (_, _, ub) in zip(ra, rb):
        # the dealer's messages are the item itself; the server's linear layers are masked by
        # the session's own randomness (the same seed here, fresh per session when served)
        if peer != "dealer" and not tag.startswith("crisp/g/"):
            continue
        for u, v in zip(ua, ub):
            if u.size > 1:
                compared += 1
                tags.add(tag.split("/")[1])
                assert not np.array_equal(u, v), f"{peer} {tag}: repeats across two prepared items"
    assert compared > 5 and {"in-mask", "key", "g"} <= tags, tags


def test_a_batch_other_than_the_items_is_refused():
    g = load_model(bundled.bundled_path(NAME))
    X, _ = bundled.bundled_testset(NAME)
    preps = prepare_both(g, "semi-honest", seed=8)         # made for 1 row
    res = run_on(preps, g, X[:2], "semi-honest", seed=9)   # asked for 2
    assert isinstance(res["server"], ProtocolError) and "plan" in str(res["server"])
    assert all(p.used() for p in preps.values())            # wiped all the same: never handed out again


def test_material_from_files_is_not_prepared_ahead():
    assert SPEC.prep_refusal("malicious", {"preprocessing_dir": "/x"})
    assert SPEC.prep_refusal("malicious", {}) == "" and SPEC.prep_refusal("semi-honest", {}) == ""
    with pytest.raises(ProtocolError):
        SPEC.prepare("client", None, _job("client", "malicious", None, None, 1))
