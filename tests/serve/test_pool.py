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
