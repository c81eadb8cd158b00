"""The bounded use-once pool of per-session material."""

from __future__ import annotations

import itertools

import pytest

from secinfer.errors import ConfigError
from secinfer.runtime.pool import MaterialPool, make_session_seed


def test_pool_is_bounded_and_spends_each_item_once():
    counter = itertools.count()
    pool = MaterialPool(lambda: [next(counter)], capacity=3)
    try:
        assert pool.wait_full(10)
        assert len(pool) == 3 and pool.produced == 3          # never more than the bound
        first = pool.take()
        assert first == [0] and all(it is not first for it in pool._items)   # gone from the pool
        got = [pool.take()[0] for _ in range(10)]
        assert len(set(got + first)) == 11                   # no item handed out twice
        assert pool.stats()["taken"] == 11
        assert pool.wait_full(10) and len(pool) == 3
    finally:
        pool.close()
    assert len(pool) == 0


def test_empty_pool_makes_on_demand_and_seeds_are_fresh():
    pool = MaterialPool(make_session_seed, capacity=0)
    a, b = pool.take(), pool.take()
    assert pool.stats()["made_on_demand"] == 2 and a.seed != b.seed and len(a.seed) == 16
    a.wipe()
    assert a.seed == b""
    with pytest.raises(ConfigError):
        MaterialPool(make_session_seed, capacity=-1)


def test_api_query_is_the_runtime_query(servers):
    import numpy as np

    from secinfer import api

    s = servers("reference", "bundled:diabetes-linreg")
    r = api.query(s.cluster, np.zeros((1, 10)), s.client, protocol="reference")
    assert r.output.shape == (1, 1) and len(r.session_id) == 32


def test_serve_refuses_bad_configuration_at_start(tmp_path):
    from secinfer.errors import ConfigError
    from secinfer.runtime.cluster import write_loopback_cluster
    from secinfer.runtime.serve import Server

    c = write_loopback_cluster(tmp_path / "c", ["server", "client"])
    with pytest.raises(ConfigError, match="input role"):
        Server(c, "client", "reference")
    with pytest.raises(ConfigError, match="needs --model"):
        Server(c, "server", "reference")
    with pytest.raises(ConfigError, match="offers"):
        Server(c, "server", "reference", "malicious", "unused.onnx")
    # issue 22 item 3: a model with a NaN or an unrepresentable weight is refused at start
    import onnx
    from onnx import numpy_helper

    from secinfer.errors import SecinferError
    from secinfer.ir.bundled import bundled_path

    for value, why in ((float("nan"), "NaN or infinity"), (1e30, "outside fx64f13.s range")):
        m = onnx.load(str(bundled_path("diabetes-linreg")))
        init = next(t for t in m.graph.initializer if t.name == "W")
        w = numpy_helper.to_array(init).copy()
        w.reshape(-1)[0] = value
        init.CopyFrom(numpy_helper.from_array(w, init.name))
        onnx.save(m, str(tmp_path / "bad.onnx"))
        with pytest.raises(SecinferError, match=why):
            Server(c, "server", "reference", None, str(tmp_path / "bad.onnx"))


# ---- prepared offline material (ProtocolSpec.prepare) in `secinfer serve` ------------------------

def _x():
    import numpy as np

    return np.linspace(-0.01, 0.01, 10).reshape(1, 10)   # inside the range certificate (tests/serve/test_range.py)


