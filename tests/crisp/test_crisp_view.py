"""The client's view of an honest run is uniform shares: no intermediate activation
reaches it (the property that defeats the model-extraction attack of [CRISP III-A])."""

from __future__ import annotations

import os
import sys

import numpy as np

from secinfer.arith.fixed import FX64
from secinfer.crypto.prg import PRG
from secinfer.ir import bundled
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model
from secinfer.net.channel import run_local
from secinfer.protocols.base import PartyJob
from secinfer.protocols.crisp.protocol import SPEC

sys.path.insert(0, os.path.dirname(__file__))

MLP = load_model(bundled.bundled_path("digits-mlp"))
X, _ = bundled.bundled_testset("digits-mlp")


def _client_view(x, seed):
    seen = []

    def mk(role):
        job = PartyJob(role=role, security="malicious", fixed=FX64, prg=PRG.for_tests(seed, role),
                       model=MLP if role == "server" else None, input=x if role == "client" else None,
                       options={"linear": "plain-insecure"})

        def fn(ep):
            if role == "client":
                orig = ep.recv

                def rec(peer, tag, *specs, **kw):
                    arrays = orig(peer, tag, *specs, **kw)
                    seen.append((peer, tag, [a.copy() for a in arrays]))
                    return arrays
                ep.recv = rec
            return SPEC.run_party(role, ep, job)
        return fn

    res = run_local({r: mk(r) for r in SPEC.roles})
    assert not isinstance(res["client"], BaseException), res["client"]
    return seen, res["client"]


def _online_words(seen):
    """Every ring word the client receives from the server online, except the final output share."""
    words = []
    for peer, tag, arrays in seen:
        if peer != "server" or not tag.startswith(("crisp/lin/", "crisp/g/")):
            continue
        for a in arrays:
            if a.dtype == np.uint64 and a.ndim == 2:
                words.append(a[:, 0])          # low limb: the n = 64 bits that carry the value
            else:
                words.append(a.astype(np.uint64).reshape(-1))
    return np.concatenate(words)


def test_client_view_is_uniform_and_holds_no_activation():
    x = X[:8]
    seen, res = _client_view(x, 3)
    words = _online_words(seen)
    assert words.size > 1000
    bits = ((words[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)).astype(np.float64)
    freq = bits.mean(axis=0)
    tol = 5 * 0.5 / np.sqrt(words.size)
    assert np.all(np.abs(freq - 0.5) < tol), freq
    # No intermediate activation of the oracle appears among the received words.
    trace: dict = {}
    run_fixed(MLP, x, FX64, trace=trace)
    acts = np.concatenate([np.asarray(v, np.uint64).reshape(-1) for k, v in trace.items()
                           if k in ("z", "fc0", "relu0")])
    acts = acts[acts > 1 << 20]                     # ignore tiny values (zeros of ReLU etc.)
    assert not np.isin(acts, words).any()


def test_client_views_for_different_inputs_have_the_same_distribution():
    w1 = _online_words(_client_view(X[:8], 4)[0])
    w2 = _online_words(_client_view(-X[8:16] * 0.5, 5)[0])
    assert w1.size == w2.size
    # two-sample comparison of the top byte histograms (chi-square-like bound)
    h1 = np.bincount((w1 >> np.uint64(56)).astype(np.int64), minlength=256)
    h2 = np.bincount((w2 >> np.uint64(56)).astype(np.int64), minlength=256)
    chi = np.sum((h1 - h2) ** 2 / np.maximum(h1 + h2, 1))
    assert chi < 256 + 6 * np.sqrt(2 * 256), chi


def test_relu_layer_meters_n_bits_per_element_per_party_in_one_round():
    """[CRISP III-B]: a ReLU layer of c elements costs one round and c n-bit ring elements
    from each party, with the MACs (the MAC twin rides on the same opening)."""
    x = X[:4]
    meters = {}

    def mk(role):
        job = PartyJob(role=role, security="malicious", fixed=FX64, prg=PRG.for_tests(9, role),
                       model=MLP if role == "server" else None, input=x if role == "client" else None,
                       options={"linear": "plain-insecure"})

        def fn(ep):
            meters[role] = ep.meter
            return SPEC.run_party(role, ep, job)
        return fn

    res = run_local({r: mk(r) for r in SPEC.roles})
    assert not isinstance(res["client"], BaseException)
    count = 4 * 32                        # digits-mlp hidden layer: 32 ReLUs per row
    for role, peer in (("server", "client"), ("client", "server")):
        m = meters[role]
        assert m.total("online", "sent", peer, tag_prefix="crisp/g/3/") == count * 8      # n = 64 bits
        assert m.messages("online", "sent", tag_prefix="crisp/g/3/") == 1
