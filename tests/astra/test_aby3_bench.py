"""The ABY3 baseline (correctness, declared costs) and the side-by-side benchmark entry point."""

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from secinfer.arith.fixed import FX64
from secinfer.arith.ring import RING64
from secinfer.crypto.prg import PRG
from secinfer.net.channel import run_local
from secinfer.protocols.aby3.engine import Rep3Engine
from secinfer.protocols.rep3 import linear as mdl
from secinfer.protocols.rep3.keys import setup_keys
from secinfer.protocols.base import PartyJob
from secinfer.protocols.registry import get

SERVERS = ("p0", "p1", "p2")


def _run(protocol, est, x, security, options=None, adversary=None):
    spec = get(protocol)

    def party(role):
        def f(ep):
            if adversary is not None:
                ep = adversary.wrap(role, ep)
            job = PartyJob(role, security, FX64, PRG.for_tests(spec.roles.index(role)),
                           model=est if role == "model_owner" else None,
                           input=x if role == "client" else None, options=options or {})
            return spec.run_party(role, ep, job)
        return f
    return run_local({r: party(r) for r in spec.roles}, recv_timeout=20)


@pytest.mark.parametrize("security", ["semi-honest", "malicious"])
def test_aby3_prediction_matches_sklearn_and_astra(security):
    x, y = load_breast_cancer(return_X_y=True)
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(x[:450], y[:450])
    res = _run("aby3", clf, x[450:], security)
    assert np.array_equal(res["client"].output[:, 0], clf.predict(x[450:]))
    xd, yd = load_diabetes(return_X_y=True)
    reg = LinearRegression().fit(xd[:330], yd[:330])
    a = _run("aby3", reg, xd[330:], security)["client"]
    b = _run("astra", reg, xd[330:], security)["client"]
    lm = mdl.resolve_wfrac(mdl.to_linear(reg), FX64)
    assert np.array_equal(a.output_ring, mdl.oracle(lm, xd[330:], FX64))
    assert np.array_equal(a.output_ring, b.output_ring)      # same oracle, same bits


def _engine_run(security, body):
    def party(role):
        def f(ep):
            with ep.phase("setup"):
                keys = setup_keys(ep, role, PRG.for_tests(SERVERS.index(role)), security != "semi-honest")
            e = Rep3Engine(ep, role, keys, security, 64, prg=PRG.for_tests(7 + SERVERS.index(role)),
                           bucket=2, opened=0)
            return body(e), ep.meter
        return f
    res = run_local({r: party(r) for r in SERVERS}, recv_timeout=20)
    for v in res.values():
        if isinstance(v, BaseException):
            raise v
    return {r: v[0] for r, v in res.items()}, {r: v[1] for r, v in res.items()}


@pytest.mark.parametrize("security,online,offline", [("semi-honest", 3, 0), ("malicious", 9, 12)])
def test_aby3_mul_costs(security, online, offline):
    """ABY3 / [ASTRA Table 1]: 3l online semi-honest; 9l online and 12l offline malicious (B = 2)."""
    n = 128

    def body(e):
        with e.ep.phase("offline"):
            x, y = e.rand((n,), "x"), e.rand((n,), "y")
            if e.malicious:
                e.preprocess(n)
        with e.ep.phase("online"):
            z = e.mul(x, y)
            if e.malicious:
                e.verify()
        with e.ep.phase("setup"):
            return [e.open_all(s, f"o{i}") for i, s in enumerate((x, y, z))]
    res, meters = _engine_run(security, body)
    x, y, z = res["p0"]
    assert np.array_equal(z, RING64.mul(x, y))

    def bits(ph):
        return 8 * sum(c.payload for m in meters.values() for (p, d, _q, t), c in m.counters.items()
                       if p == ph and d == "sent" and not t.endswith("/h") and "zero" not in t
                       and "coin" not in t and not t.startswith("rep3/verify"))
    assert bits("online") == online * 64 * n
    assert bits("offline") == offline * 64 * n


def test_bench_run_reports_ratios():
    from secinfer.bench import astra_bench as bench
    rep = bench.run("wan", d=64, sweep=(64,), micro=False)
    rows = {(r["security"], r["task"]): r for r in rep["prediction"]}
    assert set(rows) == {(s, t) for s in ("semi-honest", "malicious") for t in ("regression", "classification")}
    for r in rows.values():
        assert r["astra"]["correct"] and r["aby3"]["correct"]
        assert r["ratio_online_rounds"] >= 1.0 and r["ratio_online_latency"] > 1.0
    for key in (("semi-honest", "regression"), ("malicious", "regression"), ("malicious", "classification")):
        assert rows[key]["ratio_online_throughput"] > 1.0
    # constant-round comparison: ASTRA's classification needs fewer online rounds than ABY3's
    assert rows[("semi-honest", "classification")]["ratio_online_rounds"] >= 2.0
    assert rep["sweep"] and rows[("malicious", "regression")]["restricted"]["ratio"] > 1.0