def test_prepared_items_are_made_ahead_spent_once_and_refilled(servers):
    """astra with --pool 2: the model-side parties run the offline phase with no client; a
    session takes one item (all parties the same id), which is then gone from every
    server; the next session gets another; the pool refills and never exceeds its bound."""
    from secinfer.runtime.serve import query

    s = servers("astra", "bundled:diabetes-linreg", ("--pool", "2"))
    st = s.wait_prep(2)
    leader = [pid for pid, v in st.items() if v["prep"]["leader"] == pid]
    assert leader == ["p0"] and all(v["prep"]["enabled"] for v in st.values())
    before = {pid: set(v["prep"]["ids"]) for pid, v in st.items()}
    assert all(ids == before["p0"] for ids in before.values())      # the same items everywhere
    r1 = query(s.cluster, _x(), s.client)
    assert r1.info["prep"] in before["p0"]
    r2 = query(s.cluster, _x(), s.client)
    assert r2.info["prep"] and r2.info["prep"] != r1.info["prep"]
    st = s.wait_settled()
    for pid, v in st.items():
        assert r1.info["prep"] not in v["prep"]["ids"] and r2.info["prep"] not in v["prep"]["ids"]
        assert v["prep"]["available"] <= v["prep"]["capacity"]
    assert st["p0"]["prep"]["hits"] == 2 and st["p0"]["prep"]["capacity"] == 2
    assert all(st[p]["prep"]["hits"] == 2 for p in ("p1", "p2", "model_owner"))
    st = s.wait_prep(2)                                             # refilled in the background
    assert st["p0"]["prep"]["made"] >= 4 and st["p0"]["prep"]["available"] == 2
    # a batch the items were not made for: served with the in-session offline phase (a miss)
    import numpy as np
    r3 = query(s.cluster, np.zeros((3, 10)), s.client)
    assert r3.info["prep"] is None and r3.output.shape == (3, 1)
    assert s.status("p0")["prep"]["misses"] == 1


def test_a_prepared_item_cannot_be_taken_twice(servers):
    """Two sessions opened at once; a client that names the first session's item in the
    second session's go is refused by every server (the leader reserved another one for it;
    the others hold the first item no more)."""
    import os

    import zmq

    from secinfer.runtime.cluster import load_cluster
    from secinfer.runtime.serve import NONCE_BYTES, ServeError, _control_socket, _request

    s = servers("astra", "bundled:diabetes-linreg", ("--pool", "2"))
    s.wait_prep(2)
    c = load_cluster(s.cluster)
    ident = c.load_secret(s.client)
    ctx = zmq.Context()
    socks = {pid: _control_socket(ctx, ident, c.party(pid).public_key, c.party(pid).connect_url()) for pid in s.ids}
    try:
        def open_all():
            nonce = os.urandom(NONCE_BYTES).hex()
            reps = {pid: _request(sk, {"op": "open", "nonce": nonce, "rows": 1}, 5, pid) for pid, sk in socks.items()}
            go = {"op": "go", "nonce": nonce, "ports": {pid: r["port"] for pid, r in reps.items()} | {s.client: 20001},
                  "contribs": {pid: r["contrib"] for pid, r in reps.items()}}
            return go, reps["p0"]["prep"]
        go_a, prep_a = open_all()
        go_b, prep_b = open_all()
        assert prep_a and prep_b and prep_a != prep_b          # the leader reserved one item each
        assert _request(socks["p1"], dict(go_a, prep=prep_a), 5, "p1")["ok"]   # p1 spends item A
        with pytest.raises(ServeError, match="used already"):   # ... so session B cannot have it
            _request(socks["p1"], dict(go_b, prep=prep_a), 5, "p1")
        with pytest.raises(ServeError, match="reserved"):      # nor can the leader be talked into it
            _request(socks["p0"], dict(go_b, prep=prep_a), 5, "p0")
        with pytest.raises(ServeError, match="not open to the prep leader|unknown control"):
            _request(socks["p1"], {"op": "prep-open", "id": os.urandom(16).hex()}, 5, "p1")
        assert prep_a not in s.status("p1")["prep"]["ids"]
    finally:
        for sk in socks.values():
            sk.close(0)
        ctx.term()
    from secinfer.runtime.serve import query

    assert query(s.cluster, _x(), s.client).output.shape == (1, 1)   # the server goes on


def test_prep_store_bounded_take_once_and_wiped():
    import threading

    from secinfer.runtime.pool import PrepStore

    class Item:
        def __init__(self, n):
            self.n, self.wiped = n, False

        def wipe(self):
            self.wiped = True
    store = PrepStore(3)
    items = [Item(i) for i in range(5)]
    for i, it in enumerate(items):
        store.put(bytes([i]) * 16, it)
    assert len(store) == 3 and store.dropped == 2 and items[0].wiped and items[1].wiped   # oldest dropped
    got = []
    barrier = threading.Barrier(8)

    def taker():
        barrier.wait()
        got.append(store.take(bytes([2]) * 16))
    ts = [threading.Thread(target=taker) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert [g for g in got if g is not None] == [items[2]]       # eight concurrent takers, one item
    assert store.take(bytes([2]) * 16) is None                   # gone for good
    pid, it = store.take_oldest()
    assert it is items[3] and pid == bytes([3]) * 16
    store.close()
    assert items[4].wiped and len(store) == 0
    store.put(b"x" * 16, Item(9))                                # after close: refused (wiped)
    assert len(store) == 0


def test_malicious_astra_served_on_prepared_material(servers):
    """Malicious astra over real processes: the prepared path (query mask handed over with
    the prep-mask check) gives the reference's answer, session after session."""
    import numpy as np

    from secinfer.arith.fixed import get_config
    from secinfer.ir.bundled import bundled_path
    from secinfer.ir.fixed_exec import run_fixed
    from secinfer.ir.onnx_import import load_model
    from secinfer.runtime.serve import ServeClient

    s = servers("astra", "bundled:diabetes-linreg", ("--security", "malicious", "--pool", "2"))
    s.wait_prep(2)
    cfg = get_config("fx64f13")
    ref = cfg.decode(run_fixed(load_model(str(bundled_path("diabetes-linreg"))), _x(), cfg))
    with ServeClient(s.cluster, s.client) as c:
        rs = [c.query(_x()) for _ in range(3)]
    assert all(np.allclose(r.output, ref, rtol=1e-3, atol=1e-2) for r in rs), [r.output for r in rs]
    assert len({r.info["prep"] for r in rs if r.info["prep"]}) == sum(1 for r in rs if r.info["prep"]) >= 2
    st = s.wait_settled()
    assert all(v["completed"] == 3 and v["failed"] == 0 for v in st.values()), st


def test_a_refused_prepared_item_is_retried_without_one_and_cancelled_cleanly(servers):
    """A server that no longer holds the session's prepared item (here: another session took
    it at p1 first) refuses go; the client cancels the session at the servers that accepted
    it (expired there, not failed) and retries with the offline phase in the session."""
    import os

    from secinfer.runtime.cluster import load_cluster
    from secinfer.runtime.serve import NONCE_BYTES, ServeClient, _control_socket, _request

    s = servers("astra", "bundled:diabetes-linreg", ("--pool", "2"))
    s.wait_prep(2)
    c = load_cluster(s.cluster)
    ident = c.load_secret(s.client)
    stolen = []
    with ServeClient(s.cluster, s.client) as cl:
        real = cl._ask_all

        def ask(msgs):
            m = next(iter(msgs.values()))
            if m.get("op") == "go" and m.get("prep") and not stolen:
                # another session at p1 names the same item first
                sk = _control_socket(cl._ctx, ident, c.party("p1").public_key, c.party("p1").connect_url())
                nonce = os.urandom(NONCE_BYTES).hex()
                r = _request(sk, {"op": "open", "nonce": nonce, "rows": 1}, 5, "p1")
                go = dict(m, nonce=nonce, ports=dict(m["ports"], p1=r["port"]), contribs=dict(m["contribs"], p1=r["contrib"]))
                stolen.append(_request(sk, go, 5, "p1"))
                _request(sk, {"op": "cancel", "nonce": nonce}, 5, "p1")
                sk.close(0)
            return real(msgs)
        cl._ask_all = ask
        r = cl.query(_x())
    assert stolen and stolen[0]["ok"]
    assert r.info["prep"] is None and r.output.shape == (1, 1)     # retried without a prepared item
    st = s.wait_settled()
    for pid in ("p0", "p2", "model_owner"):
        assert st[pid]["failed"] == 0 and st[pid]["expired"] == 1 and st[pid]["completed"] == 1, (pid, st[pid])
    assert st["p1"]["failed"] == 0 and st["p1"]["completed"] == 1
